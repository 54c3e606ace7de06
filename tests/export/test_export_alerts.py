"""Every finding alert and per-job rollup of contrib/prometheus/affmon-rules.yml, tested by
``promtool test rules`` on the series the exporter serves: the input series are lines of
its exposition (prometheus-client's text format of ``families``), with the ``job`` and
``instance`` labels a scrape adds, not hand-written label sets.

* Each finding code an alert covers, at each severity it can have (warn, bad), fires that
  alert, with the severity it maps to (critical, warning), only once its ``for`` has passed,
  and its description says what to run where (``affmon diagnose --pid PID`` on the host).
* A healthy job (the recorded H200 rank and its workers, no finding) served for an hour by an
  exporter that samples at every scrape fires no alert at all.
* The Slurm rollups add a job's processes over two nodes, once each whichever scrape job
  serves them.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from affmon.core.rules.base import Finding, Severity
from affmon.export.state import ExportState
from tests.helpers.export import exposition, recorded, run
from tests.helpers.export import state as placed_state
from tests.helpers.prom import binary

RULES = Path(__file__).resolve().parent.parent.parent / "contrib" / "prometheus" / "affmon-rules.yml"
GPU_CODES = {"GPU_STARVED", "PCIE_DEGRADED", "CROSS_NUMA"}


def rules() -> list[dict[str, Any]]:
    """The alerting rules of the file, read line by line (the file's own layout: ``alert``,
    a folded ``expr`` on the next line, ``for``, double-quoted annotations; no YAML library
    is a dependency)."""
    found: list[dict[str, Any]] = []
    lines = RULES.read_text().splitlines()
    for i, line in enumerate(lines):
        if m := re.fullmatch(r"\s+- alert: (\w+)", line):
            found.append({"alert": m[1], "annotations": {}})
        elif found and line.strip() == "expr: >-" and "expr" not in found[-1]:
            found[-1]["expr"] = lines[i + 1].strip()
        elif found and (m := re.fullmatch(r"\s+expr: (.+)", line)) and "expr" not in found[-1]:
            found[-1]["expr"] = m[1]
        elif found and (m := re.fullmatch(r"\s+for: (\w+)", line)):
            found[-1]["for"] = m[1]
        elif found and (m := re.fullmatch(r"\s+(summary|description): (\".*\")", line)):
            found[-1]["annotations"][m[1]] = json.loads(m[2])
        elif re.fullmatch(r"\s+- record: .*", line):
            break
    return found


def finding_alerts() -> list[dict[str, Any]]:
    return [r for r in rules() if "affmon_finding_info" in r["expr"]]


def codes_of(rule: dict[str, Any]) -> list[str]:
    (codes,) = re.findall(r'code=~"([A-Z_|]+)"', rule["expr"])
    return codes.split("|")


def minutes(duration: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([mh])", duration).groups()  # type: ignore[union-attr]
    return int(number) * (60 if unit == "h" else 1)


@pytest.fixture(scope="module")
def healthy() -> ExportState:
    topo, samples = recorded("narrow")
    return replace(run(*samples, topo=topo), findings=())


def series_lines(st: ExportState, instance: str, job: str = "affmon", threads: bool = False) -> list[dict[str, str]]:
    """promtool input series of every sample the exporter serves for ``st``: counters rising
    by 15 a minute, gauges constant."""
    out = []
    for family in text_string_to_metric_families(exposition(st, threads=threads)):
        for s in family.samples:
            labels = {**s.labels, "job": job, "instance": instance}
            selector = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            values = f"{s.value:g}+15x90" if family.type == "counter" else f"{s.value:g}x90"
            out.append({"series": f"{s.name}{{{selector}}}", "values": values})
    return out


def with_finding(st: ExportState, code: str, severity: Severity) -> tuple[ExportState, str]:
    snap = st.snapshot
    assert snap is not None
    root = next(p.sample.pid for p in snap.processes if p.sample.gpu_indices)
    evidence = {"gpu": 0} if code in GPU_CODES else {}
    finding = Finding(code, severity, root, (root,), f"planted {code}", evidence)
    return replace(st, findings=(finding,)), str(root)


def promtool_test(tmp: Path, tests: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    path = tmp / "generated.test.yml"
    # JSON is YAML: promtool reads it as it is
    path.write_text(json.dumps({"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": tests}))
    return subprocess.run([binary("promtool"), "test", "rules", str(path)], capture_output=True, text=True, timeout=120)


def test_every_finding_alert_fires_on_the_exporters_series_after_its_for(healthy, tmp_path):
    tests = []
    covered = set()
    for rule in finding_alerts():
        wait = minutes(rule["for"])
        for code in codes_of(rule):
            for severity, alert_severity in ((Severity.WARN, "warning"), (Severity.BAD, "critical")):
                st, pid = with_finding(healthy, code, severity)
                inputs = [s for s in series_lines(st, "gpu-node-007") if s["series"].startswith("affmon_finding_info")]
                assert len(inputs) == 1, inputs
                labels = {"alertname": rule["alert"], "instance": "gpu-node-007", "pid": pid, "code": code}
                labels["severity"] = alert_severity
                if code in GPU_CODES:
                    labels["gpu"] = "0"
                tests.append(
                    {
                        "interval": "1m",
                        "input_series": inputs,
                        "alert_rule_test": [
                            {"eval_time": f"{wait - 1}m", "alertname": rule["alert"], "exp_alerts": []},
                            {
                                "eval_time": f"{wait + 1}m",
                                "alertname": rule["alert"],
                                "exp_alerts": [{"exp_labels": labels, "exp_annotations": annotations(rule, labels)}],
                            },
                        ],
                    }
                )
                covered.add(code)
    assert covered >= {
        "STARVED",
        "MASK_TOO_NARROW",
        "OVERSUBSCRIBED",
        "CONFINED_THREAD",
        "CONTENDED",
        "CROSS_NUMA",
        "GPU_STARVED",
        "PCIE_DEGRADED",
        "AFFINITY_DRIFT",
        "REMOTE_MEMORY",
        "INPUT_BOUND",
        "LOOP_BOUND",
        "GIL_BOUND",
        "STALLED",
    }
    tested = promtool_test(tmp_path, tests)
    assert tested.returncode == 0, tested.stdout[-4000:] + tested.stderr[-2000:]


def annotations(rule: dict[str, Any], labels: dict[str, str]) -> dict[str, str]:
    """The rule's annotations as Prometheus expands them for a job's alert (``pid`` set): the
    template's ``if`` taken, ``$labels.x`` substituted. Checked here: the description names
    the command to run and the host."""
    out = {}
    for key, template in rule["annotations"].items():
        text = re.sub(r"\{\{ if \$labels\.pid \}\}(.*?)\{\{ else \}\}.*?\{\{ end \}\}", r"\1", template)
        text = re.sub(r"\{\{ if \$labels\.pid \}\}(.*?)\{\{ end \}\}", r"\1", text)
        out[key] = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m[1], ""), text)
    assert f"`affmon diagnose --pid {labels['pid']}` on {labels['instance']}" in out["description"]
    return out


def test_a_healthy_job_fires_nothing_in_an_hour(healthy, tmp_path):
    inputs = series_lines(healthy, "gpu-node-001") + series_lines(healthy, "gpu-node-001", "affmon-threads", True)
    inputs += [
        {"series": 'up{job="affmon", instance="gpu-node-001"}', "values": "1x90"},
        {"series": 'up{job="affmon-threads", instance="gpu-node-001"}', "values": "1x90"},
    ]
    assert not [s for s in inputs if s["series"].startswith("affmon_finding_info")]
    names = [r["alert"] for r in rules()]
    assert len(names) == len(re.findall(r"- alert: ", RULES.read_text()))
    checks = [{"eval_time": f"{t}m", "alertname": name, "exp_alerts": []} for name in names for t in (15, 60)]
    tested = promtool_test(tmp_path, [{"interval": "1m", "input_series": inputs, "alert_rule_test": checks}])
    assert tested.returncode == 0, tested.stdout[-4000:] + tested.stderr[-2000:]


def test_slurm_rollups_add_a_jobs_processes_over_its_nodes_once_each(tmp_path):
    """A job placed by Slurm (4242.0) with a rank and a worker on each of two nodes, each node
    served by two scrape jobs; its wait counters rise 15 s and its CPU counters 45 s a minute
    per process: the job waits a quarter of the time, uses 0.25 x 4 placed processes CPUs over
    two nodes, and its rank's STARVED counts once per node."""
    st, rank, _, _ = placed_state()
    starved = Finding("STARVED", Severity.BAD, rank, (rank,), "planted", {})
    st = replace(st, findings=(starved,))
    inputs = []
    for node in ("n1", "n2"):
        for job, threads in (("affmon", False), ("affmon-threads", True)):
            for s in series_lines(st, node, job, threads):
                if s["series"].startswith("affmon_process_cpu_seconds_total"):
                    s["values"] = "0+45x90"
                elif s["series"].startswith("affmon_process_run_queue_wait_seconds_total"):
                    s["values"] = "0+15x90"
                inputs.append(s)
    placed = {"slurm_job": "4242.0"}
    checks = [
        ("affmon:slurm_job_run_queue_wait:ratio_rate5m", 0.25, placed),
        ("affmon:slurm_job_cpus_used:rate5m", 4 * 0.75, placed),
        ("affmon:slurm_job_nodes:count", 2, placed),
        ("affmon:slurm_job_findings:count", 2, {**placed, "code": "STARVED", "severity": "bad"}),
    ]
    tests = [
        {
            "interval": "1m",
            "input_series": inputs,
            "promql_expr_test": [
                {"expr": name, "eval_time": "30m", "exp_samples": [{"labels": _labels(name, labels), "value": value}]}
                for name, value, labels in checks
            ],
        }
    ]
    tested = promtool_test(tmp_path, tests)
    assert tested.returncode == 0, tested.stdout[-4000:] + tested.stderr[-2000:]


def _labels(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
