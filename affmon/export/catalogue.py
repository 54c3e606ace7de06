"""Every metric ``affmon export`` serves: name, type, labels, help. One table, so the
families, the docs (docs/export.md) and the tests agree on what exists.

Names follow Prometheus conventions: the base unit in the name (``_seconds``,
``_bytes``, ``_ratio`` for 0..1), ``_total`` on counters, ``_info`` on series whose
value is always 1 and whose labels carry the facts.

Labels that can change while a process lives (its name: PyTorch renames its main thread
``pt_main_thread``; its GPU, its job, the NUMA nodes it ran on) are kept off the counters
and every other series and put on ``affmon_process_info`` (a thread's name on
``affmon_thread_info``): a label that changes starts a new series, and a counter split over
two series breaks ``rate()``. Join with
``* on (job, instance, pid) group_left (name, job_pid) affmon_process_info``.

Besides affmon's own, the exporter serves what every client-library exporter serves about
itself: ``process_*`` (prometheus-client's ``ProcessCollector``, read by the sampling
thread) and ``affmon_build_info``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["counter", "gauge"]

PROCESS_LABELS = ("pid",)
PROCESS_INFO_LABELS = ("pid", "name", "user", "job_pid", "training", "gpu", "gpu_numa_node")
THREAD_LABELS = ("pid", "tid")
GPU_LABELS = ("gpu", "numa_node")
GPU_INFO_LABELS = ("gpu", "numa_node", "model", "uuid", "pci_bus_id")
FINDING_LABELS = ("code", "severity", "pid", "gpu")
# OpenMetrics ``# UNIT``: the base units a name ends in (a counter's before ``_total``).
UNITS = ("seconds", "bytes", "ratio")


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str  # as queried: counters end in _total
    kind: Kind
    labels: tuple[str, ...]
    help: str
    per_thread: bool = False  # served only with --threads

    @property
    def unit(self) -> str:
        """The base unit the name ends in, for OpenMetrics' ``# UNIT``; "" for none."""
        base = self.name.removesuffix("_total") if self.kind == "counter" else self.name
        return next((u for u in UNITS if base.endswith("_" + u)), "")


def _process(name: str, kind: Kind, doc: str) -> MetricSpec:
    return MetricSpec(f"affmon_process_{name}", kind, PROCESS_LABELS, doc)


def _thread(name: str, kind: Kind, doc: str) -> MetricSpec:
    return MetricSpec(f"affmon_thread_{name}", kind, THREAD_LABELS, doc, per_thread=True)


def _gpu(name: str, kind: Kind, doc: str) -> MetricSpec:
    return MetricSpec(f"affmon_gpu_{name}", kind, GPU_LABELS, doc)


def _exporter(name: str, kind: Kind, doc: str) -> MetricSpec:
    return MetricSpec(f"affmon_export_{name}", kind, (), doc)


_INTEGRATED = " Summed over the process's threads, integrated tick by tick so it never falls when a thread exits."

PROCESS_CPU = _process("cpu_seconds_total", "counter", "CPU time of the process's threads." + _INTEGRATED)
PROCESS_WAIT = _process(
    "run_queue_wait_seconds_total",
    "counter",
    "Time the process's threads were runnable but waited on a run queue (schedstat)." + _INTEGRATED,
)
PROCESS_VOLUNTARY = _process("voluntary_switches_total", "counter", "Voluntary context switches." + _INTEGRATED)
PROCESS_INVOLUNTARY = _process(
    "involuntary_switches_total", "counter", "Involuntary context switches (preemptions)." + _INTEGRATED
)
PROCESS_MIGRATIONS = _process(
    "migrations_total", "counter", "Moves of the process's threads between CPUs (se.nr_migrations)." + _INTEGRATED
)
PROCESS_WAIT_RATIO = _process(
    "wait_ratio",
    "gauge",
    "Run-queue wait / (run + run-queue wait) over the last sampling interval; absent when the process "
    "neither ran nor waited. Over a longer window use the two counters.",
)
PROCESS_THREADS = _process("threads", "gauge", "Threads of the process.")
PROCESS_MASK_CPUS = _process("mask_cpus", "gauge", "CPUs in the main thread's affinity mask.")
PROCESS_NODES_RUN_ON = _process(
    "numa_nodes_run_on", "gauge", "NUMA nodes the process's threads ran on in the last sampling interval."
)
PROCESS_INFO = MetricSpec(
    "affmon_process_info",
    "gauge",
    PROCESS_INFO_LABELS,
    "Always 1. Facts about a watched process that may change while it lives: its name (comm), its user, "
    "the pid of the job it belongs to, whether that job is a training job (true: on a GPU or launched as "
    "training, as affmon diagnose counts them; false), its GPUs and their NUMA nodes (comma-separated; "
    "empty when none).",
)

PROCESS_CONTEXT_INFO = MetricSpec(
    "affmon_process_context_info",
    "gauge",
    ("pid", "scheduler", "slurm_job", "pod_uid", "local_rank", "numa_binding"),
    "Always 1, for a watched process something placed: the scheduler (slurm, kubernetes), the Slurm job id "
    "(job.step), the Kubernetes pod UID, its local rank (LOCAL_RANK, else SLURM_LOCALID) and torchrun's "
    "--numa-binding mode; empty where unknown, no series where all are. One series per process; every "
    "value is at most 64 characters.",
)
PROCESS_MEMORY = MetricSpec(
    "affmon_process_memory_bytes",
    "gauge",
    ("pid", "numa_node"),
    "Resident bytes of a watched training process on each NUMA node (/proc/PID/numa_maps, re-read every few seconds).",
)
LOOP_SHARE = MetricSpec(
    "affmon_loop_share_ratio",
    "gauge",
    ("pid", "share"),
    "Share of the last interval the training loop's thread spent on_cpu, cpu_wait, data_wait, gpu_wait or "
    "other (docs/loop.md); the five sum to 1. Only for processes whose loop is probed.",
)
LOOP_GPU_BUSY = MetricSpec(
    "affmon_loop_gpu_busy_ratio",
    "gauge",
    ("pid",),
    "Mean NVML utilisation of the process's GPUs over the same interval as affmon_loop_share_ratio, 0 to 1.",
)

THREAD_CPU = _thread("cpu_seconds_total", "counter", "CPU time of the thread.")
THREAD_WAIT = _thread("run_queue_wait_seconds_total", "counter", "Run-queue wait of the thread.")
THREAD_VOLUNTARY = _thread("voluntary_switches_total", "counter", "Voluntary context switches of the thread.")
THREAD_INVOLUNTARY = _thread("involuntary_switches_total", "counter", "Involuntary context switches of the thread.")
THREAD_MIGRATIONS = _thread("migrations_total", "counter", "CPU migrations of the thread.")
THREAD_WAIT_RATIO = _thread("wait_ratio", "gauge", "Run-queue wait ratio of the thread over the last interval.")
THREAD_LAST_CPU = _thread("last_cpu", "gauge", "The CPU the thread last ran on (psr).")
THREAD_NUMA_NODE = _thread("numa_node", "gauge", "The NUMA node of the CPU the thread last ran on.")
THREAD_MASK_CPUS = _thread("mask_cpus", "gauge", "CPUs in the thread's affinity mask.")
THREAD_INFO = MetricSpec(
    "affmon_thread_info",
    "gauge",
    ("pid", "tid", "thread"),
    "Always 1. The thread's name (comm), which may change while it lives.",
    per_thread=True,
)

FINDING = MetricSpec(
    "affmon_finding_info",
    "gauge",
    FINDING_LABELS,
    "Always 1, one series per active finding, debounced like affmon diagnose (raised after 2 intervals, "
    "cleared after 3 clean ones). pid: the job's root process (empty for a GPU no watched job uses; its "
    "name is on affmon_process_info); gpu: the GPU the finding is about (empty when none). "
    "docs/findings.md lists the codes.",
)

GPU_INFO = MetricSpec(
    "affmon_gpu_info", "gauge", GPU_INFO_LABELS, "Always 1. A GPU's model, UUID and PCI address, by NVML index."
)
GPU_UTILIZATION = _gpu(
    "utilization_ratio",
    "gauge",
    "Share of the sampling interval a kernel ran (0..1): the mean of NVML's utilisation samples.",
)
GPU_MEMORY_USED = _gpu("memory_used_bytes", "gauge", "GPU memory in use.")
GPU_MEMORY_TOTAL = _gpu("memory_total_bytes", "gauge", "GPU memory in all.")
_PCIE = (
    " A counter integrated from each sampling interval's rate: exact deltas of NVML's counters where they are "
    "64 bits wide; where they are 32 bits (H200, driver 580) they wrap several times a second, so each "
    "interval's rate is a 20 ms window measured at the tick, and the counter is an estimate."
)
GPU_PCIE_RX = _gpu("pcie_rx_bytes_total", "counter", "Bytes the GPU received over PCIe." + _PCIE)
GPU_PCIE_TX = _gpu("pcie_tx_bytes_total", "counter", "Bytes the GPU sent over PCIe." + _PCIE)
GPU_LINK_GEN = _gpu("pcie_link_generation", "gauge", "Current PCIe link generation (idle GPUs drop it).")
GPU_LINK_MAX_GEN = _gpu("pcie_link_max_generation", "gauge", "Highest PCIe link generation of the GPU and its slot.")
GPU_LINK_WIDTH = _gpu("pcie_link_width_lanes", "gauge", "Current PCIe link width.")
GPU_LINK_MAX_WIDTH = _gpu("pcie_link_max_width_lanes", "gauge", "Widest PCIe link the GPU supports.")

EXPORT_SAMPLES = _exporter("samples_total", "counter", "Samples taken.")
EXPORT_ERRORS = _exporter("sample_errors_total", "counter", "Samples that failed (the last good state is served).")
EXPORT_LAST = _exporter(
    "last_sample_timestamp_seconds", "gauge", "Unix time of the latest sample; if it stops moving, sampling is stuck."
)
EXPORT_DURATION = _exporter("sample_duration_seconds", "gauge", "What the latest sample cost, wall time.")
EXPORT_CPU = _exporter("cpu_seconds_total", "counter", "CPU time of the exporter itself.")
EXPORT_NVML = _exporter("nvml_available", "gauge", "1 when NVML answered at start, 0 when running CPU-only.")
EXPORT_THREADS_LEFT_OUT = MetricSpec(
    "affmon_export_threads_left_out",
    "gauge",
    (),
    "Threads of watched processes given no per-thread series in this scrape: past --max-threads, the least "
    "busy (CPU time plus run-queue wait over the last interval) are left out.",
    per_thread=True,
)
EXPORT_REPLAY_ENDED = _exporter(
    "replay_ended",
    "gauge",
    "Only when serving a recording (--replay, --demo): 1 once a replay played once (--once) has played its "
    "last sample, and the state it left is served unchanged; 0 while it plays.",
)
EXPORT_REPLAY_RESTARTS = _exporter(
    "replay_restarts_total",
    "counter",
    "Only when serving a recording (--replay, --demo): times it was started again from its start "
    "(it loops unless --once).",
)

BUILD_INFO = MetricSpec(
    "affmon_build_info", "gauge", ("version", "python_version"), "Always 1. The affmon and Python versions serving."
)


def _self(name: str, kind: Kind, doc: str) -> MetricSpec:
    return MetricSpec(name, kind, (), doc + " (prometheus-client's ProcessCollector, read at each sample.)")


SELF_CPU = _self("process_cpu_seconds_total", "counter", "User and system CPU time of the exporter.")
SELF_RESIDENT = _self("process_resident_memory_bytes", "gauge", "Resident memory of the exporter.")
SELF_VIRTUAL = _self("process_virtual_memory_bytes", "gauge", "Virtual memory of the exporter.")
SELF_START = _self("process_start_time_seconds", "gauge", "Start time of the exporter, Unix time.")
SELF_OPEN_FDS = _self("process_open_fds", "gauge", "Descriptors the exporter holds open.")
SELF_MAX_FDS = _self("process_max_fds", "gauge", "The exporter's soft limit on open descriptors.")
SELF = (SELF_CPU, SELF_RESIDENT, SELF_VIRTUAL, SELF_START, SELF_OPEN_FDS, SELF_MAX_FDS)

CATALOGUE: tuple[MetricSpec, ...] = (
    PROCESS_CPU,
    PROCESS_WAIT,
    PROCESS_VOLUNTARY,
    PROCESS_INVOLUNTARY,
    PROCESS_MIGRATIONS,
    PROCESS_WAIT_RATIO,
    PROCESS_THREADS,
    PROCESS_MASK_CPUS,
    PROCESS_NODES_RUN_ON,
    PROCESS_INFO,
    PROCESS_CONTEXT_INFO,
    PROCESS_MEMORY,
    LOOP_SHARE,
    LOOP_GPU_BUSY,
    THREAD_CPU,
    THREAD_WAIT,
    THREAD_VOLUNTARY,
    THREAD_INVOLUNTARY,
    THREAD_MIGRATIONS,
    THREAD_WAIT_RATIO,
    THREAD_LAST_CPU,
    THREAD_NUMA_NODE,
    THREAD_MASK_CPUS,
    THREAD_INFO,
    FINDING,
    GPU_INFO,
    GPU_UTILIZATION,
    GPU_MEMORY_USED,
    GPU_MEMORY_TOTAL,
    GPU_PCIE_RX,
    GPU_PCIE_TX,
    GPU_LINK_GEN,
    GPU_LINK_MAX_GEN,
    GPU_LINK_WIDTH,
    GPU_LINK_MAX_WIDTH,
    EXPORT_SAMPLES,
    EXPORT_ERRORS,
    EXPORT_LAST,
    EXPORT_DURATION,
    EXPORT_CPU,
    EXPORT_NVML,
    EXPORT_THREADS_LEFT_OUT,
    EXPORT_REPLAY_ENDED,
    EXPORT_REPLAY_RESTARTS,
    BUILD_INFO,
    *SELF,
)
