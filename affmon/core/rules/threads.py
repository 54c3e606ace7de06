"""When a job's own threads are the cause, and no core set is the cure. Pure.

* ``OVERSUBSCRIBED``: the job's busy threads want more CPUs than it can have at all (every
  CPU its cgroup cpuset allows, or the machine's), and queue for them. A wider mask cannot
  help and a narrower one makes it worse; the cure is fewer threads: a thread budget per
  process (``thread_budget``), named with the numbers. Measured on the H200: DataLoader
  workers and the main process each running large intra-op pools (about 100 busy threads on
  16 CPUs) waited 83% of their busy time with ~4,000 involuntary switches/s and trained at
  about nothing; one intra-op thread per worker brought it back to clean, no mask did.
* ``GIL_BOUND``: threads of a python process take turns on the GIL (``turn_groups``):
  eight pure-Python threads spinning use about one CPU together, however many CPUs they
  may have, and queue for a CPU only as the lock changes hands. They are left out of the
  busy threads every other rule judges and of the job's need: more CPUs cannot help them.
* ``CONFINED_THREAD``: a thread of the job (the main loop, the pin-memory thread) may run
  on fewer CPUs than the rest of its job and waits for one there, while its job's other
  threads do not have to. The job's overall wait can look moderate (the H200's confined
  loop waited 10-13% of its time, its switches 12-20 times clean), yet the loop is the one
  thread every step waits for. The cure is the job's CPUs for those threads
  (``advice.restore_confined``), which a pin of the whole job to the job's CPUs does while
  leaving every other thread as it is.

A job's *CPUs* here are the union of its threads' masks: a thread narrower than that union
is confined; a job whose every thread has the same narrow mask is not (that is
``MASK_TOO_NARROW``, which fires only where a wider mask is possible).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from affmon.core.model.cpuset import CpuSet, format_cpulist
from affmon.core.model.domains import plural
from affmon.core.model.jobs import Job, demand, wait_ratio
from affmon.core.model.rates import ProcessRates, Snapshot, ThreadRates
from affmon.core.model.topology import Topology
from affmon.core.rules.base import (
    Finding,
    RuleInputs,
    Severity,
    Thresholds,
    busy_threads,
    rounded,
    tids_of,
    turn_groups,
)
from affmon.core.text import term_safe

MAIN_LOOP = "main loop"
WORKER = "DataLoader worker"
HELPER = "thread of the main process"  # pin-memory, autograd, intra-op, CUDA's own


def pool_of(job: Job, topology: Topology) -> CpuSet:
    """The CPUs the job can have at all: its main process's cgroup cpuset, else the CPUs
    the machine allows, online ones only."""
    root = job.root.sample
    return (root.cgroup_cpus or topology.allowed_cpus) & topology.online_cpus


def job_cpus(job: Job, topology: Topology) -> CpuSet:
    """The union of the masks of the job's threads (online ones): the CPUs the job runs on."""
    # The distinct masks first (a process's threads share one mask object, or equal ones):
    # a union per thread of 65,536-CPU masks was most of a replay's time.
    masks = {th.sample.allowed_cpus for _, th in job.threads() if th.sample.allowed_cpus}
    return frozenset().union(*masks) & topology.online_cpus


# Threads PyTorch names itself (``c10::setThreadName``), by their name's start.
TORCH_THREADS = (("pt_data_pin", "pin-memory thread"), ("pt_autograd", "autograd thread"))


def role(job: Job, process: ProcessRates, thread: ThreadRates) -> str:
    if process is not job.root:
        return WORKER
    if thread.sample.tid == job.pid:
        return MAIN_LOOP
    return next((named for start, named in TORCH_THREADS if thread.sample.name.startswith(start)), HELPER)


# -- too many threads ---------------------------------------------------------------


@dataclass(frozen=True)
class ThreadBudget:
    """How many busy threads each process of a job can run on ``cpus`` CPUs without queueing:
    one per DataLoader worker (what DataLoader itself sets for torch in a worker, and what
    OpenMP, OpenCV or NumPy pools inside a worker must be held to), the rest for the main
    process's intra-op pool; and at most ``cpus - 1`` workers, so the loop keeps a CPU."""

    cpus: int
    workers: int  # the DataLoader workers to keep (at most cpus - 1)
    worker_threads: int  # busy threads per worker
    main_threads: int  # the main process's intra-op threads (torch.set_num_threads)


def thread_budget(cpus: int, workers: int) -> ThreadBudget:
    kept = min(workers, max(0, cpus - 1))
    return ThreadBudget(cpus, kept, 1, max(1, cpus - kept))


def _pools(threads: Sequence[ThreadRates]) -> list[dict[str, Any]]:
    """A process's busy threads grouped by name, largest group first: an OpenMP or intra-op
    pool shows as many threads of one name (the name of the thread that made them)."""
    names: dict[str, int] = {}
    for th in threads:
        names[th.sample.name] = names.get(th.sample.name, 0) + 1
    return [{"name": n, "busy_threads": c} for n, c in sorted(names.items(), key=lambda nc: (-nc[1], nc[0]))]


def _remedy(job: Job, busy_by_pid: dict[int, int], budget: ThreadBudget) -> str:
    """The thread budget in words, naming only the processes that run more than it."""
    parts = []
    workers = [m for m in job.members if m is not job.root and busy_by_pid.get(m.sample.pid)]
    main_busy = busy_by_pid.get(job.pid, 0)
    if len(workers) > budget.workers:
        parts.append(
            f"at most {plural(budget.workers, 'DataLoader worker')} on {plural(budget.cpus, 'CPU')} "
            "(DataLoader(num_workers="
            f"{budget.workers}); it has {len(workers)})"
        )
    over = [w for w in workers if busy_by_pid.get(w.sample.pid, 0) > budget.worker_threads]
    if over:
        most = max(busy_by_pid[w.sample.pid] for w in over)
        parts.append(
            f"one thread in each DataLoader worker (torch.set_num_threads(1), and OMP_NUM_THREADS=1 or "
            f"cv2.setNumThreads(1) for the pools of the libraries it calls, in its worker_init_fn; "
            f"{len(over)} of them run up to {most} busy threads each)"
        )
    if main_busy > budget.main_threads:
        parts.append(
            f"at most {plural(budget.main_threads, 'thread')} in the main process {job.pid} (torch.set_num_threads("
            f"{budget.main_threads}) or OMP_NUM_THREADS={budget.main_threads} for its intra-op pool; it runs "
            f"{plural(main_busy, 'busy thread')})"
        )
    if not parts:  # over budget only in sum: the main process's share is the one to cut
        parts.append(
            f"fewer threads in the main process {job.pid} (torch.set_num_threads({budget.main_threads}) "
            f"or OMP_NUM_THREADS={budget.main_threads})"
        )
    return (
        f"fewer threads, not other CPUs: a budget of {budget.cpus} busy threads for the job's {budget.cpus} CPUs: "
        + "; ".join(parts)
    )


def rule_oversubscribed(job: Job, snap: Snapshot, ctx: RuleInputs) -> list[Finding]:
    t = ctx.thresholds
    pool = pool_of(job, ctx.topology)
    if not pool:
        return []
    busy = busy_threads(job, snap.interval_s, t)
    wanted = sum(demand(th, snap.interval_s) for _, th in busy)
    ratio = wait_ratio(th for _, th in busy) or 0.0
    if len(busy) <= len(pool) or wanted <= len(pool) * t.narrow_factor + t.narrow_margin_cpus:
        return []
    if ratio < t.starved_warn:
        return []
    busy_by_pid: dict[int, int] = {}
    by_process: dict[int, list[ThreadRates]] = {}
    for p, th in busy:
        busy_by_pid[p.sample.pid] = busy_by_pid.get(p.sample.pid, 0) + 1
        by_process.setdefault(p.sample.pid, []).append(th)
    # Workers that ran busy threads: an idle helper process of the job (multiprocessing's
    # resource tracker beside spawned workers) is no DataLoader worker to budget for.
    workers = sum(1 for m in job.members if m is not job.root and busy_by_pid.get(m.sample.pid))
    budget = thread_budget(len(pool), workers)
    switches = sum(th.involuntary_switches_per_s or 0 for _, th in busy)
    root = job.root.sample
    where = "its cgroup cpuset" if root.cgroup_cpus else "the machine"
    processes = []
    for m in job.members:
        threads = by_process.get(m.sample.pid, [])
        if threads:
            processes.append(
                {
                    "pid": m.sample.pid,
                    "role": "main process" if m is job.root else WORKER,
                    "busy_threads": len(threads),
                    "demand_cpus": rounded(sum(demand(th, snap.interval_s) for th in threads)),
                    "pools": _pools(threads)[:4],
                }
            )
    severity = Severity.BAD if wanted >= 2 * len(pool) or ratio >= t.starved_bad else Severity.WARN
    return [
        Finding(
            "OVERSUBSCRIBED",
            severity,
            job.pid,
            tids_of(busy),
            f"{plural(len(busy), 'busy thread')} want {wanted:.1f} CPUs, more than the {plural(len(pool), 'CPU')} "
            "the job can have at "
            f"all (every CPU {where} allows: {format_cpulist(pool)}), so they queue {ratio:.0%} of the time "
            f"({switches:.0f} involuntary switches/s): no core set can give them more",
            {
                "busy_threads": len(busy),
                "demand_cpus": rounded(wanted),
                "cpus_available": len(pool),
                "available_cpus": format_cpulist(pool),
                "wait_ratio": rounded(ratio, 3),
                "involuntary_switches_per_s": rounded(switches, 1),
                "processes": processes[:16],
                "budget": {
                    "cpus": budget.cpus,
                    "main_threads": budget.main_threads,
                    "worker_threads": budget.worker_threads,
                    "workers": budget.workers,
                },
            },
            remedy=_remedy(job, busy_by_pid, budget),
        )
    ]


# -- a confined loop thread ------------------------------------------------------------


@dataclass(frozen=True)
class Confined:
    process: ProcessRates
    thread: ThreadRates
    role: str
    mask: CpuSet


def confined_threads(job: Job, snap: Snapshot, t: Thresholds, topology: Topology) -> list[Confined]:
    """Busy threads of the job whose mask is narrower than the job's CPUs and that waited
    for a CPU at least ``starved_warn`` of the time they wanted one."""
    cpus = job_cpus(job, topology)
    found = []
    for p, th in busy_threads(job, snap.interval_s, t):
        mask = (th.sample.allowed_cpus or frozenset()) & topology.online_cpus
        if not mask or not mask < cpus:
            continue
        if (th.wait_ratio or 0.0) < t.starved_warn:
            continue
        found.append(Confined(p, th, role(job, p, th), mask))
    return found


def _healthy_elsewhere(job: Job, snap: Snapshot, t: Thresholds, confined: Iterable[Confined]) -> bool:
    """Whether the job's busy threads that are not confined wait less than ``starved_warn``."""
    skip = {c.thread.sample.tid for c in confined}
    rest = [th for _, th in busy_threads(job, snap.interval_s, t) if th.sample.tid not in skip]
    return (wait_ratio(rest) or 0.0) < t.starved_warn


def restores_only(job: Job, snap: Snapshot, t: Thresholds, topology: Topology) -> list[Confined]:
    """The confined threads, where giving them the job's CPUs is the whole cure: the rest
    of the job does not queue. Empty otherwise (the job needs a new core set as a whole)."""
    confined = confined_threads(job, snap, t, topology)
    return confined if confined and _healthy_elsewhere(job, snap, t, confined) else []


def rule_confined_thread(job: Job, snap: Snapshot, ctx: RuleInputs) -> list[Finding]:
    t = ctx.thresholds
    confined = confined_threads(job, snap, t, ctx.topology)
    if not confined:
        return []
    cpus = job_cpus(job, ctx.topology)
    worst = max(c.thread.wait_ratio or 0.0 for c in confined)
    described = "; ".join(
        f"thread {c.thread.sample.tid} ({c.role}, {term_safe(c.thread.sample.name)}) may run only on "
        f"CPUs {format_cpulist(c.mask)} and waited for one {c.thread.wait_ratio or 0.0:.0%} of the time"
        for c in confined[:4]
    )
    more = f" and {len(confined) - 4} more" if len(confined) > 4 else ""
    return [
        Finding(
            "CONFINED_THREAD",
            Severity.BAD if worst >= t.starved_bad else Severity.WARN,
            job.pid,
            tuple(sorted(c.thread.sample.tid for c in confined))[:16],
            f"{described}{more}, while the rest of its job runs on CPUs {format_cpulist(cpus)}",
            {
                "job_cpus": format_cpulist(cpus),
                "threads": [
                    {
                        "pid": c.process.sample.pid,
                        "tid": c.thread.sample.tid,
                        "name": c.thread.sample.name,
                        "role": c.role,
                        "mask": format_cpulist(c.mask),
                        "wait_ratio": rounded(c.thread.wait_ratio, 3),
                        "involuntary_switches_per_s": rounded(c.thread.involuntary_switches_per_s, 1),
                    }
                    for c in confined[:16]
                ],
            },
        )
    ]


# -- threads that take turns on the GIL -------------------------------------------------


def rule_gil_bound(job: Job, snap: Snapshot, ctx: RuleInputs) -> list[Finding]:
    """Threads of a python process of the job that take turns on the GIL (``turn_groups``):
    together they can use about one CPU however many they are given, and their wait is the
    lock's hand-over. The cure is work outside the GIL, not CPUs."""
    findings = []
    for g in turn_groups(job, snap.interval_s, ctx.thresholds):
        p = g.process.sample
        n = len(g.threads)
        switches = sum(th.voluntary_switches_per_s or 0.0 for th in g.threads) / n
        ratio = wait_ratio(g.threads) or 0.0
        findings.append(
            Finding(
                "GIL_BOUND",
                Severity.WARN,
                job.pid,
                tuple(sorted(th.sample.tid for th in g.threads))[:16],
                f"{n} threads of PID {p.pid} ({term_safe(p.name)}) take turns on the GIL: together they ran "
                f"{g.run_cpus:.2f} CPUs ({g.run_cpus / n:.2f} each), each blocking {switches:.0f} times/s to hand "
                f"it over; more CPUs will not help",
                {
                    "pid": p.pid,
                    "threads": n,
                    "run_cpus": rounded(g.run_cpus),
                    "demand_cpus": rounded(g.demand_cpus),
                    "wait_ratio": rounded(ratio, 3),
                    "voluntary_switches_per_s": rounded(switches, 1),
                },
                remedy=(
                    "work outside the GIL, not more CPUs: move it to processes (DataLoader workers, "
                    "multiprocessing) or to calls that release the GIL (NumPy, torch, I/O); fewer such threads "
                    "wait less"
                ),
            )
        )
    return findings
