"""Series per process, counted on what the exporter serves and held against the table in
docs/export.md ("Label cardinality"): a rank (placed by Slurm, pages on two NUMA nodes, its
loop probed), a DataLoader worker (placed, pages on one node) and a process nothing placed
(its environment read, every context value unknown: no context series at all). With
``--threads``, the series per thread."""

from __future__ import annotations

import re
from dataclasses import replace

from affmon.core.model.context import Context
from affmon.core.model.loop import LoopBreakdown
from affmon.core.model.samples import NodeMemory
from affmon.core.rules.loop_report import LoopReport
from affmon.export.families import families
from affmon.export.state import ExportState
from tests.export.test_export import DOCS, recorded, run

SHARES = {"on_cpu": 0.1, "cpu_wait": 0.05, "data_wait": 0.6, "gpu_wait": 0.2, "other": 0.05}


def fleet_table() -> dict[str, int]:
    """The count column of the docs' per-process rows, by their first words."""
    text = DOCS.read_text()
    rows = dict(re.findall(r"^\| (always|placed|pages|loop|thread)\b[^|]*\| (\d+) ", text, re.MULTILINE))
    return {k: int(v) for k, v in rows.items()}


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


def per_pid(st: ExportState, pid: int, *, threads: bool = False) -> dict[str, int]:
    counted: dict[str, int] = {}
    for family in families(st, threads=threads):
        if "pid" not in family.spec.labels or "tid" in family.spec.labels:
            continue
        at = family.spec.labels.index("pid")
        n = sum(1 for labels, _ in family.series if labels[at] == str(pid))
        if n:
            counted[family.name] = n
    return counted


def test_series_per_process_are_those_of_the_docs_table():
    table = fleet_table()
    assert set(table) == {"always", "placed", "pages", "loop", "thread"}
    st, rank, worker, plain = state()
    always = sum(per_pid(st, plain).values())
    assert always == table["always"]
    assert "affmon_process_context_info" not in per_pid(st, plain)  # nothing placed it: no all-empty series
    assert sum(per_pid(st, worker).values()) == table["always"] + table["placed"] + 1 * table["pages"]
    assert sum(per_pid(st, rank).values()) == table["always"] + table["placed"] + 2 * table["pages"] + table["loop"]


def test_series_per_thread_are_those_of_the_docs_table():
    st, _, _, _ = state()
    counted: dict[tuple[str, str], int] = {}
    for family in families(st, threads=True):
        if "tid" in family.spec.labels:
            for labels, _ in family.series:
                key = (labels[family.spec.labels.index("pid")], labels[family.spec.labels.index("tid")])
                counted[key] = counted.get(key, 0) + 1
    # at most: a thread that neither ran nor waited in the interval has no wait ratio
    assert counted and max(counted.values()) == fleet_table()["thread"]
    assert min(counted.values()) >= fleet_table()["thread"] - 1


def test_no_label_of_a_counter_or_a_gauge_can_change_while_the_process_lives():
    """Only ``_info`` series carry names; every other per-process or per-thread series is
    keyed by pid (and tid) and what cannot change (a NUMA node, a share's name)."""
    st, _, _, _ = state()
    for family in families(st, threads=True):
        if family.name.endswith("_info"):
            continue
        assert not {"name", "thread", "gpu", "job_pid", "user"} & set(family.spec.labels) or family.name.startswith(
            "affmon_gpu_"
        ), family.name
