"""`affmon export` scraped by a real Prometheus server: Debian's `prometheus` binary, which
tests/run unpacks under .cache/prometheus/ without installing the package (installed, it
starts a service of its own on :9090), else one on PATH. Both listen on 127.0.0.1 only;
Prometheus keeps its data in a temporary directory and is killed when the test ends,
whatever happens. A missing binary fails the test: it does not skip.

A process pinned to one CPU with three busy threads is planted; the test waits for
Prometheus to have scraped its wait ratio and its findings, asserts their values through
the HTTP API, runs every query of the Grafana dashboard against the real engine, then
lets the process exit and waits for Prometheus to mark its series stale.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from affmon.collect.sampler import Sampler, Selection
from affmon.sources.live import load_topology
from tests.live import usable_cpus, workload
from tests.test_export import dashboard_queries, exposition, recorded, run, serving, wait_for

SCRAPE_INTERVAL = "1s"
CACHE = Path(__file__).resolve().parent.parent / ".cache" / "prometheus" / "usr" / "bin"  # tests/run's


def binary(name: str) -> str:
    """``name`` (prometheus, promtool) as tests/run unpacked it, else from PATH."""
    cached = CACHE / name
    if cached.is_file() and os.access(cached, os.X_OK):
        return str(cached)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"no {name} in {CACHE} or on PATH: tests/run unpacks Debian's prometheus package there")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def api(base: str, path: str, **params: str) -> Any:
    data = urllib.parse.urlencode(params).encode() if params else None
    with urllib.request.urlopen(f"{base}{path}", data=data, timeout=5) as response:
        return json.loads(response.read())


def query(base: str, promql: str) -> list[dict[str, Any]]:
    answer = api(base, "/api/v1/query", query=promql)
    assert answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def ready(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/-/ready", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@contextmanager
def prometheus(tmp: Path, target: str) -> Iterator[str]:
    """A Prometheus scraping ``target`` every second; yields its base URL."""
    config = tmp / "prometheus.yml"
    config.write_text(
        "global:\n"
        f"  scrape_interval: {SCRAPE_INTERVAL}\n"
        f"  scrape_timeout: {SCRAPE_INTERVAL}\n"
        "scrape_configs:\n"
        "  - job_name: affmon\n"
        f"    static_configs: [{{targets: ['{target}']}}]\n"
    )
    log = tmp / "prometheus.log"
    for _ in range(3):  # the free port may be taken between probing and binding: try another
        base = f"http://127.0.0.1:{free_port()}"
        with log.open("w") as out:
            proc = subprocess.Popen(
                [
                    binary("prometheus"),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp / 'data'}",
                    f"--web.listen-address={base.removeprefix('http://')}",
                    "--log.level=warn",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + 20
            while proc.poll() is None and not ready(base) and time.monotonic() < deadline:
                time.sleep(0.1)
            if proc.poll() is None and ready(base):
                yield base
                return
        finally:
            proc.kill()
            proc.wait()
    raise AssertionError(f"prometheus did not start:\n{log.read_text()[-3000:]}")


def value(result: list[dict[str, Any]]) -> float:
    (series,) = result
    return float(series["value"][1])


def grafana_to_promql(expr: str) -> str:
    """Grafana's variables as Prometheus sees them once Grafana substituted them."""
    expr = expr.replace("$__rate_interval", "10s")
    return re.sub(r"\$\{?(instance|job)\}?", ".*", expr)


def test_prometheus_scrapes_the_wait_ratio_and_findings_of_a_planted_process(tmp_path):
    cpu = usable_cpus()[0]
    with ExitStack() as running:
        job = ExitStack()
        running.callback(job.close)
        w = job.enter_context(workload("--cpus", str(cpu), "--busy", "3"))
        pid = w["pid"]
        sampler = Sampler("/", Selection(pids=(pid,), others=True))
        exporter, url = running.enter_context(serving(sampler.sample, load_topology(), interval_s=0.5))
        target = url.removeprefix("http://").removesuffix("/metrics")
        base = running.enter_context(prometheus(tmp_path, target))

        selector = f'{{job="affmon", instance="{target}", pid="{pid}"}}'
        wait_for(
            lambda: len(query(base, f"affmon_finding_info{selector}")) >= 2,
            20,
            "Prometheus to scrape two findings of the planted process",
        )
        assert value(query(base, f"up{{instance='{target}'}}")) == 1
        findings = {r["metric"]["code"]: r for r in query(base, f"affmon_finding_info{selector}")}
        for code in ("STARVED", "MASK_TOO_NARROW"):
            assert findings[code]["metric"]["severity"] == "bad"
            assert float(findings[code]["value"][1]) == 1
        assert value(query(base, f"affmon_process_wait_ratio{selector}")) > 0.4  # three threads, one CPU
        assert value(query(base, f"affmon_process_mask_cpus{selector}")) == 1
        assert value(query(base, f"affmon_process_threads{selector}")) == 4
        assert value(query(base, f"affmon_process_cpu_seconds_total{selector}")) > 0

        # The dashboard's queries are valid PromQL for the real engine; the per-job wait
        # ratio (its central panel) reads the planted job as starved.
        queries = [grafana_to_promql(q) for q in dashboard_queries() if not q.startswith("label_values(")]
        for promql in queries:
            query(base, promql)
        (per_job,) = [q for q in queries if "sum by (instance, job_pid)" in q]
        wait_for(lambda: query(base, per_job), 10, "two scrapes for rate()")
        ratios = {r["metric"]["job_pid"]: float(r["value"][1]) for r in query(base, per_job)}
        assert ratios[str(pid)] > 0.4

        # The process exits: its series vanish from the next scrape, and Prometheus marks them stale.
        job.close()
        wait_for(lambda: not query(base, f"affmon_process_threads{selector}"), 10, "the exited process's series")
        assert query(base, f"affmon_finding_info{selector}") == []
        assert exporter.state.samples_total > 2


def test_promtool_finds_nothing_to_lint_in_the_text_exposition():
    """``promtool check metrics`` (Prometheus's own linter: names, units, counters' ``_total``,
    help texts) on a recorded H200 job with its GPUs and findings, per-thread series served."""
    topo, samples = recorded("narrow")
    text = exposition(run(*samples, topo=topo), threads=True)
    assert "affmon_thread_cpu_seconds_total" in text and "affmon_finding_info{" in text
    checked = subprocess.run([binary("promtool"), "check", "metrics"], input=text, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
