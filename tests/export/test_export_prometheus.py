"""`affmon export` scraped by a real Prometheus server (tests/helpers/prom.py: Debian's binary that
tests/run unpacks, on 127.0.0.1, its data in a temporary directory, killed when the test
ends, whatever happens). The exporter listens on 127.0.0.1 too.

A process pinned to one CPU with three busy threads is planted; the test waits for
Prometheus to have scraped its wait ratio and its findings, asserts their values through
the HTTP API, runs every query of the Grafana dashboard against the real engine, then
lets the process exit and waits for Prometheus to mark its series stale.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from affmon.collect.sampler import Sampler, Selection
from affmon.sources.live import load_topology
from tests.helpers.export import dashboard_queries, exposition, recorded, run, serving, wait_for
from tests.helpers.live import usable_cpus, workload
from tests.helpers.prom import binary, query, running, scrape_config

SCRAPE_INTERVAL = "1s"


@contextmanager
def prometheus(tmp: Path, target: str) -> Iterator[str]:
    """A Prometheus scraping ``target`` every second; yields its base URL."""
    with running(tmp, scrape_config({"affmon": [target]}, interval=SCRAPE_INTERVAL)) as server:
        yield server.base


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
