"""What the exporter's tests share: hand-made samples and the state they step to, the
recorded jobs, the exposition prometheus-client itself formats and parses, an exporter
serving on loopback, ``affmon export`` run as a user runs it, the Grafana dashboard's
queries, a rank placed by Slurm with its loop probed, and a recording replayed."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from affmon.core.model.context import Context
from affmon.core.model.loop import LoopBreakdown
from affmon.core.model.samples import GpuSample, NodeMemory, ProcessSample, Sample, ThreadSample
from affmon.core.model.topology import NumaNode, Topology
from affmon.core.recording.format import read_recording
from affmon.core.rules.loop_report import LoopReport
from affmon.export.collector import StateCollector
from affmon.export.families import families
from affmon.export.replay import ReplayFeed
from affmon.export.service import Exporter
from affmon.export.state import ExportState, step

REPO = Path(__file__).parent.parent.parent
DASHBOARD = REPO / "contrib" / "grafana" / "affmon.json"
DOCS = REPO / "docs" / "export.md"
RECORDINGS = Path(__file__).parent.parent / "fixtures" / "recordings"


# -- hand-made samples --------------------------------------------------------------------


def topology() -> Topology:
    return Topology.build(
        source="sysfs",
        online_cpus=range(4),
        allowed_cpus=range(4),
        numa_nodes=[NumaNode(0, frozenset({0, 1})), NumaNode(1, frozenset({2, 3}))],
        packages=[],
        cores=[],
        l3_groups=[],
        gpus=[],
    )


def thread(
    tid: int, cpu_ms: int, wait_ms: int = 0, *, start: int = 1, invol: int = 0, mig: int | None = 0
) -> ThreadSample:
    return ThreadSample(
        tid=tid,
        start_ticks=start,
        name=f"t{tid}",
        state="R",
        psr=2,
        flags=0,
        cpu_ns=cpu_ms * 1_000_000,
        wait_ns=wait_ms * 1_000_000,
        timeslices=1,
        voluntary_switches=1,
        involuntary_switches=invol,
        migrations=mig,
        allowed_cpus=frozenset({2}),
    )


def process(pid: int, *threads: ThreadSample, start: int = 100) -> ProcessSample:
    return ProcessSample(
        pid=pid,
        start_ticks=start,
        ppid=1,
        name="python3",
        uid=0,
        user="root",
        cmdline="python3 train.py",
        mems_allowed=frozenset({0, 1}),
        cgroup_cpus=None,
        threads=threads,
        training=True,
    )


def sample(t: float, *processes: ProcessSample, gpus: tuple[GpuSample, ...] = ()) -> Sample:
    return Sample(monotonic_s=t, wall_time_s=1.8e9 + t, duration_s=0.01, processes=processes, gpus=gpus)


def run(*samples: Sample, topo: Topology | None = None) -> ExportState:
    state = ExportState()
    for s in samples:
        state = step(state, s, topo or topology(), exporter_cpu_s=0.5)
    return state


def series(state: ExportState, name: str, threads: bool = False) -> dict[tuple[str, ...], float]:
    (family,) = [f for f in families(state, threads=threads) if f.name == name]
    return dict(family.series)


# -- recorded jobs, and what the HTTP endpoint sends -----------------------------------------


def recorded(name: str) -> tuple[Topology, list[Sample]]:
    with gzip.open(RECORDINGS / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        header, samples = read_recording(f, name)
        return header.topology, list(samples)


def exposition(state: ExportState, threads: bool = False) -> str:
    """What the HTTP endpoint would send, formatted by prometheus-client itself."""
    registry = CollectorRegistry()
    registry.register(StateCollector(lambda: state, threads=threads))
    return generate_latest(registry).decode()


def parsed(text: str) -> dict[str, tuple[str, list]]:
    """Sample name -> (family type, samples)."""
    out: dict[str, tuple[str, list]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, (fam.type, []))[1].append(s)
    return out


# -- live: an exporter serving on loopback ----------------------------------------------------


def wait_for(what: Callable[[], object], timeout_s: float, message: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not what():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s} s: {message}")
        time.sleep(0.05)


def fetch(url: str, timeout_s: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return response.read().decode()


@contextmanager
def serving(sample: Callable[[], Sample], topo: Topology, **options) -> Iterator[tuple[Exporter, str]]:
    exporter = Exporter(sample, topo, **options)
    host, port = exporter.listen("127.0.0.1", 0)
    exporter.start()
    try:
        yield exporter, f"http://{host}:{port}/metrics"
    finally:
        exporter.stop()


# -- the command line: `affmon export ...` as a user runs it -------------------------------------


def affmon(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "affmon", *args], capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


def one_line_error(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("affmon: ") and out.stderr.count("\n") == 1, out.stderr
    assert "Traceback" not in out.stderr
    return out.stderr


# -- the dashboard --------------------------------------------------------------------------


def dashboard_queries() -> list[str]:
    """Every PromQL expression (panels, nested in collapsed rows too) and variable query."""
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("expr", "definition") and isinstance(value, str):
                    found.append(value)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(json.loads(DASHBOARD.read_text()))
    return found


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\baffmon_[a-z0-9_]+", expr))


# -- a rank placed by Slurm, its pages on two nodes, its loop probed (docs/export.md's table) -----

SHARES = {"on_cpu": 0.1, "cpu_wait": 0.05, "data_wait": 0.6, "gpu_wait": 0.2, "other": 0.05}


def state() -> tuple[ExportState, int, int, int]:
    topo, samples = recorded("narrow")
    base = run(*samples, topo=topo)
    snap = base.snapshot
    assert snap is not None
    watched = [p for p in snap.processes if p.sample.watched and not p.sample.kernel]
    rank = next(p for p in watched if p.sample.gpu_indices)
    worker, plain = [p for p in watched if p is not rank][:2]
    placed = Context(scheduler="slurm", slurm_job_id="4242", slurm_step="0", local_rank=0)
    changed = {
        rank.sample.pid: replace(rank.sample, context=placed, memory=NodeMemory({0: 1 << 30, 1: 1 << 20}, {}, 3)),
        worker.sample.pid: replace(worker.sample, context=placed, memory=NodeMemory({0: 1 << 20}, {}, 1)),
        plain.sample.pid: replace(plain.sample, context=Context(from_environ=True), memory=None),
    }
    processes = tuple(replace(p, sample=changed.get(p.sample.pid, p.sample)) for p in snap.processes)
    breakdown = LoopBreakdown(rank.sample.pid, rank.sample.pid, 1.0, SHARES, 0.3, True, 0.0, 20)
    report = LoopReport(rank.sample.pid, rank.sample.name, None, breakdown, "input", "", None)  # type: ignore[arg-type]
    loops = {rank.sample.pid: report}
    done = replace(base, snapshot=replace(snap, processes=processes), loops=loops, findings=())
    return done, rank.sample.pid, worker.sample.pid, plain.sample.pid


# -- a recording replayed as if live (affmon export --replay) ------------------------------------


def hogs_feed(**options) -> ReplayFeed:
    return ReplayFeed(str(RECORDINGS / "hogs.jsonl.gz"), **options)
