"""What each pane of the TUI shows, as immutable values built from one snapshot.

``build_view`` turns a ``Snapshot`` (plus the debounced findings and the history the
``Monitor`` keeps) into a ``View``: header fields, one row per GPU, one row per process,
one cell per CPU. Widgets render these and nothing else, so everything a person sees can
be tested here without a terminal. Thread rows and the selected process's detail are
built on demand (``thread_rows``) from the snapshot the view carries, since a machine
can have thousands of threads and only a few are on screen.

Rows are display text: every foreign string in them (process and thread names, command
lines, users, thread states, GPU names and bus ids) has passed through ``term_safe``, so
no widget can send a name's escape sequence to the terminal. The raw values stay in the
snapshot the view carries (JSON and the rules use those).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from affmon.core.model.cpuset import EMPTY, CpuSet
from affmon.core.model.jobs import Job, demand, find_jobs
from affmon.core.model.rates import GpuRates, ProcessRates, Snapshot, ThreadRates
from affmon.core.rules.base import DEFAULT_THRESHOLDS, Finding, Severity, Thresholds
from affmon.core.rules.loop_report import LoopReport
from affmon.core.text import term_safe


@dataclass(frozen=True, slots=True)
class HeaderView:
    host: str
    cpus: int
    cores: int
    numa_nodes: int
    gpus: int
    interval_s: float
    nvml_status: str | None
    source: str  # "live" or "replay hogs.jsonl.gz"
    live: bool
    position: str | None  # "sample 3/5" in a replay, None live
    finished: bool  # a replay that has no more samples
    wall_time_s: float  # when the newest sample was taken
    threads: int  # threads sampled in the last tick
    processes: int  # processes sampled in the last tick
    watched: int  # processes watched (training, --pid, or all)
    sample_cost_s: float  # what the last sample cost to read
    notice: str | None = None  # what the views cannot see (hidepid), shown in the header
    lagging_interval_s: float | None = None  # the interval really kept, when well behind the one asked


@dataclass(frozen=True, slots=True)
class GpuRow:
    index: int
    name: str | None
    pci_bus_id: str | None
    lost: bool
    util_percent: int | None
    mem_used_bytes: int | None
    mem_total_bytes: int | None
    pcie_rx_bytes_per_s: float | None
    pcie_tx_bytes_per_s: float | None
    link_gen: int | None
    link_width: int | None
    max_gen: int | None
    max_width: int | None
    numa_node: int | None
    local_cpus: CpuSet | None
    pids: tuple[int, ...]

    @property
    def gen_below_max(self) -> bool:
        return self.link_gen is not None and self.max_gen is not None and self.link_gen < self.max_gen

    @property
    def width_below_max(self) -> bool:
        return self.link_width is not None and self.max_width is not None and self.link_width < self.max_width


@dataclass(frozen=True, slots=True)
class FindingMark:
    """A finding as a process row shows it: its code and severity. ``inherited``: the
    finding is about the job this process belongs to (raised on the job's root) and names
    some of this process's threads."""

    code: str
    severity: Severity
    inherited: bool = False


@dataclass(frozen=True, slots=True)
class ProcessRow:
    pid: int
    ppid: int | None
    name: str
    cmdline: str | None
    user: str | None
    role: str  # "rank" (job root), "worker" (in a job), "launcher" (parent of ranks), "process"
    job_pid: int | None  # root of the job it belongs to
    gpus: tuple[int, ...]
    threads: int
    cpu_percent: float | None
    ran_on_cpus: CpuSet
    ran_on_nodes: tuple[int, ...]
    mask: CpuSet | None  # the main thread's (or first thread's) affinity
    mask_varies: bool  # some threads have another mask
    wait_ratio: float | None
    switches_per_s: float | None  # voluntary + involuntary
    migrations_per_s: float | None
    findings: tuple[FindingMark, ...]
    watched: bool
    training: bool

    @property
    def worst(self) -> Severity | None:
        """The worst finding raised on this process itself (not inherited from its job)."""
        return max((f.severity for f in self.findings if not f.inherited), default=None)


@dataclass(frozen=True, slots=True)
class ThreadRow:
    pid: int
    tid: int
    name: str
    state: str
    psr: int | None
    mask: CpuSet | None
    cpu_percent: float | None
    wait_ratio: float | None
    switches_per_s: float | None
    migrations_per_s: float | None
    busy: bool = False  # wanted a CPU for busy_demand of the interval: the threads the rules judge


@dataclass(frozen=True, slots=True)
class CoreCell:
    """One CPU in the last interval. ``job_pid``: the watched job whose threads used it
    most (None: none ran there); ``job_pids``: every job that ran there; ``other_percent``:
    CPU use there by other processes (unwatched, or watched but in no job)."""

    cpu: int
    busy_percent: float  # all sampled threads whose psr is this CPU, capped at 100
    job_pid: int | None
    job_pids: tuple[int, ...]
    job_percent: float
    other_percent: float
    pids: tuple[int, ...]  # watched processes that ran there
    allowed: bool  # in the machine's allowed set (cgroup cpuset of affmon)
    gpu_local: tuple[int, ...]  # GPU indices whose local CPUs include it
    # Two jobs, or a job and another process busy there (the rules' ``other_busy_percent``,
    # as CONTENDED judges it), ran here in one interval.
    contended: bool = False


@dataclass(frozen=True, slots=True)
class CoreGroup:
    """The CPUs of one NUMA node that share one highest-level cache."""

    numa_node: int | None
    cache_level: int | None
    cells: tuple[CoreCell, ...]


@dataclass(frozen=True, slots=True)
class Series:
    """A bounded history: ``t_s`` is seconds relative to the newest point (<= 0)."""

    t_s: tuple[float, ...]
    values: tuple[float | None, ...]


@dataclass(frozen=True, slots=True)
class GpuHistory:
    util_percent: Series
    pcie_rx_bytes_per_s: Series
    pcie_tx_bytes_per_s: Series


@dataclass(frozen=True, slots=True)
class ProcessHistory:
    wait_ratio: Series
    cpu_percent: Series


@dataclass(frozen=True)
class View:
    """Everything on screen after one tick. Immutable: built by the sampler thread and
    handed to the UI, which never changes it."""

    tick: int
    header: HeaderView
    gpus: tuple[GpuRow, ...]
    processes: tuple[ProcessRow, ...]  # every non-kernel process sampled, in PID order
    findings: tuple[Finding, ...]  # debounced, worst first
    jobs: tuple[int, ...]  # job root PIDs
    cores: tuple[CoreGroup, ...]
    gpu_history: Mapping[int, GpuHistory]
    process_history: Mapping[int, ProcessHistory]
    snapshot: Snapshot
    measured: bool = True  # False: one sample only (``Monitor.first_look``), every rate unknown
    # The jobs that are training jobs (``Job.training``, the one definition ``diagnose``,
    # the planner and the exporter use); the other roots are watched processes.
    training_jobs: frozenset[int] = frozenset()
    thresholds: Thresholds = DEFAULT_THRESHOLDS  # the rules' (the core map and the busy threads agree with them)

    def process(self, pid: int) -> ProcessRow | None:
        return next((p for p in self.processes if p.pid == pid), None)

    def findings_of(self, pid: int) -> tuple[Finding, ...]:
        """The findings about this process: its job's (on the job root) and those naming
        any of its threads (on a worker)."""
        row = self.process(pid)
        if row is None:
            return ()
        rates = self.snapshot.process(pid)
        tids = {t.sample.tid for t in rates.threads} if rates else set()
        return tuple(f for f in self.findings if f.pid == pid or (tids & set(f.tids)))


# -- builders -------------------------------------------------------------------------


def _mask(p: ProcessRates) -> tuple[CpuSet | None, bool]:
    main = p.sample.main_thread or (p.sample.threads[0] if p.sample.threads else None)
    mask = main.allowed_cpus if main else None
    varies = any(t.allowed_cpus is not None and t.allowed_cpus != mask for t in p.sample.threads)
    return mask, varies


def _safe(text: str | None) -> str | None:
    return None if text is None else term_safe(text)


def _add(a: float | None, b: float | None) -> float | None:
    if a is None and b is None:
        return None
    return (a or 0.0) + (b or 0.0)


def _roles(snapshot: Snapshot, jobs: Sequence[Job]) -> tuple[dict[int, str], dict[int, int]]:
    role: dict[int, str] = {}
    job_of: dict[int, int] = {}
    for job in jobs:
        for m in job.members:
            if m is not job.root:
                role[m.sample.pid] = "worker"
            else:  # a watched process that is not training (a monitor, a script) is no rank
                role[m.sample.pid] = "rank" if job.training else "process"
            job_of[m.sample.pid] = job.pid
    for job in jobs:  # a watched parent of ranks (torchrun) is their launcher
        if not job.training:
            continue
        ppid = job.root.sample.ppid
        if ppid is not None and ppid not in role:
            parent = snapshot.process(ppid)
            if parent is not None and parent.sample.watched:
                role[ppid] = "launcher"
    return role, job_of


# A loop report's verdict as the LOOP column says it: what the training loop spent the
# interval waiting on (core/rules/loop.verdict).
LOOP_WORDS = {
    "input_bound": "data",  # waiting for DataLoader batches
    "gpu_bound": "GPU",  # waiting for the GPU: the healthy case
    "loop_bound": "CPU",  # the Python loop itself, on a CPU
    "cpu_starved": "cpu-wait",  # runnable, waiting for a CPU
    "mixed": "mixed",  # no single state dominates
}


def shown_role(row: ProcessRow) -> str | None:
    """The role written after a process's name: a launcher's, or a rank's that holds a GPU."""
    return row.role if row.role == "launcher" or (row.role == "rank" and row.gpus) else None


def loop_word(report: LoopReport | None) -> str | None:
    """The LOOP column's word: None when the loop was not probed, "-" when it was but the
    interval gave no verdict (its thread's schedstat could not be read)."""
    if report is None:
        return None
    if report.verdict is None:
        return "-"
    return LOOP_WORDS.get(report.verdict, term_safe(report.verdict))


def process_rows(snapshot: Snapshot, jobs: Sequence[Job], findings: Sequence[Finding]) -> tuple[ProcessRow, ...]:
    role, job_of = _roles(snapshot, jobs)
    marks_by_pid: dict[int, list[FindingMark]] = {}
    tid_owner = {t.sample.tid: p.sample.pid for p in snapshot.processes if p.sample.watched for t in p.threads}
    for f in findings:
        owners = {tid_owner[t] for t in f.tids if t in tid_owner} - {f.pid}
        for pid, inherited in [*((o, True) for o in sorted(owners)), *(((f.pid, False),) if f.pid is not None else ())]:
            marks = marks_by_pid.setdefault(pid, [])
            if all(m.code != f.code for m in marks):
                marks.append(FindingMark(f.code, f.severity, inherited))
    rows = []
    for p in snapshot.processes:
        s = p.sample
        if s.kernel:
            continue
        mask, varies = _mask(p)
        marks = sorted(marks_by_pid.get(s.pid, []), key=lambda m: (-m.severity, m.code))
        rows.append(
            ProcessRow(
                pid=s.pid,
                ppid=s.ppid,
                name=term_safe(s.name),
                cmdline=_safe(s.cmdline),
                user=_safe(s.user),
                role=role.get(s.pid, "process"),
                job_pid=job_of.get(s.pid),
                gpus=s.gpu_indices,
                threads=len(s.threads),
                cpu_percent=p.cpu_percent,
                ran_on_cpus=p.ran_on_cpus,
                ran_on_nodes=p.ran_on_numa_nodes,
                mask=mask,
                mask_varies=varies,
                wait_ratio=p.wait_ratio,
                switches_per_s=_add(p.voluntary_switches_per_s, p.involuntary_switches_per_s),
                migrations_per_s=p.migrations_per_s,
                findings=tuple(marks),
                watched=s.watched,
                training=s.training,
            )
        )
    return tuple(rows)


def thread_row(pid: int, t: ThreadRates, seconds: float, t_busy: float = DEFAULT_THRESHOLDS.busy_demand) -> ThreadRow:
    s = t.sample
    return ThreadRow(
        pid=pid,
        tid=s.tid,
        name=term_safe(s.name),
        state=term_safe(s.state),
        psr=s.psr,
        mask=s.allowed_cpus,
        cpu_percent=t.cpu_percent,
        wait_ratio=t.wait_ratio,
        switches_per_s=_add(t.voluntary_switches_per_s, t.involuntary_switches_per_s),
        migrations_per_s=t.migrations_per_s,
        busy=demand(t, seconds) >= t_busy,
    )


def shown_cpu(value: float | None) -> float:
    """A CPU share as the tables show it (``fmt.cpu_percent``: one decimal below 100, none
    above), to sort by; unknown sorts below 0."""
    if value is None:
        return -1.0
    return round(value, 1) if value < 99.95 else float(round(value))


def shown_wait(value: float | None) -> float:
    """A wait ratio as the tables show it (``fmt.ratio_percent``: a whole percent), to sort by."""
    return -1.0 if value is None else float(round(value * 100))


def thread_rows(snapshot: Snapshot, pid: int, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> tuple[ThreadRow, ...]:
    """The threads of one process, busiest first as their CPU% reads (threads whose figures
    read the same in TID order, so that a pool of threads that each woke for microseconds
    keeps its order instead of being shuffled every tick); unknown CPU use last."""
    p = snapshot.process(pid)
    if p is None:
        return ()
    rows = [thread_row(pid, t, snapshot.interval_s, thresholds.busy_demand) for t in p.threads]
    return tuple(sorted(rows, key=lambda r: (-shown_cpu(r.cpu_percent), r.tid)))


def gpu_row(g: GpuRates) -> GpuRow:
    s = g.sample
    link = s.pcie_link
    return GpuRow(
        index=s.index,
        name=_safe(s.name),
        pci_bus_id=_safe(s.pci_bus_id),
        lost=s.lost,
        util_percent=s.util_percent,
        mem_used_bytes=s.mem_used_bytes,
        mem_total_bytes=s.mem_total_bytes,
        pcie_rx_bytes_per_s=g.pcie_rx_bytes_per_s,
        pcie_tx_bytes_per_s=g.pcie_tx_bytes_per_s,
        link_gen=link.gen,
        link_width=link.width,
        max_gen=link.max_gen,
        max_width=link.max_width,
        numa_node=g.numa_node,
        local_cpus=g.local_cpus,
        pids=tuple(p.pid for p in s.processes),
    )


def core_groups(
    snapshot: Snapshot, jobs: Sequence[Job], thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> tuple[CoreGroup, ...]:
    """Every online CPU, grouped by NUMA node, then by highest shared cache, with who ran
    there in the last interval. "Ran there" is the thread's last CPU (psr): a lower bound,
    like ``ran_on_cpus``."""
    topo = snapshot.topology
    job_of = {m.sample.pid: job.pid for job in jobs for m in job.members}
    job_use: dict[int, dict[int, float]] = {}  # cpu -> job pid -> percent
    other: dict[int, float] = {}
    busy: dict[int, float] = {}
    pids: dict[int, set[int]] = {}
    for p in snapshot.processes:
        if not p.rated:
            continue
        owner = job_of.get(p.sample.pid)
        for t in p.threads:
            cpu = t.sample.psr
            if cpu is None or not t.ran or t.cpu_percent is None:
                continue
            busy[cpu] = busy.get(cpu, 0.0) + t.cpu_percent
            if p.sample.watched:
                pids.setdefault(cpu, set()).add(p.sample.pid)
            if owner is not None:
                use = job_use.setdefault(cpu, {})
                use[owner] = use.get(owner, 0.0) + t.cpu_percent
            else:  # unwatched, or a watched process outside every job: another tenant
                other[cpu] = other.get(cpu, 0.0) + t.cpu_percent
    gpu_local: dict[int, list[int]] = {}
    for g in snapshot.gpus:
        for cpu in g.local_cpus or EMPTY:
            gpu_local.setdefault(cpu, []).append(g.sample.index)

    def cell(cpu: int) -> CoreCell:
        use = job_use.get(cpu, {})
        top = max(use.items(), key=lambda kv: (kv[1], -kv[0]), default=None)
        others = other.get(cpu, 0.0)
        return CoreCell(
            cpu=cpu,
            busy_percent=min(100.0, busy.get(cpu, 0.0)),
            job_pid=top[0] if top else None,
            job_pids=tuple(sorted(use)),
            job_percent=top[1] if top else 0.0,
            other_percent=others,
            pids=tuple(sorted(pids.get(cpu, ()))),
            allowed=cpu in topo.allowed_cpus,
            gpu_local=tuple(sorted(gpu_local.get(cpu, ()))),
            contended=len(use) > 1 or (bool(use) and others >= thresholds.other_busy_percent),
        )

    groups = []
    placed: set[int] = set()
    caches = topo.l3_groups or ()
    for node in topo.cpu_numa_nodes:
        online = node.cpus & topo.online_cpus
        parts: list[tuple[int | None, CpuSet]] = [(g.level, g.cpus & online) for g in caches if g.cpus & online]
        covered = frozenset().union(*(c for _, c in parts)) if parts else EMPTY
        if online - covered:
            parts.append((None, online - covered))
        for level, group_cpus in parts:
            ids = sorted(group_cpus - placed)
            if ids:
                placed.update(ids)
                groups.append(CoreGroup(node.id, level, tuple(cell(c) for c in ids)))
    rest = sorted(topo.online_cpus - placed)
    if rest:  # no NUMA information at all
        groups.append(CoreGroup(None, None, tuple(cell(c) for c in rest)))
    return tuple(groups)


__all__ = [
    "CoreCell",
    "CoreGroup",
    "FindingMark",
    "GpuHistory",
    "GpuRow",
    "HeaderView",
    "ProcessHistory",
    "ProcessRow",
    "Series",
    "ThreadRow",
    "View",
    "core_groups",
    "find_jobs",
    "gpu_row",
    "loop_word",
    "process_rows",
    "thread_rows",
]
