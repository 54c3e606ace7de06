"""``ExportState`` -> metric families: names, types, label values and numbers, as plain
frozen values. What prometheus-client then formats (``collector.py``) is exactly this.

A value that is unknown (``None``: no schedstat, NVML said NotSupported, a GPU lost)
gives no series rather than a made-up zero. Per-thread families only with
``threads=True``: they multiply the series by the thread count (docs/export.md), so they
are served for at most ``max_threads`` threads, the busiest over the last interval, and
``affmon_export_threads_left_out`` counts the rest. One process of 100,000 threads then
costs a scrape what ``max_threads`` threads cost, not 900,000 series.
"""

from __future__ import annotations

import heapq
import platform
from collections.abc import Iterable
from dataclasses import dataclass

import affmon
from affmon.core.model.rates import ProcessRates, Snapshot, ThreadRates
from affmon.core.rules.base import Finding
from affmon.export import MAX_THREADS
from affmon.export import catalogue as m
from affmon.export.catalogue import CATALOGUE, MetricSpec
from affmon.export.state import ExportState, ProcessTotals, gpu_key

Series = tuple[tuple[str, ...], float]  # label values in the spec's label order, value


@dataclass(frozen=True, slots=True)
class Family:
    spec: MetricSpec
    series: tuple[Series, ...]

    @property
    def name(self) -> str:
        return self.spec.name


class _Builder:
    def __init__(self, threads: bool) -> None:
        self.series: dict[MetricSpec, list[Series]] = {s: [] for s in CATALOGUE if threads or not s.per_thread}

    def add(self, spec: MetricSpec, labels: Iterable[object], value: float | None) -> None:
        if value is None or spec not in self.series:
            return
        values = tuple("" if v is None else str(v) for v in labels)
        assert len(values) == len(spec.labels), spec.name
        self.series[spec].append((values, float(value)))

    def families(self) -> tuple[Family, ...]:
        return tuple(Family(spec, tuple(series)) for spec, series in self.series.items())


def _seconds(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e9


def _joined(values: Iterable[int]) -> str:
    return ",".join(str(v) for v in sorted(set(values)))


def _process(out: _Builder, p: ProcessRates, totals: ProcessTotals | None, state: ExportState, snap: Snapshot) -> None:
    s = p.sample
    labels = (s.pid,)
    if totals is not None:
        out.add(m.PROCESS_CPU, labels, _seconds(totals.cpu_ns))
        out.add(m.PROCESS_WAIT, labels, _seconds(totals.wait_ns))
        out.add(m.PROCESS_VOLUNTARY, labels, totals.voluntary_switches)
        out.add(m.PROCESS_INVOLUNTARY, labels, totals.involuntary_switches)
        out.add(m.PROCESS_MIGRATIONS, labels, totals.migrations)
    out.add(m.PROCESS_WAIT_RATIO, labels, p.wait_ratio)
    out.add(m.PROCESS_THREADS, labels, len(s.threads))
    main = s.main_thread
    out.add(m.PROCESS_MASK_CPUS, labels, None if main is None or main.allowed_cpus is None else len(main.allowed_cpus))
    out.add(m.PROCESS_NODES_RUN_ON, labels, len(p.ran_on_numa_nodes))
    gpu_nodes = {g.sample.index: g.numa_node for g in snap.gpus}
    nodes = [n for n in (gpu_nodes.get(i) for i in s.gpu_indices) if n is not None]
    job = state.job_of.get(s.pid)
    training = "" if job is None else str(job in state.training_jobs).lower()
    out.add(m.PROCESS_INFO, (s.pid, s.name, s.user, job, training, _joined(s.gpu_indices), _joined(nodes)), 1)
    c = s.context
    if c is not None:
        job_id = None if c.slurm_job_id is None else c.slurm_job_id + (f".{c.slurm_step}" if c.slurm_step else "")
        rank = c.local_rank if c.local_rank is not None else c.slurm_local_id
        placed = (c.scheduler, job_id, c.pod_uid, rank, c.numa_binding)
        if any(v is not None and v != "" for v in placed):  # else every label would be empty
            out.add(m.PROCESS_CONTEXT_INFO, (*labels, *placed), 1)
    if s.memory is not None:
        for node, size in sorted(s.memory.resident_bytes_by_node.items()):
            out.add(m.PROCESS_MEMORY, (*labels, node), size)
    loop = state.loops.get(s.pid)
    if loop is not None and loop.breakdown is not None:
        for share, value in loop.breakdown.shares.items():
            out.add(m.LOOP_SHARE, (*labels, share), value)
        out.add(m.LOOP_GPU_BUSY, labels, loop.breakdown.gpu_busy)


def _demand_ns(th: ThreadRates) -> int:
    """How much the thread wanted a CPU over the last interval: ran plus waited to run."""
    return (th.cpu_ns_delta or 0) + (th.wait_ns_delta or 0)


def busiest(processes: Iterable[ProcessRates], limit: int) -> tuple[set[tuple[int, int]], int]:
    """The (pid, tid) of at most ``limit`` threads, the busiest first (ties: lower pid, then
    lower tid), and how many threads were left out. O(threads x log limit): one pass, a heap
    of ``limit``."""
    keyed = [(_demand_ns(th), -p.sample.pid, -th.sample.tid) for p in processes for th in p.threads]
    if len(keyed) <= limit:
        return {(-pid, -tid) for _, pid, tid in keyed}, 0
    kept = heapq.nlargest(limit, keyed)
    return {(-pid, -tid) for _, pid, tid in kept}, len(keyed) - len(kept)


def _threads(out: _Builder, p: ProcessRates, snap: Snapshot, served: set[tuple[int, int]]) -> None:
    for th in p.threads:
        t = th.sample
        if (p.sample.pid, t.tid) not in served:
            continue
        labels = (p.sample.pid, t.tid)
        out.add(m.THREAD_INFO, (*labels, t.name), 1)
        out.add(m.THREAD_CPU, labels, _seconds(t.cpu_ns))
        out.add(m.THREAD_WAIT, labels, _seconds(t.wait_ns))
        out.add(m.THREAD_VOLUNTARY, labels, t.voluntary_switches)
        out.add(m.THREAD_INVOLUNTARY, labels, t.involuntary_switches)
        out.add(m.THREAD_MIGRATIONS, labels, t.migrations)
        out.add(m.THREAD_WAIT_RATIO, labels, th.wait_ratio)
        out.add(m.THREAD_LAST_CPU, labels, t.psr)
        out.add(m.THREAD_NUMA_NODE, labels, None if t.psr is None else snap.topology.node_of_cpu(t.psr))
        out.add(m.THREAD_MASK_CPUS, labels, None if t.allowed_cpus is None else len(t.allowed_cpus))


def _finding(out: _Builder, f: Finding) -> None:
    gpu = f.evidence.get("gpu")
    out.add(m.FINDING, (f.code, str(f.severity), f.pid, gpu if isinstance(gpu, int) else ""), 1)


def _gpus(out: _Builder, state: ExportState, snap: Snapshot) -> None:
    for g in snap.gpus:
        s, link = g.sample, g.link
        labels = (s.index, g.numa_node)
        out.add(m.GPU_INFO, (*labels, s.name, s.uuid, s.pci_bus_id), 1)
        out.add(m.GPU_UTILIZATION, labels, None if s.util_percent is None else s.util_percent / 100)
        out.add(m.GPU_MEMORY_USED, labels, s.mem_used_bytes)
        out.add(m.GPU_MEMORY_TOTAL, labels, s.mem_total_bytes)
        totals = state.totals.gpus.get(gpu_key(s))
        if totals is not None:
            out.add(m.GPU_PCIE_RX, labels, totals.pcie_rx_bytes)
            out.add(m.GPU_PCIE_TX, labels, totals.pcie_tx_bytes)
        out.add(m.GPU_LINK_GEN, labels, link.gen)
        out.add(m.GPU_LINK_MAX_GEN, labels, link.max_gen)
        out.add(m.GPU_LINK_WIDTH, labels, link.width)
        out.add(m.GPU_LINK_MAX_WIDTH, labels, link.max_width)


def families(state: ExportState, *, threads: bool = False, max_threads: int = MAX_THREADS) -> tuple[Family, ...]:
    """Every family of the catalogue (per-thread ones only with ``threads``, for at most
    ``max_threads`` threads), in its order; a family with no series still says what it
    would hold."""
    out = _Builder(threads)
    snap = state.snapshot
    left_out = 0
    if snap is not None:
        watched = [p for p in snap.processes if p.sample.watched and not p.sample.kernel]  # others: "what else runs"
        served, left_out = busiest(watched, max_threads) if threads else (set(), 0)
        for p in watched:
            _process(out, p, state.totals.processes.get(p.sample.key), state, snap)
            if threads:
                _threads(out, p, snap, served)
        for f in state.findings:
            _finding(out, f)
        _gpus(out, state, snap)
    out.add(m.EXPORT_SAMPLES, (), state.samples_total)
    out.add(m.EXPORT_ERRORS, (), state.errors_total)
    out.add(m.EXPORT_LAST, (), None if state.last_sample is None else state.last_sample.wall_time_s)
    out.add(m.EXPORT_DURATION, (), state.sample_duration_s)
    out.add(m.EXPORT_CPU, (), state.exporter_cpu_s)
    out.add(m.EXPORT_NVML, (), 1 if state.nvml_available else 0)
    out.add(m.EXPORT_THREADS_LEFT_OUT, (), left_out)  # kept out by _Builder without ``threads``
    if state.replay is not None:
        out.add(m.EXPORT_REPLAY_ENDED, (), 1 if state.replay.ended else 0)
        out.add(m.EXPORT_REPLAY_RESTARTS, (), state.replay.restarts)
    out.add(m.BUILD_INFO, (affmon.__version__, platform.python_version()), 1)
    for spec in m.SELF:
        out.add(spec, (), state.own_process.get(spec.name))
    return out.families()
