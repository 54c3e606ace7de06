"""The TUI's model: consecutive samples in, one immutable ``View`` per tick out.

A ``Monitor`` keeps what a single snapshot cannot give: the previous sample (rates need
two), the ``FindingTracker`` (a finding must hold for two intervals), and bounded
history (fixed-length deques: per GPU utilisation and PCIe RX/TX, per watched process
wait ratio and CPU use, the last ``history_len`` ticks). It is owned by one thread, the
sampler worker; what it hands out is frozen, so the UI thread shares nothing mutable.
"""

from __future__ import annotations

from collections import deque
from types import MappingProxyType

from affmon.core.findings import DEFAULT_THRESHOLDS, ExpectedMasks, FindingTracker, Thresholds, find_jobs
from affmon.core.rates import Snapshot, gpu_rates, process_rates
from affmon.core.samples import Sample
from affmon.core.tick import Tick, advance, start
from affmon.core.topology import Topology
from affmon.sources.stream import SourceInfo
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


class _Ring:
    """Times and values of one series, oldest dropped first."""

    def __init__(self, length: int) -> None:
        self.t: deque[float] = deque(maxlen=length)
        self.v: deque[float | None] = deque(maxlen=length)

    def add(self, t: float, value: float | None) -> None:
        self.t.append(t)
        self.v.append(value)

    def series(self, now: float) -> Series:
        return Series(tuple(round(t - now, 3) for t in self.t), tuple(self.v))


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
        self._intervals: deque[float] = deque(maxlen=LAG_WINDOW)

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
        self._intervals.append(snapshot.interval_s)
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
        self._proc = {k: v for k, v in self._proc.items() if k in alive}  # exited processes go
        gpu_history = {i: GpuHistory(*(r.series(now) for r in rings)) for i, rings in self._gpu.items()}
        process_history = {
            pid: ProcessHistory(rings[0].series(now), rings[1].series(now)) for (pid, _), rings in self._proc.items()
        }
        processes = process_rows(snapshot, jobs, findings)
        return View(
            tick=self.ticks,
            header=self._header(sample, sum(1 for p in processes if p.watched), finished),
            gpus=gpus,
            processes=processes,
            findings=findings,
            jobs=tuple(j.pid for j in jobs),
            cores=core_groups(snapshot, jobs),
            gpu_history=MappingProxyType(gpu_history),
            process_history=MappingProxyType(process_history),
            snapshot=snapshot,
        )

    def first_look(self, sample: Sample) -> View:
        """What one sample shows before any interval has closed: the processes, their
        masks, threads and users, the GPUs' own readings; every rate unknown (None, shown
        as "-"), no findings, no history, ``measured`` False. Live, it fills the screen
        while the first interval runs instead of a blank one. Changes no state: the next
        ``feed`` closes the first interval as if this had not been called."""
        topo = self.topology
        snapshot = Snapshot(
            topology=topo,
            previous=sample,
            current=sample,
            interval_s=0.0,
            processes=tuple(process_rates(p, None, 0.0, topo) for p in sample.processes),
            gpus=tuple(gpu_rates(g, None, 0.0, topo) for g in sample.gpus),
        )
        jobs = find_jobs(snapshot)
        processes = process_rows(snapshot, jobs, ())
        return View(
            tick=self.ticks,
            header=self._header(sample, sum(1 for p in processes if p.watched), finished=False),
            gpus=tuple(gpu_row(g) for g in snapshot.gpus),
            processes=processes,
            findings=(),
            jobs=tuple(j.pid for j in jobs),
            cores=core_groups(snapshot, jobs),
            gpu_history=MappingProxyType({}),
            process_history=MappingProxyType({}),
            snapshot=snapshot,
            measured=False,
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

    def _ring(self) -> _Ring:
        return _Ring(self.history_len)

    def _header(self, sample: Sample, watched: int, finished: bool) -> HeaderView:
        topo = self.topology
        info = self.info
        position = None
        if info.total_samples is not None:
            position = f"sample {self.samples_seen}/{info.total_samples}"
        return HeaderView(
            host=info.host,
            cpus=len(topo.online_cpus),
            cores=len(topo.cores),
            numa_nodes=len(topo.cpu_numa_nodes),
            gpus=len(sample.gpus) or len(topo.gpus),
            interval_s=info.interval_s,
            nvml_status=info.nvml_status,
            source=info.source,
            position=position,
            finished=finished,
            wall_time_s=sample.wall_time_s,
            threads=sample.thread_count,
            processes=len(sample.processes),
            watched=watched,
            sample_cost_s=sample.duration_s,
            notice=info.notice,
            lagging_interval_s=self._lagging(),
        )

    def _lagging(self) -> float | None:
        """The interval the monitor really keeps, when a live one falls behind the one asked
        for by more than a fifth over the last ``LAG_WINDOW`` views (a loaded machine, or
        more threads than one interval can read): the header must not claim "every 1 s"."""
        if self.info.source != "live" or len(self._intervals) < LAG_WINDOW // 2:
            return None
        kept = sum(self._intervals) / len(self._intervals)
        return kept if kept > self.info.interval_s * LAG_TOLERANCE else None
