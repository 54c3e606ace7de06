"""How many CPUs a job needs, measured over a window of intervals. Pure.

A starved thread's run + wait understates what it would use unstarved: a DataLoader
pipeline blocked on its slowest worker does not even queue for a CPU. On the H200, a
ResNet-50 job with 6 DataLoader workers beside 16 memory-bound processes had 9 busy threads
but a measured (run + wait) demand of 5-7 CPUs; pinned to 5 CPUs with the others moved off,
it ran at 0.65-0.89x a plain half/half split of the machine. So a job needs at least one CPU
per thread that was busy over the window, and its demand with headroom where that is more.

A thread *needs a CPU* when, in any interval of the window, it wanted one (run + run-queue
wait) ``busy_demand`` of the time; or when it belongs to a DataLoader worker (a member
process other than the root) and ran at least ``neighbour_floor_percent`` of the window:
a worker that ran at all is part of the pipeline, however starved. Threads are those of the
job at the window's end (a worker that exited is not counted twice beside its successor),
matched across intervals by TID and start time. The window is the intervals in which the
job was seen: one that started two intervals ago is sized over those two.

A front end that keeps a window need not keep every process of it: ``for_need`` is what
``job_need`` reads of an interval that is not the window's last, its watched processes
(a job's members are watched). A process that is not watched is sized over the last
interval alone, and says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from affmon.core.model.domains import plural
from affmon.core.model.jobs import Job, demand
from affmon.core.model.rates import Snapshot, ThreadRates
from affmon.core.plan.planner import DEMAND_HEADROOM
from affmon.core.rules.base import DEFAULT_THRESHOLDS, Thresholds, turn_groups
from affmon.core.text import term_safe


@dataclass(frozen=True, slots=True)
class ThreadNeed:
    tid: int
    name: str
    role: str  # "main loop", "DataLoader worker", or "helper thread" (pin-memory, autograd)
    demand_cpus: float  # run + wait over the window, in CPUs
    peak_demand_cpus: float  # the most of one interval


@dataclass(frozen=True, slots=True)
class JobNeed:
    """What the job needs, with how it was measured."""

    cpus: int  # CPUs to give it: one per needy thread, or demand x headroom where more
    threads: tuple[ThreadNeed, ...]  # the threads that need a CPU
    demand_cpus: float  # their measured run + wait over the window, in CPUs
    window_s: float
    intervals: int
    # Threads that take turns on the GIL, per process: (PID, threads, the CPUs they can
    # use). Each group counts as those CPUs, not a CPU per thread.
    turns: tuple[tuple[int, int, float], ...] = ()

    @property
    def sentence(self) -> str:
        """How it was sized, in one sentence."""
        roles: dict[str, int] = {}
        for th in self.threads:
            roles[th.role] = roles.get(th.role, 0) + 1
        parts = ", ".join(plural(n, role) for role, n in roles.items()) or "no thread"
        last = "the last interval" if self.intervals == 1 else f"the last {self.intervals} intervals"
        over = f"{last} ({self.window_s:.1f} s)"
        if self.cpus > len(self.threads) + sum(math.ceil(cpus - 1e-9) for _, _, cpus in self.turns):
            basis = f"its demand with a quarter more ({self.demand_cpus:.1f} x {DEMAND_HEADROOM})"
        else:
            basis = "one CPU per busy thread, since a starved thread's run + wait understates its need"
        turns = "".join(
            f" {plural(n, 'thread')} of PID {pid} take turns on the GIL: counted as the {cpus:.1f} CPU they can use."
            for pid, n, cpus in self.turns
        )
        return (
            f"Sized for {plural(self.cpus, 'CPU')}: over {over}, {plural(len(self.threads), 'thread')} needed a CPU "
            f"({parts}), wanting {self.demand_cpus:.1f} CPUs in all (run + run-queue wait); it gets {basis}.{turns}"
        )


def job_need(job: Job, window: Sequence[Snapshot], t: Thresholds = DEFAULT_THRESHOLDS) -> JobNeed:
    """The job's need over ``window`` (snapshots oldest first; the job is as of the last)."""
    if not window:
        raise ValueError("a need is measured over at least one interval")
    pids = job.pids
    series: dict[tuple[int, int], list[tuple[ThreadRates, float]]] = {}
    seen_in: list[Snapshot] = []
    for snap in window:
        found = False
        for p in snap.processes:
            if p.sample.pid in pids:
                found = True
                for th in p.threads:
                    series.setdefault((th.sample.tid, th.sample.start_ticks), []).append((th, snap.interval_s))
        if found or snap is window[-1]:
            seen_in.append(snap)
    root_main = job.root.sample.pid
    groups = turn_groups(job, window[-1].interval_s, t)
    turning = {th.sample.tid for g in groups for th in g.threads}
    needy: list[ThreadNeed] = []
    for member, th in job.threads():
        if th.sample.tid in turning:
            continue  # its group is counted as the CPUs it can use, below
        seen = series.get((th.sample.tid, th.sample.start_ticks), [(th, window[-1].interval_s)])
        known = [(x, s) for x, s in seen if x.cpu_ns_delta is not None]
        seconds = sum(s for _, s in known)
        if not seconds:
            continue
        wanted = sum(demand(x, s) * s for x, s in known) / seconds
        peak = max(demand(x, s) for x, s in known)
        ran = sum(x.cpu_ns_delta or 0 for x, _ in known) / (seconds * 1e9)
        worker = member is not job.root
        if peak < t.busy_demand and not (worker and ran * 100 >= t.neighbour_floor_percent):
            continue
        role = "DataLoader worker" if worker else ("main loop" if th.sample.tid == root_main else "helper thread")
        needy.append(ThreadNeed(th.sample.tid, term_safe(th.sample.name), role, wanted, peak))
    total = sum(n.demand_cpus for n in needy) + sum(g.need_cpus for g in groups)
    with_headroom = math.ceil(total * DEMAND_HEADROOM - 1e-9) if total > 0 else 0
    per_thread = len(needy) + sum(math.ceil(g.need_cpus - 1e-9) for g in groups)
    return JobNeed(
        cpus=max(per_thread, with_headroom),
        threads=tuple(needy),
        demand_cpus=total,
        window_s=sum(s.interval_s for s in seen_in),
        intervals=len(seen_in),
        turns=tuple((g.process.sample.pid, len(g.threads), g.need_cpus) for g in groups),
    )


def for_need(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` as an earlier interval of a window: its watched processes only, what
    ``job_need`` reads of it. Every other process's samples and rates (most of a busy
    machine's threads) are left to go when the snapshot itself does."""
    kept = tuple(p for p in snapshot.processes if p.sample.watched)
    if len(kept) == len(snapshot.processes):
        return snapshot
    pids = {p.sample.pid for p in kept}
    previous, current = snapshot.previous, snapshot.current
    return replace(
        snapshot,
        previous=replace(previous, processes=tuple(p for p in previous.processes if p.pid in pids)),
        current=replace(current, processes=tuple(p.sample for p in kept)),
        processes=kept,
    )


def window_for(snapshot: Snapshot, window: Sequence[Snapshot]) -> list[Snapshot]:
    """``window`` ending with ``snapshot`` (appended when it is not already last)."""
    found = list(window)
    if not found or found[-1] is not snapshot:
        found.append(snapshot)
    return found
