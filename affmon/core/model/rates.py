"""Rates from two samples: CPU share, run-queue wait share, switches, migrations, and
where threads actually ran.

Definitions (all per interval between the two samples):

* ``cpu_percent``: CPU time delta over wall time, 100 = one CPU busy.
* ``wait_ratio``: run-queue wait delta / (run delta + wait delta), from ``schedstat``.
  Measured on an H200 machine: 0.00 on the healthy job, 0.45 with other tenants' hogs,
  0.61 with a ``taskset -c 0-1`` mask. A thread that neither ran nor waited has no ratio (None).
* ``ran_on_cpus``: the ``psr`` of threads that got CPU time in the interval. ``psr``
  is where a thread last ran, so this is a lower bound: a thread that migrated twice
  between samples shows only its last CPU (``migrations_per_s`` counts the rest).

A value is None when either sample lacks it, or when the thread or process is new
(no earlier sample to diff against), or when the sampler carried a process's threads
from an earlier tick instead of reading them (``ProcessSample.threads_read``). Counters
that went backwards (a reset, a reused id) give None, never a negative rate.

A sample the sampler handed out again, unchanged (``handed_back``), moved by zero: its
rates are those of the interval before where nothing moved then either, handed out again,
not computed; the same values as for an equal copy.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

from affmon.core.model.cpuset import CpuSet
from affmon.core.model.samples import GpuSample, PcieLink, ProcessSample, Sample, ThreadSample
from affmon.core.model.topology import Topology


@dataclass(frozen=True, slots=True)
class ThreadRates:
    sample: ThreadSample
    cpu_percent: float | None
    wait_ratio: float | None
    voluntary_switches_per_s: float | None
    involuntary_switches_per_s: float | None
    migrations_per_s: float | None
    cpu_ns_delta: int | None
    wait_ns_delta: int | None

    @property
    def ran(self) -> bool:
        return bool(self.cpu_ns_delta)


def _unknown(t: ThreadSample) -> ThreadRates:
    return ThreadRates(t, None, None, None, None, None, None, None)


class UnknownRates(Sequence[ThreadRates]):
    """The per-thread rates of a process whose threads were carried at one of the two
    samples (``ProcessSample.threads_read``): every one unknown. Made as they are read,
    not held: a rates object a thread, held for each thread of every quiet process, was
    1 MB at 10,000 threads and said nothing. Equal to any sequence of the same rates."""

    __slots__ = ("samples",)

    def __init__(self, samples: tuple[ThreadSample, ...]) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    @overload
    def __getitem__(self, index: int) -> ThreadRates: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[ThreadRates, ...]: ...

    def __getitem__(self, index: int | slice) -> ThreadRates | tuple[ThreadRates, ...]:
        if isinstance(index, slice):
            return tuple(map(_unknown, self.samples[index]))
        return _unknown(self.samples[index])

    def __iter__(self) -> Iterator[ThreadRates]:
        return map(_unknown, self.samples)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, UnknownRates):
            return self.samples == other.samples
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(tuple(self))  # as the tuple it equals

    def __repr__(self) -> str:
        return f"UnknownRates({len(self.samples)} threads)"


@dataclass(frozen=True, slots=True)
class ProcessRates:
    sample: ProcessSample
    # ``UnknownRates`` where the threads were carried at either of the two samples
    # (``ProcessSample.threads_read``): no thread has a rate, none counts as having run.
    threads: Sequence[ThreadRates]
    cpu_percent: float | None
    wait_ratio: float | None
    voluntary_switches_per_s: float | None
    involuntary_switches_per_s: float | None
    migrations_per_s: float | None
    ran_on_cpus: CpuSet
    ran_on_numa_nodes: tuple[int, ...]

    @property
    def rated(self) -> bool:
        """Whether its threads have rates this interval (False: ``UnknownRates``, none ran,
        and a pass over the threads that ran can skip it without making them)."""
        return not isinstance(self.threads, UnknownRates)


@dataclass(frozen=True, slots=True)
class GpuRates:
    sample: GpuSample
    pcie_tx_bytes_per_s: float | None
    pcie_rx_bytes_per_s: float | None
    numa_node: int | None
    local_cpus: CpuSet | None

    @property
    def link(self) -> PcieLink:
        return self.sample.pcie_link


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Two samples made into rates against a topology: what every view renders."""

    topology: Topology
    previous: Sample
    current: Sample
    interval_s: float
    processes: tuple[ProcessRates, ...]
    gpus: tuple[GpuRates, ...]

    @property
    def thread_count(self) -> int:
        return self.current.thread_count

    def process(self, pid: int) -> ProcessRates | None:
        return next((p for p in self.processes if p.sample.pid == pid), None)


def handed_back(new: object, old: object) -> bool:
    """Whether ``new`` is ``old`` handed out again: the sampler hands out a process's
    sample, a thread's sample or a process's tuple of thread samples a second time, as the
    same object, only where nothing in it moved (``affmon.collect.sampler.Reuse``). Every
    shortcut the rates take on a sample that did not change asks this, and nothing else:
    an equal copy (a recording read back, the sampler with its reuse off) takes the
    general path, to the same values."""
    return new is old


def _delta(new: int | None, old: int | None) -> int | None:
    if new is None or old is None or new < old:
        return None
    return new - old


def _per_s(delta: int | None, seconds: float) -> float | None:
    return None if delta is None else delta / seconds


def _zero(value: int | None) -> float | None:
    return None if value is None else 0.0


def thread_rates(
    cur: ThreadSample, prev: ThreadSample | None, seconds: float, before: ThreadRates | None = None
) -> ThreadRates:
    """``before``: this thread's rates in the interval before, if known: where the thread
    was not scheduled in either interval they are the same values of the same sample,
    and are handed out again instead of built anew."""
    if prev is None or prev.start_ticks != cur.start_ticks:
        return ThreadRates(cur, None, None, None, None, None, None, None)
    if handed_back(cur, prev):
        # The sampler hands back the same sample for a thread that was not scheduled
        # (most threads, most ticks): every counter moved by zero.
        if before is not None and handed_back(cur, before.sample) and _unmoved(before):
            return before
        return ThreadRates(
            cur,
            _zero(cur.cpu_ns),
            None,
            _zero(cur.voluntary_switches),
            _zero(cur.involuntary_switches),
            _zero(cur.migrations),
            None if cur.cpu_ns is None else 0,
            None if cur.wait_ns is None else 0,
        )
    run = _delta(cur.cpu_ns, prev.cpu_ns)
    wait = _delta(cur.wait_ns, prev.wait_ns)
    ratio = None if run is None or wait is None or run + wait == 0 else wait / (run + wait)
    return ThreadRates(
        sample=cur,
        cpu_percent=None if run is None else 100.0 * run / (seconds * 1e9),
        wait_ratio=ratio,
        voluntary_switches_per_s=_per_s(_delta(cur.voluntary_switches, prev.voluntary_switches), seconds),
        involuntary_switches_per_s=_per_s(_delta(cur.involuntary_switches, prev.involuntary_switches), seconds),
        migrations_per_s=_per_s(_delta(cur.migrations, prev.migrations), seconds),
        cpu_ns_delta=run,
        wait_ns_delta=wait,
    )


def _unmoved(r: ThreadRates) -> bool:
    """Whether ``r`` holds what ``thread_rates`` gives a thread whose sample did not change."""
    t = r.sample
    return (
        r.wait_ratio is None
        and r.cpu_percent == _zero(t.cpu_ns)
        and r.cpu_ns_delta == (None if t.cpu_ns is None else 0)
        and r.wait_ns_delta == (None if t.wait_ns is None else 0)
        and r.voluntary_switches_per_s == _zero(t.voluntary_switches)
        and r.involuntary_switches_per_s == _zero(t.involuntary_switches)
        and r.migrations_per_s == _zero(t.migrations)
    )


def _sum(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def process_rates(
    cur: ProcessSample,
    prev: ProcessSample | None,
    seconds: float,
    topology: Topology,
    before: ProcessRates | None = None,
) -> ProcessRates:
    """``before``: this process's rates in the snapshot before. Where its threads were
    carried then too, their per-thread part (all unknown) is reused as it is; where they
    were read, a thread scheduled in neither interval keeps its rates object."""
    same = prev is not None and prev.key == cur.key
    if same and prev is not None and not (cur.threads_read and prev.threads_read):
        carried = before if before is not None and not before.rated else None
        return _carried_rates(cur, prev, seconds, topology, carried)
    old = {t.tid: t for t in prev.threads} if same and prev is not None else {}
    kept = before.threads if before is not None and before.rated else ()
    if len(kept) == len(cur.threads):  # threads in the same places, most ticks: matched by position
        threads = tuple(thread_rates(t, old.get(t.tid), seconds, b) for t, b in zip(cur.threads, kept, strict=True))
    else:
        threads = tuple(thread_rates(t, old.get(t.tid), seconds) for t in cur.threads)
    pairs = [
        (t.cpu_ns_delta, t.wait_ns_delta) for t in threads if t.cpu_ns_delta is not None and t.wait_ns_delta is not None
    ]
    run_ns = sum(run for run, _ in pairs)
    wait_ns = sum(wait for _, wait in pairs)
    wait_ratio = wait_ns / (run_ns + wait_ns) if run_ns + wait_ns > 0 else None
    ran_on = frozenset(t.sample.psr for t in threads if t.ran and t.sample.psr is not None)
    return ProcessRates(
        sample=cur,
        threads=threads,
        cpu_percent=_sum([t.cpu_percent for t in threads]),
        wait_ratio=wait_ratio,
        voluntary_switches_per_s=_sum([t.voluntary_switches_per_s for t in threads]),
        involuntary_switches_per_s=_sum([t.involuntary_switches_per_s for t in threads]),
        migrations_per_s=_sum([t.migrations_per_s for t in threads]),
        ran_on_cpus=ran_on,
        ran_on_numa_nodes=topology.nodes_of(ran_on),
    )


def _carried_rates(
    cur: ProcessSample, prev: ProcessSample, seconds: float, topology: Topology, before: ProcessRates | None
) -> ProcessRates:
    """A process whose threads were not read at one of the two samples (``threads_read``):
    no thread has a rate for this interval (the carried counters are from an earlier tick),
    so none counts as having run; the process's CPU share comes from its own counter."""
    unmoved = None if cur.cpu_ns is None else 0.0
    if (
        handed_back(cur, prev)
        and before is not None
        and handed_back(cur, before.sample)
        and before.cpu_percent == unmoved
    ):
        return before  # the same sample handed out again, and nothing moved before it either
    if before is not None and handed_back(cur.threads, before.sample.threads):
        unknown = before.threads  # the same carried threads (``before`` is unrated: unknown rates)
    else:
        unknown = UnknownRates(cur.threads)
    run = _delta(cur.cpu_ns, prev.cpu_ns)
    return ProcessRates(
        sample=cur,
        threads=unknown,
        cpu_percent=None if run is None else 100.0 * run / (seconds * 1e9),
        wait_ratio=None,
        voluntary_switches_per_s=None,
        involuntary_switches_per_s=None,
        migrations_per_s=None,
        ran_on_cpus=frozenset(),
        ran_on_numa_nodes=topology.nodes_of(frozenset()),
    )


def gpu_rates(cur: GpuSample, prev: GpuSample | None, seconds: float, topology: Topology) -> GpuRates:
    tx = rx = None
    if prev is not None and prev.pci_bus_id == cur.pci_bus_id:
        tx = _per_s(_delta(cur.pcie_tx_bytes_total, prev.pcie_tx_bytes_total), seconds)
        rx = _per_s(_delta(cur.pcie_rx_bytes_total, prev.pcie_rx_bytes_total), seconds)
    if tx is None:
        tx = cur.pcie_tx_window_bytes_per_s
    if rx is None:
        rx = cur.pcie_rx_window_bytes_per_s
    known = topology.gpu(cur.pci_bus_id) if cur.pci_bus_id else None
    return GpuRates(
        sample=cur,
        pcie_tx_bytes_per_s=tx,
        pcie_rx_bytes_per_s=rx,
        numa_node=known.numa_node if known else None,
        local_cpus=known.local_cpus if known else None,
    )


def make_snapshot(previous: Sample, current: Sample, topology: Topology, before: Snapshot | None = None) -> Snapshot:
    """The interval between two samples. ``before``: the snapshot that ended at ``previous``,
    if there is one; the unknown per-thread rates of processes whose threads stay carried
    are taken from it instead of being built again (most unwatched processes, most ticks),
    and so are the rates of threads scheduled in neither interval (in a process whose
    threads were read because some of them ran, most of the others)."""
    seconds = current.monotonic_s - previous.monotonic_s
    if seconds <= 0:
        raise ValueError("samples must be taken in order, with time between them")
    old_processes = {p.pid: p for p in previous.processes}
    befores = {p.sample.key: p for p in before.processes} if before is not None else {}
    old_gpus = {g.index: g for g in previous.gpus}
    processes = []
    for p in current.processes:
        before_p = befores.get(p.key)
        if (
            before_p is not None
            and not before_p.sample.threads_read
            and handed_back(p, before_p.sample)
            and handed_back(p, old_processes.get(p.pid))
            and before_p.cpu_percent == (None if p.cpu_ns is None else 0.0)
        ):
            processes.append(before_p)  # as ``_carried_rates`` would return it, without the calls
        else:
            processes.append(process_rates(p, old_processes.get(p.pid), seconds, topology, before_p))
    return Snapshot(
        topology=topology,
        previous=previous,
        current=current,
        interval_s=seconds,
        processes=tuple(processes),
        gpus=tuple(gpu_rates(g, old_gpus.get(g.index), seconds, topology) for g in current.gpus),
    )
