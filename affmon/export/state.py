"""What the exporter serves, as one frozen value per tick, and the pure step between ticks.

The sampling thread calls ``step(state, sample, ...)`` and publishes the result by
swapping one reference; a scrape reads that reference once and renders it. Nothing here
reads the system, so every rule below is tested with hand-made samples.

Counters. The kernel counts per thread, so a process's sum over its live threads falls
when a thread exits, which ``rate()`` would read as a reset (a spike of the whole
total). ``advance`` therefore integrates: a process seen for the first time starts at
the sum of its threads' counters (what the kernel counted so far); after that each tick
adds every thread's increase since the previous sample, and the whole count of a thread
born in the interval. The work an exiting thread did after the previous sample is lost;
the counter never falls while the process lives. A process that exits (or whose PID is
reused: the key holds the start time) leaves ``Totals`` at the next tick, so its series
disappear from the next scrape and Prometheus marks them stale.

PCIe. NVML's byte counters are 32 bits on the H200 and wrap several times a second, so
only the gateway's 20 ms window rate is meaningful there. The exported counter adds
``rate * interval`` each tick (an estimate that ``rate()`` over minutes averages well),
or the exact delta where NVML's counters are 64 bits wide.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from affmon.core.model.rates import GpuRates, Snapshot
from affmon.core.model.samples import GpuSample, ProcessSample, Sample, ThreadSample
from affmon.core.model.topology import Topology
from affmon.core.rules import tick
from affmon.core.rules.base import ExpectedMasks, Finding
from affmon.core.rules.evaluate import FindingTracker
from affmon.core.rules.loop_report import LoopReport
from affmon.core.rules.tick import Tick

ProcessKey = tuple[int, int]  # (pid, start ticks)
GpuKey = tuple[int, str | None]  # (NVML index, PCI bus id)


@dataclass(frozen=True, slots=True)
class ProcessTotals:
    """A process's integrated counters; None: no thread ever reported that counter."""

    cpu_ns: int | None
    wait_ns: int | None
    voluntary_switches: int | None
    involuntary_switches: int | None
    migrations: int | None

    def values(self) -> tuple[int | None, ...]:
        return (self.cpu_ns, self.wait_ns, self.voluntary_switches, self.involuntary_switches, self.migrations)


@dataclass(frozen=True, slots=True)
class GpuTotals:
    pcie_rx_bytes: float | None
    pcie_tx_bytes: float | None


@dataclass(frozen=True)
class Totals:
    processes: Mapping[ProcessKey, ProcessTotals] = field(default_factory=dict)
    gpus: Mapping[GpuKey, GpuTotals] = field(default_factory=dict)


_FIELDS = ProcessTotals.__slots__


def _counts(t: ThreadSample) -> tuple[int | None, ...]:
    """A thread's counters in ``ProcessTotals``'s field order."""
    return (t.cpu_ns, t.wait_ns, t.voluntary_switches, t.involuntary_switches, t.migrations)


def _sum(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def advance_process(old: ProcessTotals | None, cur: ProcessSample, prev: ProcessSample | None) -> ProcessTotals:
    """The process's counters after ``cur``, from ``old`` (its totals after ``prev``)."""
    now = [_counts(t) for t in cur.threads]
    first = [_sum([c[i] for c in now]) for i in range(len(_FIELDS))]
    if old is None or prev is None or prev.key != cur.key:
        return ProcessTotals(*first)
    before = {(t.tid, t.start_ticks): _counts(t) for t in prev.threads}
    totals = list(old.values())
    for thread, counts in zip(cur.threads, now, strict=True):
        was = before.get((thread.tid, thread.start_ticks))
        for i, value in enumerate(counts):
            total = totals[i]
            if value is None or total is None:
                continue
            if was is None:  # born in the interval: all of its count is new
                totals[i] = total + value
                continue
            then = was[i]
            if then is not None and value >= then:  # else unknown before, or reset: add nothing
                totals[i] = total + value - then
    # A counter no thread knew before starts from what the threads know now.
    return ProcessTotals(*(f if t is None else t for f, t in zip(first, totals, strict=True)))


def _pcie(
    old: float | None, total_now: int | None, total_before: int | None, rate: float | None, seconds: float
) -> float | None:
    if old is None:
        if total_now is not None:  # 64-bit counters: start where NVML stands
            return float(total_now)
        return None if rate is None else rate * seconds
    if total_now is not None and total_before is not None and total_now >= total_before:
        return old + (total_now - total_before)
    return old if rate is None else old + rate * seconds


def gpu_key(gpu: GpuSample) -> GpuKey:
    return (gpu.index, gpu.pci_bus_id)


def advance_gpu(old: GpuTotals | None, cur: GpuRates, prev: GpuSample | None, seconds: float) -> GpuTotals:
    s = cur.sample
    return GpuTotals(
        pcie_rx_bytes=_pcie(
            old.pcie_rx_bytes if old else None,
            s.pcie_rx_bytes_total,
            prev.pcie_rx_bytes_total if prev else None,
            cur.pcie_rx_bytes_per_s,
            seconds,
        ),
        pcie_tx_bytes=_pcie(
            old.pcie_tx_bytes if old else None,
            s.pcie_tx_bytes_total,
            prev.pcie_tx_bytes_total if prev else None,
            cur.pcie_tx_bytes_per_s,
            seconds,
        ),
    )


def advance(totals: Totals, snapshot: Snapshot) -> Totals:
    """Totals after ``snapshot``: only processes and GPUs of its current sample remain."""
    prev_processes = {p.pid: p for p in snapshot.previous.processes}
    processes = {}
    for p in snapshot.current.processes:
        if p.watched and not p.kernel:
            processes[p.key] = advance_process(totals.processes.get(p.key), p, prev_processes.get(p.pid))
    prev_gpus = {gpu_key(g): g for g in snapshot.previous.gpus}
    gpus = {}
    for g in snapshot.gpus:
        key = gpu_key(g.sample)
        gpus[key] = advance_gpu(totals.gpus.get(key), g, prev_gpus.get(key), snapshot.interval_s)
    return Totals(processes, gpus)


@dataclass(frozen=True)
class ReplayStatus:
    """Where a replayed recording stands (``affmon export --replay``): the passes started
    again from its start, and whether a replay played once has ended."""

    restarts: int = 0
    ended: bool = False


@dataclass(frozen=True)
class ExportState:
    """Everything one scrape renders. Built only by ``step``/``failed``; never mutated.

    ``tick`` is the loop every front end runs (``affmon.core.rules.tick``), as the last
    sample left it. ``snapshot`` to ``loops`` are what a scrape shows of the last interval
    it closed: a sample that closes none (the first, or a replay starting again) leaves
    them as they were. The rest are the exporter's own counters."""

    nvml_available: bool = False
    tick: Tick | None = None  # None until the first sample
    snapshot: Snapshot | None = None  # None until two samples exist
    totals: Totals = field(default_factory=Totals)
    findings: tuple[Finding, ...] = ()  # active, debounced, of processes still alive
    job_of: Mapping[int, int] = field(default_factory=dict)  # watched pid -> its job's root pid
    # Root pids of the jobs that are training jobs (``Job.training``: the definition
    # ``diagnose``, the monitor and the advice count by).
    training_jobs: frozenset[int] = frozenset()
    loops: Mapping[int, LoopReport] = field(default_factory=dict)  # pid -> its training loop's breakdown
    errors_total: int = 0
    sample_duration_s: float | None = None
    exporter_cpu_s: float | None = None
    own_process: Mapping[str, float] = field(default_factory=dict)  # process_* sample name -> value
    replay: ReplayStatus | None = None  # None: live

    @property
    def last_sample(self) -> Sample | None:
        return None if self.tick is None else self.tick.last_sample

    @property
    def tracker(self) -> FindingTracker:
        return FindingTracker() if self.tick is None else self.tick.tracker

    @property
    def samples_total(self) -> int:
        return 0 if self.tick is None else self.tick.samples


def step(
    state: ExportState,
    sample: Sample,
    topology: Topology,
    expected_masks: ExpectedMasks | None = None,
    exporter_cpu_s: float | None = None,
    own_process: Mapping[str, float] | None = None,
) -> ExportState:
    """The state after one more sample; ``own_process``: the exporter's ``process_*`` values,
    read with it. ``topology`` starts the tick at the first sample (the exporter serves one
    machine); the tick keeps it."""
    ticked = tick.advance(tick.start(topology) if state.tick is None else state.tick, sample, expected_masks)
    counted = replace(
        state,
        tick=ticked,
        sample_duration_s=sample.duration_s,
        exporter_cpu_s=exporter_cpu_s,
        own_process=state.own_process if own_process is None else own_process,
    )
    snapshot = ticked.snapshot
    if snapshot is None:  # the first sample, or one not newer than the last: no interval to show
        return counted
    return replace(
        counted,
        snapshot=snapshot,
        totals=advance(state.totals, snapshot),
        findings=ticked.findings,
        job_of={m.sample.pid: job.pid for job in ticked.jobs for m in job.members},
        training_jobs=frozenset(job.pid for job in ticked.jobs if job.training),
        loops=ticked.loops,
    )


def failed(state: ExportState) -> ExportState:
    """A sample that could not be taken: the last good state stays, the failure is counted."""
    return replace(state, errors_total=state.errors_total + 1)
