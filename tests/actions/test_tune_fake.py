"""``affmon tune``'s loop with a virtual pinner (masks kept in a dict, never set) and, for
the GPU score, a fake NVML whose utilisation depends on the mask the job was given: which
candidate it keeps, that it repeats the best two within the spread, and that it never
tries a placement outside the job's CPUs or one that splits a core."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from affmon.actions.journal import Journal
from affmon.actions.tune import Row, Tuner, described
from affmon.collect.sampler import Sampler, Selection
from affmon.collect.sysfs_topology import read_topology
from affmon.core.model.cpuset import CpuSet
from affmon.core.model.jobs import Job
from affmon.core.model.rates import Snapshot
from affmon.core.model.topology import CacheGroup, Core, NumaNode, Package, Topology
from affmon.core.plan.placements import Placement
from affmon.core.plan.tuning import choose, placement_problem, spread_of_rows
from affmon.nvml import NvmlGateway
from tests.helpers.fake_pynvml import FakeGpu, FakeNvml
from tests.helpers.live import usable_cpus, workload
from tests.helpers.proc import start_ticks


class VirtualOps:
    """Masks in a dict (real ones until set); ``on_set`` hears every change."""

    def __init__(self, on_set: Callable[[int, CpuSet], None] = lambda tid, cpus: None) -> None:
        self.masks: dict[int, CpuSet] = {}
        self.sets: list[tuple[int, CpuSet]] = []
        self.on_set = on_set

    def get(self, tid: int) -> CpuSet:
        real = frozenset(os.sched_getaffinity(tid))
        return self.masks.get(tid, real)

    def set(self, tid: int, cpus: CpuSet) -> None:
        os.sched_getaffinity(tid)  # ESRCH for a thread that is gone, as for real
        self.masks[tid] = frozenset(cpus)
        self.sets.append((tid, frozenset(cpus)))
        self.on_set(tid, frozenset(cpus))


def fixed(*found: Placement) -> Callable[[Job, Snapshot, Sequence[Snapshot]], list[Placement]]:
    return lambda job, snapshot, window: list(found)


def two_cpus() -> tuple[int, int]:
    cpus = usable_cpus()
    assert len(cpus) >= 2, "needs two CPUs (CI has two)"
    return cpus[0], cpus[1]


def gpu_tuner(tmp_path, pid: int, utils: dict[CpuSet, Any], start_utils: list[int], found: list[Placement]):
    """A tuner on ``pid`` whose fake GPU reads ``utils[mask of the job's main thread]`` (a
    number, or an iterator: one value each time the mask is set), and
    ``start_utils`` (one per measure) while the starting placement is measured."""
    gpu = FakeGpu(pids=[(pid, 1 << 30)])
    gateway = NvmlGateway(module=FakeNvml([gpu]))
    assert gateway.open()
    starts = iter(start_utils)

    def on_set(tid: int, cpus: CpuSet) -> None:
        if tid == pid and cpus in utils:
            value = utils[cpus]
            gpu.util = value if isinstance(value, int) else next(value)

    def on_change(row: Row) -> None:
        if row.number == 0 and row.status == "running":
            gpu.util = next(starts)

    ops = VirtualOps(on_set)
    tuner = Tuner(
        pid,
        start_ticks=start_ticks(pid),
        sampler=Sampler("/", Selection(pids=(pid,)), gpu_source=gateway),
        topology=read_topology("/"),
        journal=Journal(tmp_path / "journal.jsonl"),
        settle_s=0.05,
        window_s=0.4,
        interval_s=0.2,
        tick_s=0.2,
        ops=ops,
        propose=fixed(*found),
        on_change=on_change,
    )
    return tuner, ops


def test_gpu_score_keeps_the_highest_utilisation_beyond_the_spread(tmp_path):
    a, b = two_cpus()
    with workload("--cpus", str(a), "--sleepers", "1") as info:
        pid = info["pid"]
        only_b, both = frozenset({b}), frozenset({a, b})
        utils = {only_b: 72, both: 70, frozenset({a}): 50}
        found = [Placement(both, False, "both"), Placement(only_b, False, "the other CPU")]
        tuner, ops = gpu_tuner(tmp_path, pid, utils, [50, 54, 50], found)
        result = tuner.run()
    assert result.score_kind == "gpu"
    assert result.spread == 4.0  # 50, 54, 50 for the starting placement: its windows differ by 4 at most
    rows = {r.cpus: r for r in result.rows}
    assert rows[only_b].score == 72 and rows[both].score == 70
    # Every candidate is measured twice; 72 beats the start's 51.3 by more than 4.
    assert len(rows[only_b].measures) == 2 and len(rows[both].measures) == 2
    assert result.chosen == rows[only_b].number and result.pinned is not None and result.pinned.ok
    assert ops.masks[pid] == only_b  # kept in force
    entries = [e for e in Journal(tmp_path / "journal.jsonl").entries() if e.state == "applied"]
    assert [e.cpus for e in entries] == [only_b]


def test_every_candidate_is_measured_twice_alternated_with_the_start(tmp_path):
    a, b = two_cpus()
    with workload("--cpus", str(a), "--sleepers", "1") as info:
        pid = info["pid"]
        only_b, both = frozenset({b}), frozenset({a, b})
        found = [Placement(both, False, "both"), Placement(only_b, False, "the other CPU")]
        order: list[int] = []
        tuner, ops = gpu_tuner(tmp_path, pid, {only_b: 40, both: 90}, [60, 61, 62], found)
        tuner.on_change = lambda row, seen=tuner.on_change: (
            order.append(row.number) if row.status == "running" else None,
            seen(row) if seen else None,
        )
        result = tuner.run()
    rows = {r.cpus: r for r in result.rows}
    assert [len(rows[c].measures) for c in (only_b, both)] == [2, 2]
    assert len(result.rows[0].measures) == 3
    assert order == [0, 1, 2, 0, 2, 1, 0]  # start, candidates, start, candidates reversed, start
    assert result.spread is not None and result.spread >= 2.0  # the start read 60, 61, 62
    assert result.chosen == rows[both].number
    assert ops.masks[pid] == both


def test_a_lead_within_the_spread_of_the_repeats_keeps_the_start(tmp_path):
    """A candidate whose windows differ by more than its lead over the start: noise, and the
    start stays (nothing is left pinned)."""
    a, b = two_cpus()
    with workload("--cpus", str(a), "--sleepers", "1") as info:
        pid = info["pid"]
        both = frozenset({a, b})
        windows = iter([70, 50])  # the candidate's two windows
        tuner, ops = gpu_tuner(tmp_path, pid, {both: windows}, [58, 59, 60], [Placement(both, False, "both")])
        result = tuner.run()
    assert result.rows[1].score == 60.0 and result.rows[0].score == 59.0
    assert result.spread is not None and result.spread >= 20.0
    assert result.chosen == 0 and "beyond the noise" in result.why
    assert result.pinned is None and ops.masks[pid] == frozenset({a})


def test_a_candidate_that_breaks_the_planners_rules_is_never_tried(tmp_path):
    a, b = two_cpus()
    outside = frozenset({a, 4000})  # not a CPU of this machine
    with workload("--cpus", str(a), "--busy", "1") as info:
        pid = info["pid"]
        ops = VirtualOps()
        tuner = Tuner(
            pid,
            start_ticks=start_ticks(pid),
            sampler=Sampler("/", Selection(pids=(pid,))),
            topology=read_topology("/"),
            journal=Journal(tmp_path / "journal.jsonl"),
            settle_s=0.05,
            window_s=0.3,
            interval_s=0.2,
            tick_s=0.3,
            ops=ops,
            propose=fixed(Placement(outside, False, "outside"), Placement(frozenset({b}), False, "the other CPU")),
        )
        result = tuner.run()
    refused = [r for r in result.rows if r.status == "refused"]
    assert [r.cpus for r in refused] == [outside] and "outside" in refused[0].note
    assert all(4000 not in cpus for _, cpus in ops.sets)
    assert result.score_kind == "cpu"
    assert any(cpus == frozenset({b}) for _, cpus in ops.sets)  # the lawful one was tried


def smt_machine() -> Topology:
    """Four cores of two siblings: CPUs n and n+4."""
    online = frozenset(range(8))
    return Topology.build(
        source="test",
        online_cpus=online,
        allowed_cpus=online,
        numa_nodes=[NumaNode(0, online)],
        packages=[Package(0, online)],
        cores=[Core(0, frozenset({c, c + 4})) for c in range(4)],
        l3_groups=[CacheGroup(3, online)],
        gpus=[],
    )


@given(st.frozensets(st.integers(0, 7), min_size=1))
def test_a_placement_keeps_the_rules_exactly_when_it_is_whole_cores(cpus):
    whole = all((c in cpus) == (c ^ 4 in cpus) for c in range(8))
    problem = placement_problem(smt_machine(), Placement(cpus, False, "x"), frozenset(range(8)))
    assert (problem is None) == whole
    if not whole:
        assert "split core" in problem


def test_a_placement_outside_the_allowed_cpus_or_a_bad_split_is_refused():
    machine = smt_machine()
    allowed = frozenset({0, 1, 4, 5})
    assert "outside" in placement_problem(machine, Placement(frozenset({0, 2, 4, 6}), False, "x"), allowed)
    split = Placement(frozenset({0, 1, 4, 5}), False, "x", main_cpus=frozenset({0}), worker_cpus=frozenset({1, 4, 5}))
    assert "split core" in placement_problem(machine, split, allowed)
    good = Placement(frozenset({0, 1, 4, 5}), False, "x", main_cpus=frozenset({0, 4}), worker_cpus=frozenset({1, 5}))
    assert placement_problem(machine, good, allowed) is None


def test_choose_keeps_the_start_unless_a_candidate_beats_it_by_more_than_the_spread():
    assert choose([50.0, 53.0, 40.0], 4.0, "%").row == 0
    assert choose([50.0, 55.0, 40.0], 4.0, "%").row == 1
    assert choose([50.0, None, 60.0], 0.0, "%").row == 2
    assert "beyond the noise" in choose([50.0, 53.0, 40.0], 4.0, "%").why


def test_the_spread_is_the_largest_difference_between_two_windows_of_one_placement():
    assert spread_of_rows([[50.0, 54.0, 51.0], [70.0, 60.0], [40.0]]) == 10.0
    assert spread_of_rows([[50.0], [70.0]]) is None
    assert spread_of_rows([[100.0, 100.0]]) == 2.0  # never under 2% of the score: two windows agree by chance


def test_row_labels_say_what_the_row_does():
    """The planner's words are its intent: where nothing is moved (--no-isolate, nothing
    movable), the row does not say the others were moved off."""
    planned = "the suggestion: 1 core, CPUs 0, the other busy processes moved off"
    assert described(planned, ()) == "the suggestion: 1 core, CPUs 0, the others left where they are"
    assert described(planned, ((5, 1), (6, 1))) == "the suggestion: 1 core, CPUs 0, 2 other busy process(es) moved off"
    assert described("the suggestion split: main loop on CPUs 0, DataLoader workers on 1", ()).endswith("on 1")


def test_isolation_can_be_turned_off_before_the_start_and_rows_then_move_no_one(tmp_path):
    a, b = two_cpus()
    with workload("--cpus", str(a), "--sleepers", "1") as info:
        pid = info["pid"]
        only_b = frozenset({b})
        found = [
            Placement(only_b, True, "the other CPU, the other busy processes moved off"),
            Placement(only_b, False, "the other CPU, the others left where they are"),
        ]
        tuner, _ = gpu_tuner(tmp_path, pid, {}, [50, 50, 50], found)
        tuner._to_move = lambda snapshot, job, placement: ((4242, 1),) if placement.isolate else ()  # type: ignore[method-assign]
        rows = tuner.prepare()
        assert [r.isolate for r in rows[1:]] == [((4242, 1),), ()]
        assert rows[1].description == "the other CPU, 1 other busy process(es) moved off"
        off = tuner.set_isolation(False)
        assert [r.isolate for r in off[1:]] == [(), ()]
        assert off[1].description == "the other CPU, the others left where they are"
        assert [r.status for r in off[1:]] == ["waiting", "skipped"]  # the same placement twice: tried once
        assert tuner.set_isolation(True) == rows
        tuner.release()


def test_a_tune_that_can_try_no_candidate_ends_in_an_error_not_in_the_start_staying(tmp_path):
    """Every pin refused (a user without permission on the job): an error the command exits
    non-zero on, not "the starting placement stays"."""
    import errno

    a, b = two_cpus()

    class Refusing(VirtualOps):
        def set(self, tid: int, cpus: CpuSet) -> None:
            raise OSError(errno.EPERM, "Operation not permitted")

    with workload("--cpus", str(a), "--sleepers", "1") as info:
        pid = info["pid"]
        tuner = Tuner(
            pid,
            start_ticks=start_ticks(pid),
            sampler=Sampler("/", Selection(pids=(pid,))),
            topology=read_topology("/"),
            journal=Journal(tmp_path / "journal.jsonl"),
            settle_s=0.05,
            window_s=0.3,
            interval_s=0.2,
            tick_s=0.3,
            ops=Refusing(),
            propose=fixed(Placement(frozenset({a, b}), False, "both")),
        )
        result = tuner.run()
    assert result.error is not None and "no candidate could be tried" in result.error
    assert result.chosen is None and result.rows[1].status == "failed"
