"""The TUI's model: consecutive samples in, one immutable ``View`` per tick out.

A ``Monitor`` keeps what a single snapshot cannot give: the previous sample (rates need
two), the ``FindingTracker`` (a finding must hold for two intervals), and bounded
history (fixed-length deques: per GPU utilisation and PCIe RX/TX, per watched process
wait ratio and CPU use, and for a process whose training loop is probed, the loop's
shares beside its GPUs' busy share, the last ``history_len`` ticks). It is owned by one
thread, the sampler worker; what it hands out is frozen, so the UI thread shares nothing
mutable.

It also keeps the snapshots of the last ``PIN_WINDOW`` intervals (``recent``, a tuple
replaced whole each tick by ``affmon.core.model.window.widened``, so the UI thread may read
it): the pin dialog sizes its suggestion over them (``window_until``), as ``affmon
diagnose`` sizes its suggestions over every interval of its run, instead of over the last
interval alone. All but the newest are kept as the sizing reads them (``for_need``: the
watched processes): with 10,000 threads that wake, whole snapshots held 1.1 MiB more (RSS
after five minutes, measured side by side on a two-core VM).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

from affmon.core.model.rates import Snapshot
from affmon.core.model.samples import Sample
from affmon.core.model.topology import Topology
from affmon.core.model.window import widened
from affmon.core.rules.base import DEFAULT_THRESHOLDS, ExpectedMasks, Thresholds
from affmon.core.rules.evaluate import FindingTracker
from affmon.core.rules.tick import Tick, advance, start
from affmon.sources.stream import SourceInfo
from affmon.tui.model.first_look import first_look, header_view
from affmon.tui.model.process_detail import PLOTTED_SHARES, LoopHistory, TrackedHistory, detailed, loop_points
from affmon.tui.model.views import (
    GpuHistory,
    HeaderView,
    ProcessHistory,
    Series,
    View,
    core_groups,
    gpu_row,
    process_rows,
)

LAG_WINDOW = 10  # views over which the interval really kept is measured
LAG_TOLERANCE = 1.2
HISTORY_LEN = 300  # ticks: five minutes at the default 1 s interval
# Intervals the pin dialog's suggestion is sized over: a finding is raised after it holds
# for two (``Thresholds.raise_after``); five seconds at the default interval also take in
# a DataLoader worker that was between batches in one of them.
PIN_WINDOW = 5


class _Ring:
    """Times and values of one series, oldest dropped first."""

    def __init__(self, length: int) -> None:
        self.t: deque[float] = deque(maxlen=length)
        self.v: deque[float | None] = deque(maxlen=length)

    def add(self, t: float, value: float | None) -> None:
        self.t.append(t)
        self.v.append(value)

    def frozen(self) -> _Frozen:
        return tuple(self.t), tuple(self.v)


_Frozen = tuple[tuple[float, ...], tuple[float | None, ...]]
_R = TypeVar("_R")
_H = TypeVar("_H")


def _series(frozen: _Frozen, now: float) -> Series:
    t, v = frozen
    return Series(tuple(round(x - now, 3) for x in t), v)


class Histories(Mapping[int, _H], Generic[_R, _H]):
    """Each watched process's (or GPU's) history as one tick left it, by PID (or index);
    one's series are built when it is first looked up. The monitor shows the selected
    process's alone, and the GPUs' where their plot is in sight: building every series at
    every tick (300 points a series once five minutes are kept; seven series a probed rank,
    three a GPU) was work no one read (``python -m bench.cost.monitor_feed``). Immutable:
    the rings are copied at the tick (a C-level copy each); what waits is the rounding of
    each point to seconds before that tick."""

    __slots__ = ("_build", "_built", "_now", "_raw")

    def __init__(self, raw: dict[int, _R], build: Callable[[_R, float], _H], now: float) -> None:
        self._raw = raw
        self._build = build
        self._now = now
        self._built: dict[int, _H] = {}

    def __getitem__(self, key: int) -> _H:
        built = self._built.get(key)
        if built is None:
            built = self._built[key] = self._build(self._raw[key], self._now)
        return built

    def __iter__(self) -> Iterator[int]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)


_ProcessRings = tuple[_Frozen, _Frozen, tuple[_Frozen, ...] | None]  # wait, CPU, the loop's (shares, GPU busy)


def _process_history(raw: _ProcessRings, now: float) -> ProcessHistory:
    wait, cpu, loop = raw
    if loop is None:
        return ProcessHistory(_series(wait, now), _series(cpu, now))
    shares = tuple(_series(r, now) for r in loop[: len(PLOTTED_SHARES)])
    return TrackedHistory(_series(wait, now), _series(cpu, now), LoopHistory(shares, _series(loop[-1], now)))


def _gpu_history(raw: tuple[_Frozen, ...], now: float) -> GpuHistory:
    return GpuHistory(*(_series(r, now) for r in raw))


def _for_need(snapshot: Snapshot) -> Snapshot:
    """``for_need``: its module (and the planner under it) is loaded once a window first
    holds an earlier interval, not before the monitor's first view."""
    from affmon.core.plan.need import for_need

    return for_need(snapshot)


class Monitor:
    def __init__(
        self,
        topology: Topology,
        info: SourceInfo,
        *,
        history_len: int = HISTORY_LEN,
        thresholds: Thresholds = DEFAULT_THRESHOLDS,
    ) -> None:
        self.topology = topology
        self.info = info
        self.history_len = history_len
        self.thresholds = thresholds
        self.state: Tick = start(topology, thresholds)
        self._gpu: dict[int, tuple[_Ring, _Ring, _Ring]] = {}
        self._proc: dict[tuple[int, int], tuple[_Ring, _Ring]] = {}
        self._loop: dict[tuple[int, int], tuple[_Ring, ...]] = {}  # the plotted shares, then GPU busy
        self._intervals: deque[float] = deque(maxlen=LAG_WINDOW)
        self._paused_interval = False  # the next interval spans a pause: not the monitor's pace
        self.recent: tuple[Snapshot, ...] = ()  # the last PIN_WINDOW snapshots, oldest first

    def feed(
        self, sample: Sample, expected_masks: ExpectedMasks | None = None, *, finished: bool = False
    ) -> View | None:
        """Take the next sample; the view of the interval it closes (None for the first
        sample, or one that is not newer than the last: rates need time between two)."""
        self.state = advance(self.state, sample, expected_masks)
        snapshot = self.state.snapshot
        if snapshot is None:
            return None
        findings = self.state.findings
        jobs = list(self.state.jobs)
        loops = self.state.loops
        if self._paused_interval:
            self._paused_interval = False
        else:
            self._intervals.append(snapshot.interval_s)
        self.recent = widened(self.recent, snapshot, PIN_WINDOW, earlier=_for_need)
        now = sample.monotonic_s
        gpus = tuple(gpu_row(g) for g in snapshot.gpus)
        for g in gpus:
            rings = self._gpu.setdefault(g.index, (self._ring(), self._ring(), self._ring()))
            util = None if g.lost or g.util_percent is None else float(g.util_percent)
            rings[0].add(now, util)
            rings[1].add(now, g.pcie_rx_bytes_per_s)
            rings[2].add(now, g.pcie_tx_bytes_per_s)
        alive = set()
        for p in snapshot.processes:
            if not p.sample.watched or p.sample.kernel:
                continue
            alive.add(p.sample.key)
            rings2 = self._proc.setdefault(p.sample.key, (self._ring(), self._ring()))
            rings2[0].add(now, p.wait_ratio)
            rings2[1].add(now, p.cpu_percent)
            report = loops.get(p.sample.pid)
            if report is not None or p.sample.key in self._loop:  # once probed, a gap where a tick has none
                shares, busy = loop_points(report)
                rings3 = self._loop.setdefault(p.sample.key, tuple(self._ring() for _ in range(len(shares) + 1)))
                for ring, value in zip(rings3, (*shares, busy), strict=True):
                    ring.add(now, value)
        self._proc = {k: v for k, v in self._proc.items() if k in alive}  # exited processes go
        self._loop = {k: v for k, v in self._loop.items() if k in alive}
        gpu_history = Histories(
            {i: tuple(r.frozen() for r in rings) for i, rings in self._gpu.items()}, _gpu_history, now
        )
        process_history = Histories(
            {key[0]: self._frozen(key, rings) for key, rings in self._proc.items()}, _process_history, now
        )
        samples = {p.sample.pid: p.sample for p in snapshot.processes}
        processes = tuple(
            detailed(r, loops.get(r.pid), samples.get(r.pid)) for r in process_rows(snapshot, jobs, findings)
        )
        return View(
            tick=self.ticks,
            header=self._header(sample, sum(1 for p in processes if p.watched), finished),
            gpus=gpus,
            processes=processes,
            findings=findings,
            jobs=tuple(j.pid for j in jobs),
            training_jobs=frozenset(j.pid for j in jobs if j.training),
            cores=core_groups(snapshot, jobs, self.thresholds),
            gpu_history=gpu_history,
            process_history=process_history,
            snapshot=snapshot,
            thresholds=self.thresholds,
        )

    def first_look(self, sample: Sample) -> View:
        """``first_look`` of ``sample`` (what one sample shows before any interval has
        closed). Changes no state: the next ``feed`` closes the first interval as if this
        had not been called."""
        return first_look(
            self.topology,
            self.info,
            sample,
            tick=self.ticks,
            samples_seen=self.samples_seen,
            lagging_interval_s=self._lagging(),
        )

    @property
    def tracker(self) -> FindingTracker:
        return self.state.tracker

    @property
    def samples_seen(self) -> int:
        return self.state.samples

    @property
    def ticks(self) -> int:
        """Intervals closed (views made)."""
        return self.state.intervals

    def window_until(self, snapshot: Snapshot) -> tuple[Snapshot, ...]:
        """The recent snapshots up to and including ``snapshot`` (a view's), oldest first:
        the window a suggestion for that view is sized over, ``snapshot`` itself last (the
        window keeps a lighter copy of it once a newer one came). Empty when ``snapshot``
        is no longer among them. Safe from the UI thread: ``recent`` is read once."""
        recent = self.recent
        at = snapshot.current.monotonic_s
        for i in range(len(recent) - 1, -1, -1):
            if recent[i].current.monotonic_s == at:
                return (*recent[:i], snapshot)
        return ()

    def _frozen(self, key: tuple[int, int], rings: tuple[_Ring, _Ring]) -> _ProcessRings:
        loop = self._loop.get(key)
        return rings[0].frozen(), rings[1].frozen(), None if loop is None else tuple(r.frozen() for r in loop)

    def _ring(self) -> _Ring:
        return _Ring(self.history_len)

    def _header(self, sample: Sample, watched: int, finished: bool) -> HeaderView:
        return header_view(
            self.topology,
            self.info,
            sample,
            watched=watched,
            finished=finished,
            samples_seen=self.samples_seen,
            lagging_interval_s=self._lagging(),
        )

    def resumed(self) -> None:
        """The ticks start again after a pause: the interval that closes next spans the
        pause, which says nothing of the pace the monitor keeps (without this, the header
        said "falling behind" for ten ticks after every pause)."""
        self._paused_interval = True

    def _lagging(self) -> float | None:
        """The interval the monitor really keeps, when a live one falls behind the one asked
        for by more than a fifth over the last ``LAG_WINDOW`` views (a loaded machine, or
        more threads than one interval can read): the header must not claim "every 1 s"."""
        if not self.info.live or len(self._intervals) < LAG_WINDOW // 2:
            return None
        kept = sum(self._intervals) / len(self._intervals)
        return kept if kept > self.info.interval_s * LAG_TOLERANCE else None
