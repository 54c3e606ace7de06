"""Raw values read in one tick: threads, processes, GPUs. Counters, not rates.

Every field a reader could not get is ``None`` ("unknown"); a zero is always a value
the kernel or NVML reported. Samples are frozen so the sampler thread can hand them to
the UI without sharing anything mutable. Rates come from two samples (``rates.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from affmon.core.model.context import Context
from affmon.core.model.cpuset import CpuSet
from affmon.core.model.loop import LoopWindow


@dataclass(frozen=True)
class NodeMemory:
    """A process's resident pages per NUMA node, in bytes (page counts times each
    mapping's own page size, ``kernelpagesize_kB``: a 2 MiB huge page counts 2 MiB).

    ``resident_bytes_by_node``: every page mapped into the process (anonymous, file,
    shared memory, huge pages). ``anon_bytes_by_node``: the part in anonymous mappings
    (module doc; what the rule judges). ``unsized_pages``: pages of mappings that gave no page
    size and are huge pages of an unknown size (kernels before 3.19), left out of
    both. ``truncated``: the reader stopped at its size bound, so the counts cover the
    mappings read before it. Node ids are the kernel's (possibly sparse)."""

    resident_bytes_by_node: Mapping[int, int] = field(default_factory=dict)
    anon_bytes_by_node: Mapping[int, int] = field(default_factory=dict)
    mappings: int = 0
    unsized_pages: int = 0
    truncated: bool = False

    @property
    def resident_bytes(self) -> int:
        return sum(self.resident_bytes_by_node.values())

    @property
    def anon_bytes(self) -> int:
        return sum(self.anon_bytes_by_node.values())

    def to_json(self) -> dict[str, int]:
        """``memory_by_node`` as ``snapshot --json`` prints it: node id (a JSON key, so
        text) -> resident bytes, in node order."""
        return {str(node): self.resident_bytes_by_node[node] for node in sorted(self.resident_bytes_by_node)}


@dataclass(frozen=True, slots=True)
class ThreadSample:
    """One task (thread) of a process, from ``/proc/PID/task/TID/{stat,schedstat,sched}``."""

    tid: int
    start_ticks: int  # stat field 22: with tid, identifies the thread across samples
    name: str
    state: str  # R, S, D, I, T, Z, ... (stat field 3)
    psr: int | None  # CPU it last ran on (stat field 39)
    flags: int | None  # PF_* bits (stat field 9)
    cpu_ns: int | None  # time on CPU (schedstat field 1, or stat utime+stime)
    wait_ns: int | None  # time runnable but waiting for a CPU (schedstat field 2)
    timeslices: int | None  # times scheduled onto a CPU (schedstat field 3)
    voluntary_switches: int | None
    involuntary_switches: int | None
    migrations: int | None  # se.nr_migrations from sched; None where the kernel has no sched file
    allowed_cpus: CpuSet | None  # affinity mask


@dataclass(frozen=True, slots=True)
class ProcessSample:
    pid: int
    start_ticks: int
    ppid: int | None
    name: str
    uid: int | None
    user: str | None
    cmdline: str | None  # None: unreadable; "" for kernel threads
    mems_allowed: CpuSet | None  # NUMA node ids (Mems_allowed_list)
    cgroup_cpus: CpuSet | None  # the cgroup cpuset's effective CPUs
    threads: tuple[ThreadSample, ...]
    gpu_indices: tuple[int, ...] = ()
    gpu_memory_bytes: int | None = None
    # watched: chosen for display and diagnosis (training processes, or --pid and its
    # descendants, or everything with --all). training: looks like a training process
    # (python, a launcher, or on a GPU) whether watched or not. Unwatched processes are
    # sampled only as "what else runs where" (contention evidence).
    watched: bool = True
    training: bool = False
    kernel: bool = False  # a kernel thread (PF_KTHREAD): never movable
    # The whole process's CPU time (utime + stime of /proc/PID/stat, by the clock tick,
    # exited threads included), in nanoseconds.
    cpu_ns: int | None = None
    # False when the sampler did not read the threads this tick and carried them from an
    # earlier one (an unwatched process that used too little CPU to hold a busy thread):
    # their counters are from then, so no per-thread rate spans this interval.
    threads_read: bool = True
    # What the loop probe (``affmon.collect.loop``) saw of its training loop's thread over
    # the interval this sample closes; None where it was not probed (not a rank nor a
    # ``--pid`` process, the first sample of a run, a recording made without it).
    loop: LoopWindow | None = None
    # Where its pages are, per NUMA node (``/proc/PID/numa_maps``): read for watched
    # training processes every few seconds, carried in between; None where not read.
    memory: NodeMemory | None = None
    # What placed it (Slurm, Kubernetes, torchrun): read once per process, for watched ones.
    context: Context | None = None

    @property
    def key(self) -> tuple[int, int]:
        """Identity across samples: a reused PID has another start time."""
        return (self.pid, self.start_ticks)

    @property
    def main_thread(self) -> ThreadSample | None:
        return next((t for t in self.threads if t.tid == self.pid), None)


@dataclass(frozen=True, slots=True)
class PcieLink:
    gen: int | None
    width: int | None
    max_gen: int | None
    max_width: int | None


@dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    used_memory_bytes: int | None


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU as NVML reported it in one tick. ``lost`` means NVML said GPU_IS_LOST."""

    index: int
    name: str | None
    pci_bus_id: str | None  # sysfs spelling, 0000:3b:00.0
    uuid: str | None
    util_percent: int | None
    mem_util_percent: int | None
    mem_used_bytes: int | None
    mem_total_bytes: int | None
    # Cumulative PCIe byte counters (NVML fields 197/198), only where NVML gives them 64
    # bits wide: then deltas between ticks are exact. The H200's driver gives 32 bits,
    # which wrap every 4 GiB (eight times a second under load), so they are None there.
    pcie_tx_bytes_total: int | None
    pcie_rx_bytes_total: int | None
    # The rate measured at sample time over a short window (two reads of the counters
    # ``pcie_window_s`` apart, or nvmlDeviceGetPcieThroughput's own 20 ms window).
    pcie_tx_window_bytes_per_s: float | None
    pcie_rx_window_bytes_per_s: float | None
    pcie_link: PcieLink
    power_w: float | None
    sm_clock_mhz: int | None
    mem_clock_mhz: int | None
    processes: tuple[GpuProcess, ...]
    lost: bool = False


@dataclass(frozen=True, slots=True)
class Sample:
    """Everything read in one tick."""

    monotonic_s: float
    wall_time_s: float
    duration_s: float  # what reading it cost, wall time
    processes: tuple[ProcessSample, ...]
    gpus: tuple[GpuSample, ...]

    @property
    def thread_count(self) -> int:
        return sum(len(p.threads) for p in self.processes)
