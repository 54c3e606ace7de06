"""A split placement kept by ``affmon tune`` (main loop and DataLoader workers on separate
cores), on real processes (``split_job.py``: a main process and a worker, each creating
threads and workers on request), scored by a fake GPU that runs best when the main thread
has the main part: the journal then expects each process's own part, so ``diagnose``
reports no drift over a real sample; and one ``affmon undo PID`` puts every thread back to
its mask from before tune, threads and workers created after the split included. Also:
a crash between the two parts leaves an entry that undo takes back whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from affmon.actions.journal import Journal, expected_masks
from affmon.actions.pin import pin
from affmon.actions.threads import OsAffinity
from affmon.actions.tune import Tuner
from affmon.actions.undo import undo
from affmon.collect.sampler import Sampler, Selection
from affmon.collect.sysfs_topology import read_topology
from affmon.core.model.cpuset import CpuSet
from affmon.core.model.topology import CacheGroup, Core, NumaNode, Package, Topology
from affmon.core.plan.placements import Placement
from affmon.nvml import NvmlGateway
from tests.helpers.fake_pynvml import FakeGpu, FakeNvml
from tests.helpers.live import Driven, driven, usable_cpus
from tests.helpers.proc import start_ticks, thread_masks

REPO = Path(__file__).resolve().parent.parent.parent
SPLIT_JOB = Path(__file__).resolve().parent.parent / "helpers" / "split_job.py"


class HeardOps(OsAffinity):
    """The real system calls; ``on_set`` hears every mask set."""

    def __init__(self, on_set: Callable[[int, CpuSet], None]) -> None:
        self.on_set = on_set

    def set(self, tid: int, cpus: CpuSet) -> None:
        super().set(tid, cpus)
        self.on_set(tid, frozenset(cpus))


def one_core_per_cpu() -> Topology:
    """This machine's CPUs, each its own core (whatever SMT the CI machine has, the test's
    split of two CPUs keeps the planner's rules)."""
    real = read_topology("/")
    online = real.online_cpus
    return Topology.build(
        source="test",
        online_cpus=online,
        allowed_cpus=real.allowed_cpus,
        numa_nodes=[NumaNode(0, online)],
        packages=[Package(0, online)],
        cores=[Core(i, frozenset({c})) for i, c in enumerate(sorted(online))],
        l3_groups=[CacheGroup(3, online)],
        gpus=[],
    )


def halves() -> tuple[CpuSet, CpuSet]:
    cpus = usable_cpus()
    assert len(cpus) >= 2, "needs two CPUs (CI has two)"
    return frozenset({cpus[0]}), frozenset({cpus[1]})


def affmon(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "affmon", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "XDG_STATE_HOME": str(state)},
    )


def drift_findings(state: Path, pid: int) -> list[dict[str, object]]:
    """``affmon diagnose --pid PID``'s AFFINITY_DRIFT findings over a real sample, with the
    journal under ``state``."""
    out = affmon(state, "diagnose", "--pid", str(pid), "--samples", "3", "--interval", "0.2", "--json")
    assert out.returncode in (0, 1), out.stderr
    return [f for f in json.loads(out.stdout)["findings"] if f["code"] == "AFFINITY_DRIFT"]


@pytest.fixture
def job() -> Iterator[Driven]:
    main, workers = halves()
    both = ",".join(str(c) for c in sorted(main | workers))
    with driven(SPLIT_JOB, "--cpus", both) as d:
        yield d


def tune_split(job: Driven, journal: Journal) -> Placement:
    """Run the Tuner on ``job`` with the split as its one candidate, scored by a fake GPU
    (utilisation 90 while the main thread has the main part, 50 otherwise); the split is
    kept. Returns it."""
    main, workers = halves()
    split = Placement(main | workers, False, "split", main_cpus=main, worker_cpus=workers)
    pid, worker = job.pid, job.info["worker"]
    gpu = FakeGpu(pids=[(pid, 1 << 30)], util=50)
    gateway = NvmlGateway(module=FakeNvml([gpu]))
    assert gateway.open()

    def on_set(tid: int, cpus: CpuSet) -> None:
        if tid == pid:
            gpu.util = 90 if cpus == main else 50

    tuner = Tuner(
        pid,
        start_ticks=start_ticks(pid),
        sampler=Sampler("/", Selection(pids=(pid, worker)), gpu_source=gateway),
        topology=one_core_per_cpu(),
        journal=journal,
        settle_s=0.05,
        window_s=0.4,
        interval_s=0.2,
        tick_s=0.2,
        ops=HeardOps(on_set),
        propose=lambda job, snapshot, window: [split],
    )
    result = tuner.run()
    assert result.error is None and result.chosen == 1, (result.why, result.rows)
    assert result.pinned is not None and result.pinned.ok
    return split


def test_a_kept_split_is_expected_as_pinned_so_diagnose_reports_no_drift(tmp_path: Path, job: Driven) -> None:
    state = tmp_path / "state"
    journal = Journal(state / "affmon" / "journal.jsonl")
    pid, worker = job.pid, job.info["worker"]
    split = tune_split(job, journal)
    assert split.main_cpus is not None and split.worker_cpus is not None
    in_force = [e for e in journal.entries() if e.state == "applied"]
    assert [e.pid for e in in_force] == [pid]  # one entry: one `affmon undo PID` takes it all back
    assert drift_findings(state, pid) == []
    # What the journal expects is what the kernel has, thread by thread.
    expected = expected_masks(journal)
    assert expected == {(pid, start_ticks(pid)): split.main_cpus, (worker, start_ticks(worker)): split.worker_cpus}
    for process in (pid, worker):
        assert set(thread_masks(process).values()) == {expected[(process, start_ticks(process))]}
    # The rule still sees a worker's thread that left its part behind affmon's back.
    moved = sorted(thread_masks(worker))[-1]
    os.sched_setaffinity(moved, split.cpus)
    found = drift_findings(state, pid)
    assert [f["evidence"]["pid"] for f in found] == [worker], found  # type: ignore[index]


def test_undo_of_a_kept_split_restores_every_thread_and_worker_created_after_it(tmp_path: Path, job: Driven) -> None:
    state = tmp_path / "state"
    journal = Journal(state / "affmon" / "journal.jsonl")
    pid, worker = job.pid, job.info["worker"]
    before = thread_masks(pid, worker)
    split = tune_split(job, journal)
    assert split.main_cpus is not None and split.worker_cpus is not None
    # Created after the split: each inherits the part of the thread that creates it.
    new_main_thread = job.send("spawn")
    new_worker_thread = job.send(f"to {worker} spawn")
    new_worker = job.send("fork")  # a worker re-forked by the main loop
    new_workers_thread = job.send(f"to {new_worker} spawn")
    assert os.sched_getaffinity(new_main_thread) == split.main_cpus
    assert os.sched_getaffinity(new_worker_thread) == split.worker_cpus
    assert set(thread_masks(new_worker).values()) == {split.main_cpus}
    assert new_workers_thread in thread_masks(new_worker)
    undone = affmon(state, "undo", str(pid))
    assert undone.returncode == 0, undone.stderr + undone.stdout
    old = before[pid]
    assert thread_masks(pid, worker) == {**before, new_main_thread: old, new_worker_thread: before[worker]}
    assert set(thread_masks(new_worker).values()) == {old}
    assert not [e for e in journal.entries() if e.state in ("pending", "applied")]


def test_a_crash_between_the_parts_leaves_an_entry_undo_takes_back_whole(tmp_path: Path, job: Driven) -> None:
    """The pin of the whole set and the parts written into its entry, then only the main
    part set before the crash: undo puts back every thread, the new ones included."""
    journal = Journal(tmp_path / "journal.jsonl")
    main, workers = halves()
    pid, worker = job.pid, job.info["worker"]
    before = thread_masks(pid, worker)
    whole = pin(pid, main | workers, start_ticks=start_ticks(pid), with_children=True, journal=journal)
    assert whole.ok and whole.journal_id is not None
    entry = journal.refine(whole.journal_id, {(pid, start_ticks(pid)): main, (worker, start_ticks(worker)): workers})
    assert journal.entries() == [entry]
    assert expected_masks(journal) == {(pid, start_ticks(pid)): main, (worker, start_ticks(worker)): workers}
    assert pin(pid, main, start_ticks=start_ticks(pid)).ok  # the main part; the worker's never came
    new_main_thread = job.send("spawn")
    new_worker = job.send("fork")
    assert os.sched_getaffinity(new_main_thread) == main and set(thread_masks(new_worker).values()) == {main}
    result = undo(journal, pid)
    assert result.ok, result.error
    assert thread_masks(pid, worker) == {**before, new_main_thread: before[pid]}
    assert set(thread_masks(new_worker).values()) == {before[pid]}
