"""Diagnosis rules: what is wrong with a training job's CPU placement, in numbers.

Pure functions of a ``Snapshot`` (two samples made into rates), the topology and what
affmon itself pinned. Each rule returns ``Finding`` values with a code, a severity, the
evidence and one plain sentence; ``FindingTracker`` debounces them over intervals (a
finding is raised after it holds for ``raise_after`` consecutive intervals and cleared
after ``clear_after`` clean ones).

A *job* is a training process with its watched descendants that are not jobs of their
own: a rank and its DataLoader workers (``find_jobs``). A watched process that is not training
(a monitor, a script: ``ProcessSample.training`` False) is a job of its own too, judged by the
CPU rules only (``Job.training``). A thread is *busy* when it wanted a CPU (ran or waited on a
run queue) for at least ``busy_demand`` of the interval.

A message is display text: the names it quotes (other processes, bus ids) pass through
``term_safe``; the evidence keeps them raw for JSON.

Migrations and involuntary switches alone are never a finding: a healthy job pinned to CPUs
0-5 on the H200 had 201 migrations/s and 247 involuntary switches/s. They appear as evidence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from affmon.core.model.cpuset import CpuSet, format_cpulist, in_cpuset
from affmon.core.model.domains import plural
from affmon.core.model.jobs import Job, demand, job_gpus, wait_ratio
from affmon.core.model.rates import ProcessRates, Snapshot, ThreadRates
from affmon.core.model.topology import Topology
from affmon.core.rules.base import (
    CutShort,
    ExpectedPins,
    Finding,
    RuleInputs,
    Severity,
    Thresholds,
    busy_threads,
    merge_same_code,
    rounded,
    severity_of,
    tids_of,
)
from affmon.core.rules.threads import job_cpus, pool_of
from affmon.core.text import term_safe

# -- the rules ---------------------------------------------------------------------------


def rule_starved(job: Job, snap: Snapshot, ctx: RuleInputs) -> list[Finding]:
    t = ctx.thresholds
    busy = busy_threads(job, snap.interval_s, t)
    ratio = wait_ratio(th for _, th in busy)
    if ratio is None:
        return []
    severity = severity_of(ratio, t.starved_warn, t.starved_bad)
    if severity is None:
        return []
    worst = sorted(busy, key=lambda pt: -(pt[1].wait_ratio or 0))[:5]
    return [
        Finding(
            "STARVED",
            severity,
            job.pid,
            tids_of(busy),
            f"its {plural(len(busy), 'busy thread')} waited for a CPU {ratio:.0%} of the time they wanted one "
            f"(a healthy job waits under {t.starved_warn:.0%})",
            {
                "wait_ratio": rounded(ratio, 3),
                "busy_threads": len(busy),
                "demand_cpus": rounded(sum(demand(th, snap.interval_s) for _, th in busy)),
                "involuntary_switches_per_s": rounded(sum(th.involuntary_switches_per_s or 0 for _, th in busy), 1),
                "migrations_per_s": rounded(sum(th.migrations_per_s or 0 for _, th in busy), 1),
                "worst_threads": [
                    {"tid": th.sample.tid, "name": th.sample.name, "wait_ratio": rounded(th.wait_ratio, 3)}
                    for _, th in worst
                ],
            },
        )
    ]


def rule_mask_too_narrow(job: Job, snap: Snapshot, ctx: RuleInputs) -> list[Finding]:
    t = ctx.thresholds
    busy = busy_threads(job, snap.interval_s, t)
    by_mask: dict[CpuSet, list[tuple[ProcessRates, ThreadRates]]] = {}
    for p, th in busy:
        if th.sample.allowed_cpus:
            by_mask.setdefault(th.sample.allowed_cpus, []).append((p, th))
    findings = []
    pool = pool_of(job, ctx.topology)
    cpus = job_cpus(job, ctx.topology)
    for mask, threads in by_mask.items():
        online = mask & ctx.topology.online_cpus
        # Too narrow only where a wider mask is possible (OVERSUBSCRIBED says when even every
        # CPU the job may have is not enough), and only for the job's own mask: threads
        # narrower than the rest of their job are CONFINED_THREAD's.
        if not online < pool or online < cpus:
            continue
        wanted = sum(demand(th, snap.interval_s) for _, th in threads)
        ratio = wait_ratio(th for _, th in threads) or 0.0
        # A mask is too narrow only for more busy threads than it has CPUs, wanting clearly
        # more than it holds: one thread on one CPU measures 1.0x (jitter), and when it waits
        # the cause is whoever else runs there (CONTENDED), not the mask.
        too_many = len(threads) > len(mask) and wanted > len(mask) * t.narrow_factor + t.narrow_margin_cpus
        if not too_many or ratio < t.starved_warn:
            continue
        severity = Severity.BAD if wanted >= 2 * len(mask) or ratio >= t.starved_bad else Severity.WARN
        findings.append(
            Finding(
                "MASK_TOO_NARROW",
                severity,
                job.pid,
                tids_of(threads),
                f"{plural(len(threads), 'busy thread')} want {wanted:.1f} CPUs but their mask allows only "
                f"{len(mask)} (CPUs {format_cpulist(mask)}), so they queue {ratio:.0%} of the time; the job may "
                f"have {len(pool)} CPUs ({format_cpulist(pool)})",
                {
                    "mask": format_cpulist(mask),
                    "cpus_in_mask": len(mask),
                    "busy_threads": len(threads),
                    "demand_cpus": rounded(wanted),
                    "wait_ratio": rounded(ratio, 3),
                    "processes": sorted({p.sample.pid for p, _ in threads}),
                    "cpus_available": len(pool),
                },
            )
        )
    return findings


class Neighbours:
    """Every process's contending threads in one interval, gathered on first use with one
    pass over all threads: the rules then ask who else ran where without a pass per starved
    job (a node of eight starved ranks beside thousands of other threads).

    A thread contends when its rate is known (the sampler may leave a nearly idle unwatched
    process's threads unknown: not a contender), it used at least ``neighbour_floor_percent``
    of a CPU, and either it wanted a CPU ``busy_demand`` of the interval (run + wait, where
    the wait is known), used ``other_busy_percent``, or took at least half its fair share of
    the CPU it ran on: 100% over the threads that ran there above the floor. Several spinners
    sharing a saturated CPU with a job each get less than 20%, yet each takes the job's turn;
    a daemon at 6% on a CPU it shares with one other thread does not."""

    def __init__(self, snap: Snapshot, t: Thresholds) -> None:
        self._snap = snap
        self._t = t
        self._by_process: list[tuple[ProcessRates, list[ThreadRates]]] | None = None

    def _crowd(self) -> dict[int, int]:
        """Per CPU, the threads that ran there above the floor (``psr`` is where each last ran)."""
        crowd: dict[int, int] = {}
        floor = self._t.neighbour_floor_percent
        for p in self._snap.processes:
            if not p.rated:
                continue
            for th in p.threads:
                if th.sample.psr is not None and th.cpu_percent is not None and th.cpu_percent >= floor:
                    crowd[th.sample.psr] = crowd.get(th.sample.psr, 0) + 1
        return crowd

    def contends(self, th: ThreadRates, crowd: Mapping[int, int]) -> bool:
        t = self._t
        if th.cpu_percent is None or th.cpu_percent < t.neighbour_floor_percent:
            return False
        if th.cpu_percent >= t.other_busy_percent:
            return True
        if th.wait_ns_delta is not None and demand(th, self._snap.interval_s) >= t.busy_demand:
            return True
        sharing = crowd.get(th.sample.psr, 1) if th.sample.psr is not None else 1
        return th.cpu_percent >= 0.5 * 100.0 / max(sharing, 1)

    def by_process(self) -> list[tuple[ProcessRates, list[ThreadRates]]]:
        if self._by_process is None:
            crowd = self._crowd()
            self._by_process = []
            for p in self._snap.processes:
                busy = [th for th in p.threads if self.contends(th, crowd)] if p.rated else []
                if busy:
                    self._by_process.append((p, busy))
        return self._by_process

    def of(self, pid: int) -> list[ThreadRates]:
        """The contending threads of process ``pid`` (none when it has none)."""
        return next((threads for p, threads in self.by_process() if p.sample.pid == pid), [])


# The name the rules used before neighbours were judged by their fair share.
BusyThreads = Neighbours


def _others_on(cpus: CpuSet, job: Job, busy: Neighbours) -> list[dict[str, Any]]:
    """Other processes whose contending threads ran on ``cpus`` in the interval."""
    found = []
    for p, threads in busy.by_process():
        if p.sample.pid in job.pids:
            continue
        on = [th for th in threads if th.sample.psr in cpus]
        if on:
            found.append(
                {
                    "pid": p.sample.pid,
                    "name": p.sample.name,
                    "training": p.sample.training,
                    "kernel": p.sample.kernel,
                    "cpus": format_cpulist({th.sample.psr for th in on if th.sample.psr is not None}),
                    "cpu_percent": rounded(sum(th.cpu_percent or 0 for th in on), 1),
                }
            )
    return sorted(found, key=lambda o: -float(o["cpu_percent"] or 0))


def _pinned(p: ProcessRates, topology: Topology) -> CpuSet | None:
    """The process's mask when it is narrower than what its cgroup allows, else None."""
    main = p.sample.main_thread
    if main is None or main.allowed_cpus is None:
        return None
    allowed = (p.sample.cgroup_cpus or topology.allowed_cpus) & topology.online_cpus
    mask = main.allowed_cpus & topology.online_cpus
    return mask if mask and mask < allowed else None


def rule_contended(
    job: Job, snap: Snapshot, ctx: RuleInputs, jobs: Sequence[Job], everyone: Neighbours | None = None
) -> list[Finding]:
    t = ctx.thresholds
    findings = []
    busy = busy_threads(job, snap.interval_s, t)
    ratio = wait_ratio(th for _, th in busy)
    ran_on = frozenset(th.sample.psr for _, th in busy if th.sample.psr is not None and th.ran)
    if ratio is not None and ratio >= t.starved_warn and ran_on:
        others = _others_on(ran_on, job, everyone or Neighbours(snap, t))
        if others:
            names = ", ".join(f"{o['pid']} ({term_safe(o['name'])})" for o in others[:5])
            more = f" and {len(others) - 5} more" if len(others) > 5 else ""
            findings.append(
                Finding(
                    "CONTENDED",
                    Severity.BAD if ratio >= t.starved_bad else Severity.WARN,
                    job.pid,
                    tids_of(busy),
                    f"other processes ran busy threads on the CPUs this job uses ({format_cpulist(ran_on)}): "
                    f"{names}{more}; its busy threads waited {ratio:.0%} of the time",
                    {"wait_ratio": rounded(ratio, 3), "job_cpus": format_cpulist(ran_on), "others": others},
                )
            )
    # Two training jobs pinned onto overlapping CPUs collide even before they starve.
    mine = _pinned(job.root, ctx.topology)
    if mine:
        for other in jobs:
            if other.pid == job.pid:
                continue
            theirs = _pinned(other.root, ctx.topology)
            if theirs and mine & theirs:
                findings.append(
                    Finding(
                        "CONTENDED",
                        Severity.WARN,
                        job.pid,
                        (job.pid,),
                        f"its mask ({format_cpulist(mine)}) overlaps the mask of "
                        f"{'training process' if other.training else 'process'} "
                        f"{other.pid} ({term_safe(other.root.sample.name)}, {format_cpulist(theirs)}) on CPUs "
                        f"{format_cpulist(mine & theirs)}",
                        {
                            "mask": format_cpulist(mine),
                            "other_pid": other.pid,
                            "other_mask": format_cpulist(theirs),
                            "overlap": format_cpulist(mine & theirs),
                        },
                    )
                )
    return merge_same_code(findings)


def rule_cross_numa(job: Job, snap: Snapshot, ctx: RuleInputs) -> list[Finding]:
    topo = ctx.topology
    if len(topo.cpu_numa_nodes) < 2 or not job.training:
        return []
    findings = []
    for gpu in job_gpus(job, snap):
        if gpu.numa_node is None:
            continue
        node = topo.node(gpu.numa_node)
        if node is None or not node.cpus:
            continue
        bus = term_safe(gpu.sample.pci_bus_id or "?")
        where = f"GPU {gpu.sample.index} ({bus}) is on NUMA node {node.id} (CPUs {format_cpulist(node.cpus)})"
        main = job.root.sample.main_thread
        mask = main.allowed_cpus if main else None
        if mask is not None and not mask & node.cpus:
            findings.append(
                Finding(
                    "CROSS_NUMA",
                    Severity.BAD,
                    job.pid,
                    (job.pid,),
                    f"{where} but the process's mask ({format_cpulist(mask)}) excludes that node",
                    {"gpu": gpu.sample.index, "gpu_node": node.id, "mask": format_cpulist(mask)},
                )
            )
            continue
        busy = busy_threads(job, snap.interval_s, ctx.thresholds)
        ran = [th for _, th in busy if th.sample.psr is not None]
        off = [th for th in ran if th.sample.psr not in node.cpus]
        if ran and len(off) / len(ran) > ctx.thresholds.cross_numa_share:
            findings.append(
                Finding(
                    "CROSS_NUMA",
                    Severity.WARN,
                    job.pid,
                    tuple(sorted(th.sample.tid for th in off)),
                    f"{where} but {len(off)} of its {len(ran)} busy threads ran on other nodes "
                    f"(CPUs {format_cpulist({th.sample.psr for th in off if th.sample.psr is not None})})",
                    {
                        "gpu": gpu.sample.index,
                        "gpu_node": node.id,
                        "busy_threads": len(ran),
                        "off_node_threads": len(off),
                        "off_node_nodes": list(topo.nodes_of(th.sample.psr for th in off if th.sample.psr is not None)),
                    },
                )
            )
        mems = job.root.sample.mems_allowed
        if mems is not None and node.id not in mems:
            findings.append(
                Finding(
                    "CROSS_NUMA",
                    Severity.WARN,
                    job.pid,
                    (job.pid,),
                    f"{where} but the process may not allocate memory there (Mems_allowed {format_cpulist(mems)})",
                    {"gpu": gpu.sample.index, "gpu_node": node.id, "mems_allowed": format_cpulist(mems)},
                )
            )
    return merge_same_code(findings)


def rule_affinity_drift(job: Job, ctx: RuleInputs) -> list[Finding]:
    findings = []
    cut_short = ctx.expected_masks.cut_short if isinstance(ctx.expected_masks, ExpectedPins) else {}
    for member in job.members:
        expected = ctx.expected_masks.get(member.sample.key)
        if expected is None:
            cut = cut_short.get(member.sample.key)
            if cut is not None:
                findings += _cut_short(job, member, cut)
            continue
        # A cpuset that allows only part of the pin (or shrank away from it since) runs the
        # threads on what the kernel makes of it: a cpuset's doing, not another program's.
        cpuset = member.sample.cgroup_cpus
        kernels = in_cpuset(expected, cpuset) if cpuset else expected
        drifted = [
            th.sample
            for th in member.threads
            if th.sample.allowed_cpus is not None and th.sample.allowed_cpus not in (expected, kernels)
        ]
        if drifted:
            masks = sorted({format_cpulist(th.allowed_cpus or ()) for th in drifted})
            findings.append(
                Finding(
                    "AFFINITY_DRIFT",
                    Severity.WARN,
                    job.pid,
                    tuple(th.tid for th in drifted),
                    f"affmon pinned process {member.sample.pid} to CPUs {format_cpulist(expected)} but "
                    f"{len(drifted)} of its threads now have {', '.join(masks)}: other software reset the pin",
                    {"pid": member.sample.pid, "expected": format_cpulist(expected), "now": masks},
                    {"cpus": format_cpulist(expected), "move_off": []},
                )
            )
    return merge_same_code(findings)


def _cut_short(job: Job, member: ProcessRates, cut: CutShort) -> list[Finding]:
    """A pin or undo of affmon killed half way, with threads still on the pin's mask (or
    what the cpuset makes of it): not a pin other software reset; `affmon undo` finishes it."""
    cpuset = member.sample.cgroup_cpus
    masks = (cut.cpus, in_cpuset(cut.cpus, cpuset) if cpuset else cut.cpus)
    left = [th.sample for th in member.threads if th.sample.allowed_cpus in masks]
    if not left:
        return []
    again = f"run `affmon undo {cut.pid}` again"
    return [
        Finding(
            "AFFINITY_DRIFT",
            Severity.WARN,
            job.pid,
            tuple(th.tid for th in left),
            f"affmon's pin of process {member.sample.pid} to CPUs {format_cpulist(cut.cpus)}, or its undo, was"
            f" cut short: {len(left)} of its threads still have those CPUs; {again} to put them back",
            {"pid": member.sample.pid, "pinned": format_cpulist(cut.cpus), "cut_short": True},
            None,
            remedy=f"{again}: it finishes the pin's undo (the journal entry is pending)",
        )
    ]
