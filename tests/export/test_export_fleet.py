"""A fleet on one machine, end to end: five ``affmon export --replay`` processes on
127.0.0.2-6 (one port), each replaying a recording of tests/fixtures/recordings/, scraped
every second by a real Prometheus on 127.0.0.1 (tests/helpers/prom.py) that evaluates
contrib/prometheus/affmon-rules.yml every second. The rules are loaded from a copy whose
every ``for`` is 3 s (the shipped 2 to 15 minutes would make a half-hour test); the
expressions are the shipped ones.

Through Prometheus's HTTP API: the right alerts fire for the right instances, pids, codes
and severities, the healthy node fires none, nothing else fires; and each instance's
series, as Prometheus ingested them, are what the catalogue's arithmetic
(``affmon.export.scale``) says a node of that shape serves. Every wait polls with a
deadline; nothing assumes how fast the machine is.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from affmon.export.scale import NodeShape, series_per_node
from tests.helpers.export import REPO, wait_for
from tests.helpers.prom import FLEET, api, query, replaying_exporters, running, scrape_config, shared_port

RULES = REPO / "contrib" / "prometheus" / "affmon-rules.yml"
FOR = "3s"

Alert = tuple[str, str, str, str, str, str]  # alertname, recording, pid, code, gpu, severity


def starved(recording: str, pid: int, code: str, severity: str) -> Alert:
    return ("AffmonJobStarvedOfCpu", recording, str(pid), code, "", severity)


def gpu_starved(recording: str, pid: int, severity: str) -> Alert:
    return ("AffmonGpuStarved", recording, str(pid), "GPU_STARVED", "0", severity)


EXPECTED: set[Alert] = {
    starved("hogs", 608, "STARVED", "critical"),
    starved("hogs", 608, "CONTENDED", "critical"),
    gpu_starved("hogs", 608, "critical"),
    starved("narrow", 695, "STARVED", "critical"),
    starved("narrow", 695, "MASK_TOO_NARROW", "critical"),
    gpu_starved("narrow", 695, "critical"),
    *(starved("ddp2_overlap", pid, code, "warning") for pid in (904, 905) for code in ("STARVED", "CONTENDED")),
    ("AffmonLoopBound", "input_bound", "616", "INPUT_BOUND", "", "critical"),
}


def allowed_to_flap(alert: Alert) -> bool:
    """Findings that come and go with the recorded loop's phases: their alerts may fire
    (their series can hold for longer than the shortened ``for``) or not. ddp2_overlap's
    GPU_STARVED holds for each rank in most intervals, not all."""
    name, recording, pid = alert[:3]
    return recording == "ddp2_overlap" and name == "AffmonGpuStarved" and pid in ("904", "905")


@contextmanager
def exporters(port: int) -> Iterator[None]:
    """The five exporters (tests/helpers/prom.py), each killed when the test ends, whatever happens."""
    with replaying_exporters(FLEET, port):
        yield


@contextmanager
def prometheus(tmp: Path, port: int) -> Iterator[str]:
    """Prometheus scraping the fleet and evaluating the rules (``for`` shortened) every second."""
    rules = tmp / "affmon-rules.yml"
    text, count = re.subn(r"(?m)^(\s+)for: \d+[smh]$", rf"\1for: {FOR}", RULES.read_text())
    assert count == 9, count  # every alert of the shipped file
    rules.write_text(text)
    config = scrape_config({"affmon": [f"{address}:{port}" for address in FLEET]}, rule_files=(str(rules),))
    with running(tmp, config) as server:
        yield server.base


def firing(base: str, port: int) -> set[Alert]:
    recording = {f"{address}:{port}": name for address, name in FLEET.items()}
    out = set()
    for alert in api(base, "/api/v1/alerts")["data"]["alerts"]:
        if alert["state"] != "firing":
            continue
        labels: dict[str, str] = alert["labels"]
        out.add(
            (
                labels["alertname"],
                recording.get(labels.get("instance", ""), labels.get("instance", "")),
                labels.get("pid", ""),
                labels.get("code", ""),
                labels.get("gpu", ""),
                labels.get("severity", ""),
            )
        )
    return out


def counts(base: str, at: float, promql: str) -> dict[str, int]:
    """instance -> value of ``promql`` (a ``by (instance)`` aggregation), evaluated at ``at``."""
    answer = api(base, "/api/v1/query", query=promql, time=f"{at:.3f}")
    assert answer["status"] == "success", answer
    return {r["metric"]["instance"]: int(float(r["value"][1])) for r in answer["data"]["result"]}


def shapes(base: str, at: float) -> dict[str, tuple[NodeShape, int, int]]:
    """Each instance's shape, read from its own series, the samples its last scrape before
    ``at`` held, and its series Prometheus has at ``at``."""

    def per(metric: str) -> dict[str, int]:
        return counts(base, at, f'count by (instance) ({metric}{{job="affmon"}})')

    scraped = counts(base, at, 'sum by (instance) (scrape_samples_scraped{job="affmon"})')
    ingested = counts(base, at, 'count by (instance) ({job="affmon", __name__=~"affmon_.+|process_.+"})')
    processes, waits = per("affmon_process_info"), per("affmon_process_wait_ratio")
    out = {}
    for instance in scraped:
        shape = NodeShape(
            processes=processes.get(instance, 0),
            gpus=per("affmon_gpu_info").get(instance, 0),
            probed=per("affmon_loop_gpu_busy_ratio").get(instance, 0),
            placed=per("affmon_process_context_info").get(instance, 0),
            memory_nodes=per("affmon_process_memory_bytes").get(instance, 0),
            idle=processes.get(instance, 0) - waits.get(instance, 0),
            findings=per("affmon_finding_info").get(instance, 0),
            replay=True,
        )
        out[instance] = (shape, scraped[instance], ingested.get(instance, 0))
    return out


def test_five_replaying_exporters_fire_the_right_alerts_through_a_real_prometheus(tmp_path):
    started = time.monotonic()
    for _ in range(3):  # a port taken between probing and the exporters binding it: another
        port = shared_port(FLEET)
        try:
            with exporters(port):
                print(f"\nfive exporters serving after {time.monotonic() - started:.1f} s")
                with prometheus(tmp_path, port) as base:
                    print(f"prometheus ready after {time.monotonic() - started:.1f} s")
                    run_fleet(base, port, started)
            break
        except AssertionError as exc:
            if "in use" not in str(exc):
                raise
    else:
        raise AssertionError("no port the five exporters could all bind")
    print(f"fleet test: {time.monotonic() - started:.1f} s")


def run_fleet(base: str, port: int, started: float) -> None:
    instances = {f"{address}:{port}" for address in FLEET}
    wait_for(
        lambda: {r["metric"]["instance"] for r in query(base, 'up{job="affmon"} == 1')} == instances,
        60,
        "Prometheus to scrape all five exporters",
    )
    last: set[Alert] = set()

    def all_expected_fire() -> bool:
        nonlocal last
        last = firing(base, port)
        return last >= EXPECTED

    try:
        wait_for(all_expected_fire, 90, "every expected alert to fire")
    except AssertionError:
        raise AssertionError(f"missing: {sorted(EXPECTED - last)}; firing: {sorted(last)}") from None
    print(f"every expected alert firing after {time.monotonic() - started:.1f} s")
    # Nothing else: no alert for the healthy node, no exporter down or stuck, no other code.
    extra = {a for a in firing(base, port) - EXPECTED if not allowed_to_flap(a)}
    assert extra == set(), sorted(extra)
    assert not [a for a in last if a[1] == "clean"]
    clean = f"127.0.0.2:{port}"
    assert query(base, f'affmon_process_info{{instance="{clean}"}}')  # it is served, and healthy
    assert query(base, f'affmon_finding_info{{instance="{clean}"}}') == []
    assert query(base, 'ALERTS{alertstate="firing", alertname=~"AffmonExporter.*"}') == []

    # Scale: each instance's series as Prometheus ingested them, against the catalogue's count.
    # One instant for every query, 3 s back: each instance's last scrape before it is
    # committed (scrapes time out after 1 s), so every query reads the same scrape. Polled
    # until that instant has a scrape of every instance, and one that did not fail (a failed
    # scrape on a loaded machine leaves its instance's series as they were before it).
    deadline = time.monotonic() + 30
    while True:
        measured = shapes(base, time.time() - 3)
        consistent = all(scraped == ingested for _, scraped, ingested in measured.values())
        if (set(measured) == instances and consistent) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert set(measured) == instances, sorted(measured)
    print("| instance | recording | processes | probed | GPUs | findings | idle | series: catalogue | scraped |")
    print("|---|---|---|---|---|---|---|---|---|")
    for instance, (shape, scraped, _) in sorted(measured.items()):
        recording = FLEET[instance.rsplit(":", 1)[0]]
        print(
            f"| {instance.rsplit(':', 1)[0]} | {recording} | {shape.processes} | {shape.probed} | {shape.gpus} | "
            f"{shape.findings} | {shape.idle} | {series_per_node(shape)} | {scraped} |"
        )
    for instance, (shape, scraped, ingested) in measured.items():
        assert ingested == scraped, (instance, ingested, scraped)  # every series served is one sample a scrape
        assert series_per_node(shape) == scraped, (instance, shape, scraped)
    hogs = measured[f"127.0.0.3:{port}"][0]
    assert hogs.processes >= 5 and hogs.gpus == 1 and hogs.findings == 3
    assert measured[f"127.0.0.5:{port}"][0].gpus == 2
