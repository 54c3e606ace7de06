"""The monitor shows and acts on the loop breakdown, the context, the memory per node and
tune: the detail pane from crafted ticks (an H200 recording whose rank carries a loop
window, a context and numa_maps), the pin dialog's window and its move-memory consent,
a replay's r + Enter, and the tune dialog driven with a fake tuner."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.pilot import Pilot
from textual.widgets import Static

from affmon.actions.journal import Journal
from affmon.actions.migrate import ONE_NODE, MigrationResult
from affmon.actions.tune import Row, TuneResult
from affmon.collect.sampler import Sampler, Selection
from affmon.collect.sysfs_topology import read_topology
from affmon.core.model.context import Context
from affmon.core.model.loop import DATA_WAIT, GPU_WAIT, OTHER, LoopWindow, WorkerStats
from affmon.core.model.rates import make_snapshot
from affmon.core.model.samples import NodeMemory, Sample
from affmon.tui.model.monitor import PIN_WINDOW
from affmon.tui.model.process_detail import DetailedRow, TrackedHistory
from affmon.tui.pinner import ReplayPinner, SystemPinner
from affmon.tui.screens import PinScreen
from affmon.tui.tune_screen import TuneScreen
from affmon.tui.widgets.detail import DetailText, ProcessPlot
from tests.helpers.live import workload
from tests.helpers.recordings import load, monitor
from tests.tui.helpers import FakePinner, list_app, play, press_and_finish, replay_app

SIZE = (160, 48)
GIB = 1 << 30
RANK = 608  # the hogs recording's rank, on GPU 0 (busy 5-13%), with four DataLoader workers


def shown(app: Any, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


async def until(pilot: Pilot[None], done: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    """Wait for ``done`` (a loaded machine may be slow; never a tight deadline)."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await pilot.pause(0.02)


# -- crafted ticks ---------------------------------------------------------------------


def input_bound_window(pid: int, seconds: float) -> LoopWindow:
    """A loop thread that ran 10% and queued 3% of the interval and was blocked the rest,
    mostly on its workers' pipes; four workers each using 0.95 CPUs, 8 CPUs idle."""
    return LoopWindow(
        pid=pid,
        tid=pid,
        seconds=seconds,
        run_ns=int(0.10 * seconds * 1e9),
        wait_ns=int(0.03 * seconds * 1e9),
        probes={DATA_WAIT: 16, GPU_WAIT: 2, OTHER: 2},
        workers=WorkerStats(count=4, run_ns=int(3.8 * seconds * 1e9), wait_ns=0, domain_cpus=16, free_cpus=8.0),
        rate_hz=20.0,
    )


HOSTILE_JOB = "4242\x1b[2J"  # an environment's value is the process's own text


def crafted(name: str = "hogs", context: Context | None = None) -> list[Sample]:
    """The recording with its rank carrying a loop window over each interval, what placed
    it and its memory per node."""
    _, samples = load(name)
    context = context or Context(scheduler="slurm", slurm_job_id="4242", slurm_step="0", local_rank=1)
    memory = NodeMemory({0: 12 * GIB, 1: GIB // 2}, {0: 11 * GIB, 1: GIB // 4}, mappings=40)
    out = []
    for i, s in enumerate(samples):
        seconds = s.monotonic_s - samples[i - 1].monotonic_s if i else 1.0
        processes = tuple(
            dataclasses.replace(p, loop=input_bound_window(p.pid, seconds), context=context, memory=memory)
            if p.pid == RANK
            else p
            for p in s.processes
        )
        out.append(dataclasses.replace(s, processes=processes))
    return out


def test_the_monitor_keeps_one_loop_point_per_tick_beside_gpu_busy():
    m = monitor("hogs")
    views = [v for v in (m.feed(s) for s in crafted()) if v is not None]
    last = views[-1]
    history = last.process_history[RANK]
    assert isinstance(history, TrackedHistory) and history.loop is not None
    data, gpu, cpu, cpu_wait = history.loop.shares
    assert len(data.values) == len(views) == 4 and len(history.loop.gpu_busy.values) == 4
    assert data.t_s == history.wait_ratio.t_s  # the same ticks as the other series
    report = m.state.loops[RANK]
    assert report.breakdown is not None
    assert data.values[-1] == report.breakdown.shares[DATA_WAIT] and data.values[-1] > 0.6
    assert cpu.values[-1] is not None and abs(cpu.values[-1] - 0.10) < 0.01
    assert gpu.values[-1] == report.breakdown.shares[GPU_WAIT] and gpu.values[-1] < 0.1
    assert cpu_wait.values[-1] is not None and abs(cpu_wait.values[-1] - 0.03) < 0.01
    assert history.loop.gpu_busy.values == tuple(u / 100 for u in (5, 13, 7, 5))  # GPU 0's utilisation
    row = last.process(RANK)
    assert isinstance(row, DetailedRow) and row.loop is report and row.loop.verdict == "input_bound"
    assert row.context == "slurm 4242.0 rank 1" and row.memory is not None
    assert not isinstance(last.process(659), DetailedRow)  # a worker: nothing probed, nothing read
    assert not isinstance(last.process_history[659], TrackedHistory)


def test_a_tick_without_a_loop_window_is_a_gap_not_a_zero():
    samples = crafted()
    samples[3] = dataclasses.replace(
        samples[3], processes=tuple(dataclasses.replace(p, loop=None) for p in samples[3].processes)
    )
    m = monitor("hogs")
    last = [v for v in (m.feed(s) for s in samples) if v is not None][-1]
    history = last.process_history[RANK]
    assert isinstance(history, TrackedHistory) and history.loop is not None
    assert [v is None for v in history.loop.shares[0].values] == [False, False, True, False]


async def test_the_detail_pane_shows_the_loop_its_verdict_advice_context_and_memory():
    app = list_app("hogs", crafted())
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        assert app.selected_pid == RANK
        text = str(app.query_one(DetailText).render())
        assert "placed by slurm 4242.0 rank 1" in text
        assert "memory node 0 12.0 GiB · node 1 0.5 GiB" in text
        assert "loop GPU busy 5%; loop: data 70%, CPU 10%" in text and "input bound" in text
        assert "BAD INPUT_BOUND" in text
        assert "advice: add DataLoader workers (about 12)" in text
        assert "loop={" not in text and "advice={" not in text  # no raw evidence dumps
        plot = app.query_one(ProcessPlot)
        drawn = plot._drawn
        assert drawn is not None and drawn[0] == RANK
        assert isinstance(drawn[1], TrackedHistory) and drawn[1].loop is not None
        assert len(drawn[1].loop.shares[0].values) == 4


async def test_a_context_from_the_process_is_escaped_in_the_detail_pane():
    hostile = Context(scheduler="slurm", slurm_job_id=HOSTILE_JOB, numa_binding="node")

    app = list_app("hogs", crafted(context=hostile))
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        text = str(app.query_one(DetailText).render())
        assert "placed by slurm 4242?[2J torchrun --numa-binding node" in text
        assert "\x1b" not in text


async def test_a_process_without_loop_context_or_memory_shows_none_of_them():
    app = replay_app("hogs")
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        text = str(app.query_one(DetailText).render())
        assert "placed by" not in text and "memory node" not in text and "\nloop " not in text
        assert not isinstance(app.query_one(ProcessPlot)._drawn[1], TrackedHistory)


# -- r: the window, moving memory, a replay -----------------------------------------------


async def test_r_sizes_the_suggestion_over_the_recent_intervals():
    pinner = FakePinner()
    app = replay_app("narrow", pinner)
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)  # five samples: four intervals
        await pilot.press("r")
        assert isinstance(app.screen, PinScreen)
        window = pinner.windows[-1]
        assert len(window) == 4 and window[-1] is app.view.snapshot
        assert [s.current.monotonic_s for s in window] == sorted(s.current.monotonic_s for s in window)
        assert "over the last 4 intervals" in shown(app, "#dialog-text")


def test_the_window_is_bounded_and_ends_at_the_view_asked_about():
    _, samples = load("clean")
    many = [dataclasses.replace(s, monotonic_s=s.monotonic_s + 10 * k) for k in range(3) for s in samples]
    m = monitor("clean")
    views = [v for v in (m.feed(s) for s in many) if v is not None]
    assert len(views) > PIN_WINDOW + 2
    newest = m.window_until(views[-1].snapshot)
    assert len(newest) == PIN_WINDOW and newest[-1] is views[-1].snapshot
    older = m.window_until(views[-2].snapshot)
    assert older[:-1] == newest[:-2] and older[-1] is views[-2].snapshot
    # the window keeps the earlier intervals as the sizing reads them: the watched processes
    assert all(p.sample.watched for s in newest[:-1] for p in s.processes)
    assert [s.current.monotonic_s for s in older] == [s.current.monotonic_s for s in newest[:-1]]
    assert m.window_until(views[0].snapshot) == ()  # long gone from the window


async def test_move_memory_is_off_by_default_and_its_toggle_passes_the_consent():
    result = MigrationResult(True, False, 0, (), ONE_NODE)
    pinner = FakePinner(memory=result)
    app = replay_app("narrow", pinner)
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        await pilot.press("r")
        assert "[ ] m  move memory too" in shown(app, "#dialog-text")
        await press_and_finish(pilot, "enter")
        assert pinner.moves == [False] and "memory:" not in shown(app, "#dialog-text")
        await pilot.press("enter")
        await pilot.press("r", "m")
        assert "[x] m  move memory too" in shown(app, "#dialog-text")
        await press_and_finish(pilot, "enter")
        assert pinner.moves == [False, True]
        assert "memory: one NUMA node: nothing to move" in shown(app, "#dialog-text")
        await pilot.press("enter")
        assert "memory: one NUMA node: nothing to move" in shown(app, "#status")


async def test_in_a_replay_r_enter_says_a_replay_pins_nothing():
    app = replay_app("narrow", ReplayPinner())
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        await pilot.press("r")
        assert "a replay pins nothing" in shown(app, "#dialog-keys")
        await press_and_finish(pilot, "enter")
        text = shown(app, "#dialog-text")
        assert "a replay pins nothing" in text and "not pinned:" not in text
        await pilot.press("escape")
        status = shown(app, "#status")
        assert "a replay pins nothing" in status and "failed" not in status


def test_the_system_pinner_moves_memory_only_when_asked(tmp_path: Path):
    """A real pin of a real process, with the consent: on this machine's topology the
    migration's result comes back on the pin (one node of CPUs: nothing to move)."""
    topology = read_topology("/")
    cpus = sorted(os.sched_getaffinity(0))
    with workload("--busy", "1") as w:
        pid = w["pid"]
        sampler = Sampler("/", Selection(pids=(pid,), others=True))
        first = sampler.sample()
        time.sleep(0.3)
        snapshot = make_snapshot(first, sampler.sample(), topology)
        pinner = SystemPinner(Journal(tmp_path / "journal.jsonl"))
        proposal = pinner.propose(snapshot, pid, window=(snapshot,))
        assert proposal is not None and proposal.pid == pid
        proposal = dataclasses.replace(proposal, suggestion=dataclasses.replace(proposal.suggestion, cpus=cpus[:1]))
        plain = pinner.apply(proposal, isolate=False, with_children=True)
        assert plain.ok, plain.error
        assert plain.memory is None  # no consent: nothing asked of the memory
        assert pinner.undo_last().ok
        moved = pinner.apply(proposal, isolate=False, with_children=True, move_memory=True)
        assert moved.ok, moved.error
        assert moved.memory is not None
        if len(topology.cpu_numa_nodes) < 2:
            assert moved.memory.message == ONE_NODE and not moved.memory.attempted
        else:
            assert moved.memory.to_node == topology.home_node_of(frozenset(cpus[:1]))
        assert pinner.undo_last().ok


# -- T: tune ------------------------------------------------------------------------------


class FakeTune:
    """A tune session the test drives: ``prepare`` lists three rows; each ``step`` waits
    for the test to ``release`` it (or for ``abort``), then measures the next row. Records
    what it was asked: ``started_with``, ``aborts``, ``closed``."""

    settle_s = 3.0
    window_s = 8.0
    score_kind = "gpu"

    def __init__(self, scores: tuple[float, ...] = (40.0, 52.0, 61.0), chosen: int = 2) -> None:
        self.scores = scores
        self.chosen = chosen
        self._rows = [
            Row(0, "the starting placement: CPUs 0-15, as found", frozenset(range(16)), (), "waiting"),
            Row(1, "the planner's suggestion: 6 CPUs on node 0", frozenset(range(6)), (), "waiting"),
            Row(2, "the suggestion, the others moved off", frozenset(range(6)), ((601, 1), (602, 1)), "waiting"),
        ]
        self.on_change: Callable[[Row], None] | None = None
        self.started_with: tuple[int, int] | None = None
        self.gate = threading.Semaphore(0)
        self.stopped = threading.Event()
        self.aborts = 0
        self.closed = False
        self.next = 0
        self._result: TuneResult | None = None

    def started(self, pid: int, start_ticks: int, on_change: Callable[[Row], None]) -> None:
        self.started_with = (pid, start_ticks)
        self.on_change = on_change

    @property
    def rows(self) -> tuple[Row, ...]:
        return tuple(self._rows)

    def prepare(self) -> tuple[Row, ...]:
        return self.rows

    def release(self) -> None:
        self.gate.release()

    def _set(self, row: Row) -> None:
        self._rows[row.number] = row
        assert self.on_change is not None
        self.on_change(row)

    def step(self) -> bool:
        while not self.gate.acquire(timeout=0.02):
            if self.stopped.is_set():
                for r in self._rows:
                    if r.status in ("waiting", "running"):
                        self._set(dataclasses.replace(r, status="skipped", note="not tried: tune stopped"))
                why = "aborted: the masks from before tune started are back"
                self._result = TuneResult(RANK, "gpu", None, self.rows, None, why, None, True, None)
                return False
        row = self._rows[self.next]
        self._set(dataclasses.replace(row, status="measured", score=self.scores[self.next]))
        self.next += 1
        if self.next < len(self._rows):
            self._set(dataclasses.replace(self._rows[self.next], status="running"))
            return True
        why = "row 2 beats the starting placement by more than the spread"
        pinned = FakePinner().apply(_proposal_for(self._rows[self.chosen]), isolate=True, with_children=True)
        self._result = TuneResult(RANK, "gpu", 1.0, self.rows, self.chosen, why, pinned, False, None)
        return False

    def result(self) -> TuneResult:
        assert self._result is not None
        return self._result

    def abort(self) -> None:
        self.aborts += 1
        self.stopped.set()

    def close(self) -> None:
        self.closed = True


def _proposal_for(row: Row) -> Any:
    from affmon.core.plan.advice import propose_pin

    _, samples = load("hogs")
    topology = load("hogs")[0].topology
    proposal = propose_pin(make_snapshot(samples[-2], samples[-1], topology), RANK)
    assert proposal is not None and row.cpus is not None
    return dataclasses.replace(proposal, suggestion=dataclasses.replace(proposal.suggestion, cpus=row.cpus))


def dialog(app: Any) -> str:
    return shown(app, "#dialog-text")


async def test_tune_asks_first_then_fills_the_table_live_and_marks_the_chosen_row():
    session = FakeTune()
    pinner = FakePinner()
    pinner.tune_sessions.append(session)
    app = replay_app("hogs", pinner)
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        await pilot.press("T")
        assert isinstance(app.screen, TuneScreen)
        screen = app.screen
        await until(pilot, lambda: screen.state == "asking", "the candidates")
        _, samples = load("hogs")
        start = next(p.start_ticks for p in samples[-1].processes if p.pid == RANK)
        assert session.started_with == (RANK, start)  # the job's root, as it was seen
        text = dialog(app)
        assert "score: GPU utilisation" in text
        # Two passes over 2 candidates (3 s settle + 8 s window each) and three windows of the start.
        assert "about 68 s" in text and "2 candidates measured twice each (3 s settle + 8 s window)" in text
        assert "Enter starts" in text and session.next == 0  # nothing measured before Enter
        await pilot.press("enter")
        session.release()
        await until(pilot, lambda: "52.0%" not in dialog(app) and "40.0%" in dialog(app), "row 0's score")
        text = dialog(app)
        assert "running" in text and "◀ chosen" not in text
        session.release()
        session.release()
        await until(pilot, lambda: screen.state == "done", "the end")
        text = dialog(app)
        assert "61.0%" in text and "52.0%" in text and "◀ chosen" in text
        chosen_line = next(line for line in text.splitlines() if "◀ chosen" in line)
        assert chosen_line.lstrip().startswith("2 ") and "moves 2" in chosen_line
        assert "pinned to CPUs 0-5; u undoes it like any pin" in text
        await pilot.press("enter")
        assert not isinstance(app.screen, TuneScreen)
        assert f"tune of {RANK}: kept row 2, CPUs 0-5 (u undoes it)" in shown(app, "#status")
        assert session.closed and session.aborts == 0


async def test_escape_while_tuning_aborts_at_once_and_says_the_masks_are_back():
    session = FakeTune()
    pinner = FakePinner()
    pinner.tune_sessions.append(session)
    app = replay_app("hogs", pinner)
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        await pilot.press("T")
        screen = app.screen
        assert isinstance(screen, TuneScreen)
        await until(pilot, lambda: screen.state == "asking", "the candidates")
        await pilot.press("enter")
        session.release()
        await until(pilot, lambda: "40.0%" in dialog(app), "row 0's score")
        await pilot.press("escape")  # row 1 is being measured
        assert session.aborts == 1
        await until(pilot, lambda: screen.state == "done", "the restore")
        text = dialog(app)
        assert "aborted: the masks from before tune started are back" in text
        assert text.count("skipped") == 2 and "◀ chosen" not in text
        await pilot.press("q")
        assert not isinstance(app.screen, TuneScreen)
        assert "stopped: the masks from before tune are back" in shown(app, "#status")
        assert session.closed and session.next == 1


async def test_escape_before_the_start_changes_nothing():
    session = FakeTune()
    pinner = FakePinner()
    pinner.tune_sessions.append(session)
    app = replay_app("hogs", pinner)
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        await pilot.press("T")
        screen = app.screen
        await until(pilot, lambda: isinstance(screen, TuneScreen) and screen.state == "asking", "the candidates")
        await pilot.press("escape")
        assert not isinstance(app.screen, TuneScreen)
        assert session.next == 0 and session.closed and session.aborts == 0


async def test_in_a_replay_tune_explains_it_needs_a_live_process():
    app = replay_app("hogs", ReplayPinner())
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        await pilot.press("T")
        assert isinstance(app.screen, TuneScreen)
        assert "tune needs a live process" in dialog(app)
        await pilot.press("enter")
        assert not isinstance(app.screen, TuneScreen)


async def test_a_tuner_that_cannot_start_says_why():
    class Refusing(FakePinner):
        def tuner(self, pid: int, start_ticks: int, on_change: Any) -> Any:
            raise RuntimeError(f"PID {pid} exited while affmon sampled it")

    app = replay_app("hogs", Refusing())
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        await pilot.press("T")
        screen = app.screen
        assert isinstance(screen, TuneScreen)
        await until(pilot, lambda: screen.state == "done", "the refusal")
        assert f"tune could not start: PID {RANK} exited while affmon sampled it" in dialog(app)


def test_the_system_pinner_prepares_a_live_tune_and_changes_nothing(tmp_path: Path):
    """The real ``Tuner`` behind ``T``: its session samples the job and lists the rows
    (nothing pinned: the journal stays empty, the masks as they were), and closes."""
    with workload("--busy", "1", "--sleepers", "1") as w:
        pid = w["pid"]
        before = os.sched_getaffinity(pid)
        sampler = Sampler("/", Selection(pids=(pid,)))
        start = next(p.start_ticks for p in sampler.sample().processes if p.pid == pid)
        journal = Journal(tmp_path / "journal.jsonl")
        changed: list[Row] = []
        session = SystemPinner(journal).tuner(pid, start, changed.append)
        try:
            rows = session.prepare()
            assert rows and rows[0].number == 0 and rows[0].status == "waiting"
            assert session.score_kind in ("gpu", "cpu") and session.settle_s == 3.0 and session.window_s == 8.0
        finally:
            session.close()
        assert os.sched_getaffinity(pid) == before and journal.entries() == [] and changed == []
