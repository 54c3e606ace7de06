"""Building the app from a recording, stepping through it, and a fake pinner."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from textual.pilot import Pilot

from affmon.actions.pin import PinResult, ThreadResult
from affmon.actions.undo import UndoResult
from affmon.core.model.cpuset import CpuSet
from affmon.core.model.rates import Snapshot
from affmon.core.model.samples import Sample
from affmon.core.model.topology import Topology
from affmon.core.plan.advice import PinProposal, propose_pin
from affmon.core.rules.base import ExpectedMasks
from affmon.sources.stream import ReplaySource, SourceInfo
from affmon.tui.app import AffmonApp
from tests.helpers.recordings import RECORDINGS, load


class FakePinner:
    """Records every call (the window each proposal was sized over: ``windows``; each
    pin's ``move_memory``: ``moves``); ``fail`` makes ``apply`` report a rollback;
    ``memory`` is the migration result a pin that moves memory reports."""

    replay = False
    readonly = False

    def __init__(
        self, fail: str | None = None, last: str | None = "PID 695 pinned to CPUs 0-15", memory: Any = None
    ) -> None:
        self.fail = fail
        self.last = last
        self.memory = memory
        self.calls: list[tuple[int, CpuSet, bool, bool]] = []
        self.windows: list[tuple[Snapshot, ...]] = []
        self.moves: list[bool] = []
        self.undos = 0
        self.tune_sessions: list[Any] = []  # what ``tuner`` hands out, first first

    def propose(self, snapshot: Snapshot, pid: int, window: Sequence[Snapshot] = ()) -> PinProposal | None:
        self.windows.append(tuple(window))
        return propose_pin(snapshot, pid, window=window)

    def apply(
        self, proposal: PinProposal, *, isolate: bool, with_children: bool, move_memory: bool = False
    ) -> PinResult:
        cpus = proposal.suggestion.cpus
        self.calls.append((proposal.pid, cpus, isolate, with_children))
        self.moves.append(move_memory)
        if self.fail:
            failed = ThreadResult(proposal.pid, proposal.pid + 1, frozenset({0, 1}), None, "failed", self.fail)
            return PinResult(False, cpus, (failed,), self.fail, True, None, changed=True)
        threads = (ThreadResult(proposal.pid, proposal.pid, frozenset({0, 1}), cpus, "set"),)
        memory = self.memory if move_memory else None
        return PinResult(True, cpus, threads, None, False, "test-entry", memory=memory)

    def last_pin(self) -> str | None:
        return self.last

    def undo_last(self) -> UndoResult:
        self.undos += 1
        self.last = None
        return UndoResult(True, ("test-entry",), (), None)

    def tuner(self, pid: int, start_ticks: int, on_change: Any) -> Any:
        session = self.tune_sessions.pop(0)
        session.started(pid, start_ticks, on_change)
        return session


class ListSource:
    """Samples from a list, optionally slow, counting how many reads overlap. Played as a
    replay is (``live`` False): a view needs two samples, none is read ahead."""

    live = False

    def __init__(self, topology: Topology, samples: Sequence[Sample], delay_s: float = 0.0) -> None:
        self.topology = topology
        self.info = SourceInfo("test", None, 1.0, "a list")
        self.read_started_s = 0.0
        self.samples = list(samples)
        self.delay_s = delay_s
        self.active = 0
        self.most_active = 0
        self.reads = 0
        self._lock = threading.Lock()

    def read_ahead(self) -> None:
        return None

    def next_sample(self) -> Sample | None:
        self.read_started_s = time.monotonic()
        with self._lock:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        try:
            time.sleep(self.delay_s)
            self.reads += 1
            return self.samples.pop(0) if self.samples else None
        finally:
            with self._lock:
                self.active -= 1

    @property
    def exhausted(self) -> bool:
        return not self.samples

    def pace_s(self) -> float:
        return 0.0

    def expected_masks(self) -> ExpectedMasks:
        return {}

    def close(self) -> None:
        pass


def replay_app(name: str, pinner: Any = None, **kwargs: Any) -> AffmonApp:
    return AffmonApp(
        ReplaySource(str(RECORDINGS / f"{name}.jsonl.gz")),
        pinner if pinner is not None else FakePinner(),
        autostart=False,
        **kwargs,
    )


def list_app(name: str, samples: Sequence[Sample] | None = None, **kwargs: Any) -> AffmonApp:
    header, recorded = load(name)
    return AffmonApp(ListSource(header.topology, samples or recorded), FakePinner(), autostart=False, **kwargs)


async def step(app: AffmonApp, pilot: Pilot[None], ticks: int = 1) -> None:
    for _ in range(ticks):
        app.tick()
        await app.ticks_landed()
        await pilot.pause()


async def play(pilot: Pilot[None]) -> None:
    """Every sample of the app's source, then let the screen settle."""
    app = pilot.app
    assert isinstance(app, AffmonApp)
    while not app.source.exhausted:
        await step(app, pilot)
    await pilot.pause()


def is_active(ch: str) -> bool:
    """What a terminal acts on, written out here independently of affmon's table."""
    o = ord(ch)
    return (
        o < 0x20
        or 0x7F <= o < 0xA0
        or o in (0x061C, 0x200E, 0x200F, 0x2028, 0x2029)
        or 0x202A <= o <= 0x202E
        or 0x2066 <= o <= 0x2069
        or 0xD800 <= o <= 0xDFFF
    )


async def press_and_finish(pilot: Pilot[None], *keys: str) -> None:
    """Press ``keys``, wait for the workers they started (a pin, an undo) and let the
    screen show their result."""
    await pilot.press(*keys)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
