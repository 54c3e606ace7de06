"""Is every rank of a multi-rank job where its plan puts it? ``audit`` takes one sample,
the topology and what the ranks' environments say, and returns each rank's GPU, its
mask, the plan for that GPU (``plan_machine``) and what differs, so that a launcher's
mistake is caught while the job runs rather than read off its throughput. Pure.

Which processes are ranks and which GPU each uses: ``affmon.core.plan.audit_ranks``.

Off plan (``off plan``, exit status 1), for each rank:

- FAR: its mask, its threads' or its workers' masks reach CPUs outside its GPU's
  domain (the GPU's NUMA node or local CPUs; checked only where the locality is known),
  as a cyclic task distribution does when it puts a rank on the other socket.
- OVERLAP: it shares CPUs with another rank beyond what their plans share.
- COLLAPSED: its mask, or one of its workers' masks, lies within one core while its
  plan (its own mask, for a worker) spans several: what a library that pins the main
  thread (OpenMP, MKL) leaves to every worker forked after it.
- NARROW: fewer CPUs than its plan gives it.
- NO_SLOT: more ranks on its GPU than the plan has for one GPU (``ranks_per_gpu``).

A rank without any of these whose mask is not its plan is ``equivalent`` (another slice
of its GPU's domain, or a wider one no other rank uses); one whose GPU is unknown or
absent has ``no plan``, and still gets OVERLAP and COLLAPSED, measured against an even
share of the allowed cores among the ranks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from affmon.core.model.cpuset import EMPTY, CpuSet
from affmon.core.model.domains import allowed_pool, core_units, fmt_cpus, gpu_domain, nodes_phrase, plural, union
from affmon.core.model.samples import Sample
from affmon.core.model.topology import Topology
from affmon.core.plan.audit_ranks import RankEnv, RankProcess, rank_processes
from affmon.core.plan.planner import RankPlan, plan_machine
from affmon.core.text import term_safe

ON_PLAN = "on plan"
EQUIVALENT = "equivalent"
OFF_PLAN = "off plan"
NO_PLAN = "no plan"
UNKNOWN = "unknown"
# The most ranks per GPU inferred from what runs (``affmon plan --ranks-per-gpu`` takes
# up to 64 too); ranks beyond it on one GPU are NO_SLOT.
MAX_RANKS_PER_GPU = 64


@dataclass(frozen=True, slots=True)
class Problem:
    """One way a rank is off plan: a code, a display sentence (names through
    ``term_safe``), and the CPUs and other processes it is about."""

    code: str  # FAR, OVERLAP, COLLAPSED, NARROW, NO_SLOT
    message: str
    cpus: CpuSet = EMPTY
    pids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class RankAudit:
    pid: int
    start_ticks: int
    name: str
    local_rank: int | None  # from its environment; None in a recording or where unreadable
    gpu_entry: str | None  # what its environment names (index or UUID)
    gpu_index: int | None
    pci_bus_id: str | None
    matched_by: str  # "nvml", "environment", or "none"
    mask: CpuSet | None  # its main thread's allowed CPUs
    footprint: CpuSet  # every CPU its threads and its descendants' threads may run on
    workers: tuple[int, ...]  # its descendants
    plan: RankPlan | None
    verdict: str
    problems: tuple[Problem, ...]
    differences: tuple[str, ...]  # how the mask differs from the plan, when that is no problem
    notes: tuple[str, ...]  # how its GPU was found, where that needs saying


@dataclass(frozen=True, slots=True)
class Audit:
    ranks: tuple[RankAudit, ...]
    ranks_per_gpu: int
    ranks_per_gpu_inferred: bool  # the most ranks found on one GPU, not a number given
    warnings: tuple[str, ...]  # the plan's

    @property
    def off_plan(self) -> int:
        return sum(1 for r in self.ranks if r.verdict == OFF_PLAN)

    def exit_status(self, strict: bool = False) -> int:
        """1 when a rank is off plan (``strict``: when any rank's mask is not exactly its plan)."""
        if strict:
            return int(any(r.verdict != ON_PLAN for r in self.ranks))
        return int(self.off_plan > 0)


def audit(
    sample: Sample,
    topology: Topology,
    envs: Mapping[tuple[int, int], RankEnv] | None = None,
    *,
    ranks_per_gpu: int | None = None,
    within: Sequence[int] = (),
) -> Audit:
    """Each rank of ``sample`` (in the trees of ``within`` when given) against
    ``plan_machine(topology, ranks_per_gpu)``; ``ranks_per_gpu`` None: the most ranks
    found on one GPU. ``envs``: parsed environments by process identity (pid, start)."""
    ranks = rank_processes(sample, topology, envs or {}, within)
    per_gpu: dict[str, list[RankProcess]] = {}
    for r in ranks:
        if r.bus_id is not None:
            per_gpu.setdefault(r.bus_id, []).append(r)
    inferred = ranks_per_gpu is None
    rpg = ranks_per_gpu or min(max((len(members) for members in per_gpu.values()), default=1), MAX_RANKS_PER_GPU)
    machine = plan_machine(topology, rpg)
    slots: dict[int, RankPlan] = {}  # pid -> its plan
    for bus_id, members in per_gpu.items():
        mine = [plan for plan in machine.plans if plan.pci_bus_id is not None and plan.pci_bus_id == bus_id]
        slots.update(_assign(members, mine, rpg))
    checked = _check(topology, ranks, slots, per_gpu, rpg)
    ordered = sorted(checked, key=lambda a: (a.gpu_index is None, a.gpu_index or 0, a.local_rank or 0, a.pid))
    return Audit(tuple(ordered), rpg, inferred, machine.warnings)


def _assign(members: list[RankProcess], plans: list[RankPlan], rpg: int) -> dict[int, RankPlan]:
    """Each rank of one GPU to one of the GPU's plan slots: by LOCAL_RANK % ranks_per_gpu
    (what ``affmon exec --from-env`` pins) when every rank has a distinct one, else the
    pairs sharing the most CPUs first, so that ranks which swapped slices are not both
    called moved."""
    by_rank = {plan.rank: plan for plan in plans}
    slots = [r.env.local_rank % rpg if r.env and r.env.local_rank is not None else None for r in members]
    if None not in slots and len(set(slots)) == len(slots):
        return {
            r.process.pid: by_rank[s] for r, s in zip(members, slots, strict=True) if s is not None and s in by_rank
        }
    pairs = sorted(
        (
            (len((r.mask or EMPTY) & plan.cpus), -plan.rank, -r.process.pid, r.process.pid, plan)
            for r in members
            for plan in plans
        ),
        key=lambda t: t[:3],
        reverse=True,
    )
    chosen: dict[int, RankPlan] = {}
    used: set[int] = set()
    for *_, pid, plan in pairs:
        if pid not in chosen and plan.rank not in used:
            chosen[pid] = plan
            used.add(plan.rank)
    return chosen


def _core_count(topology: Topology, cpus: CpuSet) -> int:
    """Physical cores ``cpus`` touches (a CPU no core lists counts as one)."""
    touched = [c.cpus for c in topology.cores if c.cpus & cpus]
    return len(touched) + len(cpus - union(touched))


def _check(
    topology: Topology,
    ranks: list[RankProcess],
    slots: dict[int, RankPlan],
    per_gpu: dict[str, list[RankProcess]],
    rpg: int,
) -> list[RankAudit]:
    allowed, _ = allowed_pool(topology, None)
    share = len(core_units(topology, allowed).units) // max(len(ranks), 1)  # cores each, without a plan
    out = []
    for r in ranks:
        p = r.process
        plan = slots.get(p.pid)
        mask, footprint = r.mask, r.footprint
        problems: list[Problem] = []
        if r.bus_id is not None and plan is None and len(per_gpu.get(r.bus_id, [])) > rpg:
            problems.append(
                Problem(
                    "NO_SLOT",
                    f"GPU {r.gpu_index} has {len(per_gpu[r.bus_id])} ranks but the plan has {rpg} per GPU.",
                )
            )
        if r.bus_id is not None:
            domain = gpu_domain(topology, r.bus_id, allowed)
            far = footprint - domain.cpus
            if domain.local and far:
                problems.append(
                    Problem(
                        "FAR",
                        f"It may run on {_cpus(far)} ({nodes_phrase(topology.nodes_of(far))}), not local to "
                        f"GPU {r.gpu_index} ({domain.name}).",
                        far,
                    )
                )
        for other in ranks:
            if other is r:
                continue
            planned = plan.cpus if plan else EMPTY
            other_plan = slots.get(other.process.pid)
            shared = (footprint & other.footprint) - (planned & (other_plan.cpus if other_plan else EMPTY))
            if shared:
                problems.append(
                    Problem(
                        "OVERLAP",
                        f"It shares {_cpus(shared)} with rank pid {other.process.pid} "
                        f"({term_safe(other.process.name)}).",
                        shared,
                        (other.process.pid,),
                    )
                )
        problems += _collapsed(topology, r, plan, share)
        collapsed_itself = any(pr.code == "COLLAPSED" and p.pid in pr.pids for pr in problems)
        if plan is not None and mask is not None and len(mask) < len(plan.cpus) and not collapsed_itself:
            problems.append(
                Problem("NARROW", f"It has {plural(len(mask), 'CPU')} where its plan gives {len(plan.cpus)}.", mask)
            )
        differences = _differences(mask, footprint, plan)
        if mask is None:
            verdict = UNKNOWN
        elif problems:
            verdict = OFF_PLAN
        elif plan is None:
            verdict = NO_PLAN
        else:
            verdict = ON_PLAN if not differences else EQUIVALENT
        if verdict == EQUIVALENT and plan is not None and mask is not None and not mask & plan.cpus:
            # Not a failure: another slice, as good by every check above.
            differences = (
                f"Another slice than its plan, as good: {_cpus(mask)} instead of {fmt_cpus(plan.cpus)}.",
                *differences[1:],
            )
        out.append(
            RankAudit(
                pid=p.pid,
                start_ticks=p.start_ticks,
                name=p.name,
                local_rank=r.env.local_rank if r.env else None,
                gpu_entry=r.env.gpu_entry if r.env else None,
                gpu_index=r.gpu_index,
                pci_bus_id=r.bus_id,
                matched_by=r.matched_by,
                mask=mask,
                footprint=footprint,
                workers=tuple(d.pid for d in r.descendants),
                plan=plan,
                verdict=verdict,
                problems=tuple(problems),
                differences=differences,
                notes=r.notes,
            )
        )
    return out


def _collapsed(topology: Topology, r: RankProcess, plan: RankPlan | None, share: int) -> list[Problem]:
    """COLLAPSED for the rank's own mask (against its plan, or the even share without
    one) and for its workers' masks (against the rank's mask)."""
    mask = r.mask
    problems = []
    if mask and _core_count(topology, mask) == 1:
        if plan is not None and _core_count(topology, plan.cpus) > 1:
            against = f"its plan has {plural(_core_count(topology, plan.cpus), 'core')}"
        elif plan is None and share > 1:
            against = f"an even share of the allowed cores among the ranks is {share}"
        else:
            against = ""
        if against:
            problems.append(
                Problem(
                    "COLLAPSED",
                    f"Its mask is one core ({_cpus(mask)}) where {against}.",
                    mask,
                    (r.process.pid,),
                )
            )
    if mask and _core_count(topology, mask) > 1:
        narrow = [
            (d, m)
            for d in r.descendants
            if (main := d.main_thread) is not None and (m := main.allowed_cpus) and _core_count(topology, m) == 1
        ]
        if narrow:
            named = ", ".join(f"pid {d.pid} ({term_safe(d.name)}) on {_cpus(m)}" for d, m in narrow[:4])
            more = f" and {len(narrow) - 4} more" if len(narrow) > 4 else ""
            problems.append(
                Problem(
                    "COLLAPSED",
                    f"{plural(len(narrow), 'worker')} on one core while it has {plural(len(mask), 'CPU')}: "
                    f"{named}{more}.",
                    union(m for _, m in narrow),
                    tuple(d.pid for d, _ in narrow),
                )
            )
    return problems


def _cpus(cpus: CpuSet) -> str:
    """``CPU 3``, ``CPUs 0-7``."""
    return f"CPU {fmt_cpus(cpus)}" if len(cpus) == 1 else f"CPUs {fmt_cpus(cpus)}"


def _differences(mask: CpuSet | None, footprint: CpuSet, plan: RankPlan | None) -> tuple[str, ...]:
    out = []
    if mask is not None and plan is not None and mask != plan.cpus:
        if not mask & plan.cpus:
            out.append("None of its CPUs is in its plan.")
        elif mask - plan.cpus:
            out.append(f"CPUs {fmt_cpus(mask - plan.cpus)} are not in its plan.")
        if mask & plan.cpus and plan.cpus - mask:
            out.append(f"Planned CPUs {fmt_cpus(plan.cpus - mask)} are not in its mask.")
    if mask is not None and footprint - mask:
        out.append(f"Its threads or workers may also run on CPUs {fmt_cpus(footprint - mask)}, outside its mask.")
    return tuple(out)


__all__ = [
    "EQUIVALENT",
    "NO_PLAN",
    "OFF_PLAN",
    "ON_PLAN",
    "UNKNOWN",
    "Audit",
    "Problem",
    "RankAudit",
    "audit",
]
