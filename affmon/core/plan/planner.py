"""The core-set planner: which CPUs each GPU rank should run on, and where one process
should move. Pure: it takes a ``Topology`` and observations and returns values whose
``reasons`` and ``warnings`` say why in plain sentences, with the numbers.

The rules, in order of preference (drawn from NVIDIA DeepLearningExamples'
``gpu_affinity.py`` and torchrun's ``--numa-binding``):

1. Domain: the allowed CPUs of the GPU's NUMA node, or the GPU's own local CPUs where
   they are narrower than the node (an MI250X GCD local to one L3 group). Unknown
   locality is said, never guessed as node 0 (torch's ``max(numa_node, 0)``); a GPU
   whose local CPUs are all outside the allowed set is said too. Both fall back to the
   allowed CPUs.
2. Whole physical cores with all their SMT siblings; a core partly outside the pool is
   left out unless that leaves nothing.
3. Cores not used by other training processes, shared evenly among the ranks of one
   domain (torch ``--numa-binding=exclusive``: remainder cores to the lowest GPU
   indexes; fewer cores than ranks: every rank shares the whole domain, with a warning).
4. Enough CPUs for the busy threads (a warning otherwise).
5. L3 caches: cores are ordered by L3 group, then by first CPU, and shares tile that
   order. Balance comes first: the ranks of a domain get core counts that differ by at
   most one, since the slowest rank sets the pace of all. Where a domain holds several
   L3 groups (AMD EPYC, one per CCX or CCD), the ranks that take the one core more are
   chosen so that the shares split the fewest groups between two ranks (``l3_shares``):
   whole groups where they divide evenly, never at the cost of balance.
6. (``suggest``) among equally good windows, the one keeping most of the CPUs the
   process ran on; then the one closest to the slice ``plan_machine`` gives its rank
   (so suggestions for every rank of a domain keep tiling it); then the lowest CPUs.

Measured on the H200 machine: narrowing a job's mask while another tenant's
busy threads stay on those cores made it slower (904 vs 1198 samples/s); moving them off
gave 1695. So ``suggest`` avoids cores where other busy processes run, and names those
it could not avoid in ``move_off``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from affmon.core.model.cpuset import EMPTY, CpuSet
from affmon.core.model.domains import (
    CoreUnits,
    Domain,
    allowed_pool,
    core_units,
    even_split,
    fmt_cpus,
    gpu_domain,
    gpu_indexes,
    l3_index,
    l3_span,
    plural,
    union,
)
from affmon.core.model.topology import Topology, normalize_bus_id
from affmon.core.plan.l3_shares import rank_shares
from affmon.core.text import term_safe

# A process using less than this (percent of one CPU) is noise, not a tenant to move: the
# floor below which ``findings`` counts no thread as a contender (``neighbour_floor_percent``),
# so that every occupant advice hands over as contending is also one the planner avoids or moves.
MOVE_OFF_MIN_CPU_PERCENT = 5.0
# A job sized to its demand gets a quarter more: the demand is a one-second mean, and on
# the H200 a job held to exactly ceil(demand) CPUs among isolated hogs stayed slow.
DEMAND_HEADROOM = 1.25


@dataclass(frozen=True, slots=True)
class Occupant:
    """Another process and the CPUs it holds or uses."""

    pid: int
    name: str
    cpus: CpuSet  # CPUs where its busy threads ran in the last interval (or its mask when pinned)
    cpu_percent: float  # how busy (100 = one CPU)
    training: bool  # a training process (python/launcher/GPU user) vs another tenant
    gpu_bus_ids: tuple[str, ...] = ()  # GPUs it uses (training processes)
    pinned_cpus: CpuSet | None = None  # its mask when narrower than the machine (None: unpinned)
    root: int | None = None  # the root of the job it belongs to (itself for a rank; None: unknown)
    user: str | None = None  # whose it is: isolation names each process it moves
    mask: CpuSet | None = None  # its main thread's mask, online CPUs (where isolation moves it from)


@dataclass(frozen=True, slots=True)
class RankPlan:
    """The CPUs for one rank of one GPU. ``numa_node`` is the node holding ``cpus`` (None
    when they span several); ``domain_cpus`` is the pool the rank's share was cut from."""

    pci_bus_id: str | None
    gpu_index: int | None  # index among GPUs of the same vendor sorted by bus id (NVML / ROCm order)
    rank: int  # 0..ranks_per_gpu-1 within that GPU
    numa_node: int | None
    cpus: CpuSet
    reasons: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    domain_cpus: CpuSet = EMPTY


@dataclass(frozen=True, slots=True)
class MachinePlan:
    """Every rank's plan; ``warnings`` gathers the ranks' warnings once each, ``notes``
    says which allowed CPUs no plan uses (a NUMA node without a GPU)."""

    plans: tuple[RankPlan, ...]
    warnings: tuple[str, ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Suggestion:
    cpus: CpuSet
    numa_node: int | None
    reasons: tuple[str, ...]
    warnings: tuple[str, ...]
    move_off: tuple[int, ...]  # pids whose busy threads run on `cpus` and would have to move off
    # pids whose busy threads run on `cpus` with nowhere else to go (the suggestion holds
    # every CPU the process may use): isolation cannot move them
    stuck: tuple[int, ...] = ()


def plan_machine(topology: Topology, ranks_per_gpu: int = 1, gpus: Iterable[str] | None = None) -> MachinePlan:
    """A plan for every rank of the job's GPUs, as a launcher would bind them: the GPUs
    of one domain split its cores evenly, in bus-id order, ``ranks_per_gpu`` slices per
    GPU. ``gpus`` (PCI bus ids, any spelling) are the GPUs the job uses; None means every
    GPU of the topology. A job given two of a node's eight GPUs shares its CPUs between
    those two only: planning for all eight would leave most of its cpuset unused."""
    if ranks_per_gpu < 1:
        raise ValueError(f"ranks_per_gpu must be at least 1, not {ranks_per_gpu}")
    allowed, allowed_warnings = allowed_pool(topology, None)
    if not topology.gpus:
        return MachinePlan((), ("No GPU found, so there is nothing to plan.",))
    chosen = topology.gpus
    if gpus is not None:
        wanted = {normalize_bus_id(b) for b in gpus}
        chosen = tuple(g for g in topology.gpus if g.pci_bus_id in wanted)
        if not chosen:
            return MachinePlan((), ("The job uses none of the GPUs in the topology, so there is nothing to plan.",))
    domains = {g.pci_bus_id: gpu_domain(topology, g.pci_bus_id, allowed) for g in chosen}
    groups: dict[CpuSet, list[str]] = {}
    for gpu in chosen:
        groups.setdefault(domains[gpu.pci_bus_id].cpus, []).append(gpu.pci_bus_id)
    plans: list[RankPlan] = []
    for bus_ids in groups.values():  # in order of each group's lowest bus id
        taken = union(p.cpus for p in plans)
        plans += _plan_domain(topology, [domains[b] for b in bus_ids], bus_ids, ranks_per_gpu, taken)
    warnings = tuple(dict.fromkeys([*allowed_warnings, *(w for p in plans for w in p.warnings)]))
    return MachinePlan(tuple(plans), warnings, _unused_notes(topology, allowed, union(p.cpus for p in plans)))


def _plan_domain(
    topology: Topology, domains: list[Domain], bus_ids: list[str], ranks_per_gpu: int, taken: CpuSet
) -> list[RankPlan]:
    """The ranks of the GPUs sharing one domain: contiguous shares of its cores, even or by L3 group."""
    domain = domains[0]
    found = core_units(topology, domain.cpus)
    units = list(found.units)
    ranks = [(i, rank) for i in range(len(bus_ids)) for rank in range(ranks_per_gpu)]
    shared_reasons = list(found.reasons)
    shared_warnings = list(found.warnings)
    free = [u for u in units if not u & taken]
    if len(free) < len(units):  # domains overlap: cores an earlier domain's ranks hold
        if len(free) >= len(ranks):
            shared_reasons.append(
                f"{plural(len(units) - len(free), 'core')} already planned for other GPUs are left out."
            )
            units = free
        else:
            shared_warnings.append(f"{domain.name} shares cores with other GPUs' plans: too few are left.")
    who = f"{len(bus_ids)} GPUs" if len(bus_ids) > 1 else "1 GPU"
    if ranks_per_gpu > 1:
        who += f" ({len(ranks)} ranks)"
    l3_of = l3_index(topology)
    indexes = gpu_indexes(topology)
    level = topology.l3_groups[0].level if topology.l3_groups else 3
    split = rank_shares(units, len(ranks), l3_of, level)
    shares = split.shares if split is not None else [units] * len(ranks)
    sizes = None if split is None else [len(share) for share in shares]
    if split is not None and split.note is not None:
        shared_reasons.append(split.note)
    plans = []
    for n, (i, rank) in enumerate(ranks):
        chosen = shares[n]
        reasons = [*domains[i].reasons, *shared_reasons]
        warnings = [*domains[i].warnings, *shared_warnings]
        if sizes is None:
            reasons.append(
                f"It shares all {plural(len(units), 'core')} of {domain.name} with the other {len(ranks) - 1} ranks."
            )
            warnings.append(
                f"{domain.name} has {plural(len(units), 'core')} for {len(ranks)} ranks: fewer cores than ranks, "
                "so they all share it (oversubscribed)."
            )
        else:
            reasons.append(_share_sentence(chosen, found.unit, domain.name, len(units), who, len(ranks)))
            if sizes[n] > min(sizes):
                where = (
                    "which go to the lowest GPU indexes"
                    if split is None or split.note is None
                    else "placed where they split the fewest L3 caches"
                )
                left = len(units) % len(ranks)
                reasons.append(f"It holds one of the {left} cores left over by the even split, {where}.")
        if topology.l3_groups:
            reasons.append(_l3_sentence(topology, l3_of, chosen))
        cpus = union(chosen)
        plans.append(
            RankPlan(
                pci_bus_id=bus_ids[i],
                gpu_index=indexes[bus_ids[i]],
                rank=rank,
                numa_node=topology.home_node_of(cpus),
                cpus=cpus,
                reasons=tuple(reasons),
                warnings=tuple(warnings),
                domain_cpus=union(units),
            )
        )
    return plans


def _share_sentence(chosen: Sequence[CpuSet], unit: str, name: str, n_units: int, who: str, n_ranks: int) -> str:
    size = f"{plural(len(chosen), unit)}, {plural(len(union(chosen)), 'CPU')}"
    if n_ranks == 1:
        return f"{size}: all {n_units} cores of {name}, for {who} alone."
    return f"{size}: an even share of the {n_units} cores of {name} among {who}."


def _l3_sentence(topology: Topology, l3_of: dict[int, int], chosen: Sequence[CpuSet]) -> str:
    level = topology.l3_groups[0].level
    indexes = sorted({l3_of[min(u)] for u in chosen if min(u) in l3_of})
    if not indexes:
        return f"Its cores are in no L{level} cache group."
    if len(indexes) == 1:
        return f"Its cores share one L{level} cache (CPUs {fmt_cpus(topology.l3_groups[indexes[0]].cpus)})."
    return f"Its cores span {len(indexes)} L{level} caches, filled one after the other."


def _unused_notes(topology: Topology, allowed: CpuSet, planned: CpuSet) -> tuple[str, ...]:
    notes = []
    left = allowed - planned
    for node in topology.cpu_numa_nodes:
        mine = node.cpus & allowed
        if mine and mine <= left:
            notes.append(f"NUMA node {node.id} (CPUs {fmt_cpus(mine)}) serves no GPU, so no plan uses it.")
            left -= mine
    if left:
        notes.append(f"CPUs {fmt_cpus(left)} are in no plan.")
    return tuple(notes)


# --------------------------------------------------------------------------------------
# suggest


def suggest(
    topology: Topology,
    *,
    gpu_bus_ids: tuple[str, ...],
    allowed_cpus: CpuSet | None,
    current_cpus: CpuSet,
    demand_cpus: float,
    others: Sequence[Occupant],
    need_cpus: int | None = None,
) -> Suggestion:
    """The CPUs one process (a training rank) should run on, given who else runs where.
    ``demand_cpus``: what its busy threads want (run + wait); the window is sized to
    ``ceil(demand_cpus x DEMAND_HEADROOM)`` CPUs, or to ``need_cpus`` when the caller
    measured the need itself (``need.py``: one CPU per busy thread at least)."""
    allowed, first_warnings = allowed_pool(topology, allowed_cpus)
    reasons: list[str] = []
    warnings = list(first_warnings)
    cache: dict[str, Domain] = {}

    def domain_of(bus_id: str) -> Domain:
        key = normalize_bus_id(bus_id)
        if key not in cache:
            cache[key] = gpu_domain(topology, key, allowed)
        return cache[key]

    targets = tuple(dict.fromkeys(normalize_bus_id(b) for b in gpu_bus_ids))
    if not targets:
        pool, name = allowed, f"its allowed CPUs {fmt_cpus(allowed)}"
        reasons.append(
            f"It uses no GPU that affmon could match, so the plan is within its allowed CPUs {fmt_cpus(allowed)}."
        )
    else:
        own = [domain_of(b) for b in targets]
        for d in own:
            reasons += d.reasons
            warnings += d.warnings
        pool = union(d.cpus for d in own)
        name = own[0].name if len({d.cpus for d in own}) == 1 else f"CPUs {fmt_cpus(pool)}"
        nodes = sorted({n for d in own if (n := d.numa_node) is not None})
        if len(nodes) > 1:
            warnings.append(
                f"It uses GPUs on NUMA nodes {', '.join(map(str, nodes))}: cross-NUMA by design, so the plan is "
                f"within the union of their CPUs ({fmt_cpus(pool)})."
            )
        elif len({d.cpus for d in own}) > 1:
            reasons.append(f"Its {len(targets)} GPUs have different local CPUs; the plan is within their union.")
    found = core_units(topology, pool)
    units = found.units
    reasons += found.reasons
    warnings += found.warnings

    # Rule 3: the ranks sharing this domain, and the share of this one.
    order = {g.pci_bus_id: i for i, g in enumerate(topology.gpus)}

    def first_gpu(bus_ids: Iterable[str]) -> int:
        return min((order.get(normalize_bus_id(b), len(order)) for b in bus_ids), default=len(order))

    # A training process without a GPU (a CPU-only job) that holds CPUs of the pool is a
    # peer too: it claims those cores just as a rank does.
    peers = [
        o
        for o in others
        if o.training
        and (
            any(domain_of(b).cpus & pool for b in o.gpu_bus_ids)
            # a job's root only: its DataLoader workers are part of it, not peers of their own
            or (not o.gpu_bus_ids and o.root in (None, o.pid) and _held(o) & pool)
        )
    ]
    # The ranks share the domain in the order of their first GPU (the topology's order),
    # this process after the other training processes of its own GPU: its place in that
    # order is the number of peers whose first GPU comes no later than its own.
    n_ranks = len(peers) + 1
    own_gpu = first_gpu(targets)
    position = sum(1 for p in peers if first_gpu(p.gpu_bus_ids) <= own_gpu)
    level = topology.l3_groups[0].level if topology.l3_groups else 3
    split = rank_shares(units, n_ranks, l3_index(topology), level)
    sizes = None if split is None else [len(share) for share in split.shares]
    claimed = union(_held(o) for o in others if o.training)
    hogs = [o for o in others if not o.training and o.cpu_percent >= MOVE_OFF_MIN_CPU_PERCENT]
    busy = [o for o in others if o.cpu_percent >= MOVE_OFF_MIN_CPU_PERCENT]
    measured_need = need_cpus is not None
    if need_cpus is None:
        need_cpus = math.ceil(demand_cpus * DEMAND_HEADROOM - 1e-9) if demand_cpus > 0 else 0
    widest = max((len(u) for u in units), default=1)
    need_units = math.ceil(need_cpus / widest)

    l3_of = l3_index(topology)
    if sizes is None:
        chosen: Sequence[CpuSet] = units
        warnings.append(
            f"{name} has {plural(len(units), 'core')} for {n_ranks} training processes: fewer cores than processes, "
            "so they all share it (oversubscribed)."
        )
    else:
        share = sizes[position]
        assert split is not None
        tiles = [union(tile) for tile in split.shares]  # plan_machine's slices
        if n_ranks == 1:
            reasons.append(f"No other training process uses {name}, so its share is all {plural(len(units), 'core')}.")
        else:
            reasons.append(
                f"Its even share of the {plural(len(units), 'core')} of {name} among {n_ranks} training processes "
                f"is {plural(share, 'core')}."
            )
        pick = _candidates(units, share, need_units, need_cpus, claimed, hogs)
        reasons += pick.reasons
        held = sum(1 for u in units if u & claimed)
        if held:
            holders = ", ".join(str(o.pid) for o in others if o.training and _held(o) & pool)
            if not any(u & claimed for u in pick.cores):
                reasons.append(f"It avoids {plural(held, 'core')} held by other training processes ({holders}).")
            else:
                warnings.append(
                    f"Only {len(units) - held} cores are not held by other training processes ({holders}), fewer "
                    f"than {pick.size}: the suggestion overlaps them as little as it can."
                )
        chosen = _best_window(l3_of, pick.cores, pick.size, claimed, busy, current_cpus, tiles, tiles[position])
    cpus = union(chosen)
    reasons.append(f"Suggested: {plural(len(chosen), found.unit)}, {plural(len(cpus), 'CPU')} ({fmt_cpus(cpus)}).")
    if topology.l3_groups:
        reasons.append(_l3_sentence(topology, l3_of, chosen))
    kept = len(cpus & current_cpus)
    if kept:
        reasons.append(f"It keeps {kept} of the {len(current_cpus)} CPUs it ran on, so its caches stay warm.")
    if measured_need and need_cpus > len(cpus):
        warnings.append(
            f"It needs {plural(need_cpus, 'CPU')} but the suggestion has only {len(cpus)}: its domain has no more."
        )
    elif not measured_need and demand_cpus > 0 and math.ceil(demand_cpus - 1e-9) > len(cpus):
        warnings.append(f"Its busy threads want {demand_cpus:.1f} CPUs but the suggestion has only {len(cpus)}.")
    movers = [o for o in busy if o.cpus & cpus]
    move_off = tuple(sorted({o.pid for o in movers}))
    stuck: tuple[int, ...] = ()
    if move_off and allowed <= cpus:
        # Every CPU it may use is in the suggestion: there is nowhere to move the others to.
        warnings.append(
            f"Other busy processes ({', '.join(map(str, move_off))}) share CPUs {fmt_cpus(cpus)}, every CPU it may "
            "use: there is nowhere to move them, so isolation cannot help here."
        )
        stuck, move_off = move_off, ()
    elif move_off:
        named = ", ".join(
            f"{o.pid} ({term_safe(o.name)}, {o.cpu_percent:.0f}%)" for o in sorted(movers, key=lambda o: o.pid)
        )
        warnings.append(
            f"This only helps if {named} move{'s' if len(move_off) == 1 else ''} off CPUs {fmt_cpus(cpus)} "
            "(pin --isolate): narrowing a job's mask while other busy threads stayed on its cores made it slower "
            "in the measured case (904 vs 1198 samples/s)."
        )
    return Suggestion(
        cpus=cpus,
        numa_node=topology.home_node_of(cpus),
        reasons=tuple(reasons),
        warnings=tuple(dict.fromkeys(warnings)),
        move_off=move_off,
        stuck=stuck,
    )


@dataclass(frozen=True, slots=True)
class _Candidates:
    """The cores a suggestion is chosen among, and how many of them it takes (``_candidates``)."""

    cores: Sequence[CpuSet]  # in L3 order
    size: int  # cores in the window
    reasons: tuple[str, ...]  # why these and that many, when not simply the share


def _candidates(
    units: Sequence[CpuSet],
    share: int,
    need_units: int,
    need_cpus: int,
    claimed: CpuSet,
    hogs: Sequence[Occupant],
) -> _Candidates:
    """Which cores to choose among, and how many (rules 3 and 4): the share from cores
    free of training processes and busy tenants; else all the free ones when they cover
    the demand; else a window sized to the demand (fewest tenants to move), taken from
    cores no training process holds when there are enough."""
    unclaimed = [u for u in units if not u & claimed]
    free = [u for u in unclaimed if not any(h.cpus & u for h in hogs)]
    avoided = len(unclaimed) - len(free)
    if len(free) >= share:
        why = (f"It avoids {plural(avoided, 'core')} where other busy processes run.",) if avoided else ()
        return _Candidates(free, share, why)
    if need_units and len(free) >= need_units:
        why = (
            f"Other busy processes leave {plural(len(free), 'core')} free, enough for its demand of {need_cpus} CPUs, "
            "so the suggestion keeps to them.",
        )
        return _Candidates(free, len(free), why)
    size = min(share, need_units) if need_units else share
    why = ()
    if size < share:
        why = (
            f"Fewer than {size} cores are free of other busy processes, so the suggestion is sized to its demand "
            f"({need_cpus} CPUs, {size} cores) to leave as few processes to move as possible.",
        )
    return _Candidates(unclaimed if len(unclaimed) >= size else units, size, why)


def _held(occupant: Occupant) -> CpuSet:
    """The CPUs a training process holds: its mask when pinned, and where its busy threads ran."""
    return (occupant.pinned_cpus or EMPTY) | occupant.cpus


class _WindowScore(NamedTuple):
    """How a window of ``_best_window`` fares, lower better in every field. Windows are
    compared by these fields in this order, the first that differs deciding (a NamedTuple
    compares as the tuple of its fields): the field order is the order of the rules."""

    held: int  # cores held by other training processes (rule 3)
    movers: int  # busy processes whose threads run on its CPUs, which would have to move off
    load: float  # their load on its CPUs (percent of a CPU, rounded to 1e-6)
    l3_beyond_slot: int  # L3 groups it spans beyond as many as this rank's own slice spans (rule 5)
    minus_kept: int  # minus the CPUs the process ran on that it keeps (rule 6)
    tiles: int  # plan_machine's slices it touches
    minus_in_slot: int  # minus its CPUs in this rank's own slice
    first_cpu: int  # its lowest CPU


def _best_window(
    l3_of: dict[int, int],
    candidates: Sequence[CpuSet],
    size: int,
    claimed: CpuSet,
    busy: Sequence[Occupant],
    current: CpuSet,
    tiles: Sequence[CpuSet],
    slot: CpuSet,
) -> Sequence[CpuSet]:
    """The run of ``size`` consecutive candidates (L3 order) that is best by rules 3, 5
    and 6: fewest training-held cores, fewest busy processes to move and least of their
    load, fewest L3 groups beyond those of this rank's own slice (a balanced slice may
    straddle two), most CPUs kept; then, so that suggestions for the ranks of a domain keep
    tiling it, fewest of ``plan_machine``'s slices touched and most of this rank's own
    slice; last, the lowest CPUs."""
    slot_span = len({l3_of.get(cpu, -1) for cpu in slot})

    def score(start: int) -> _WindowScore:
        window = candidates[start : start + size]
        cpus = union(window)
        movers = [o for o in busy if o.cpus & cpus]
        load = sum(o.cpu_percent * len(o.cpus & cpus) / len(o.cpus) for o in movers)
        return _WindowScore(
            held=sum(1 for u in window if u & claimed),
            movers=len(movers),
            load=round(load, 6),
            l3_beyond_slot=max(0, l3_span(l3_of, window) - slot_span),
            minus_kept=-len(cpus & current),
            tiles=sum(1 for tile in tiles if tile & cpus),
            minus_in_slot=-len(cpus & slot),
            first_cpu=min(cpus),
        )

    starts = range(len(candidates) - size + 1)
    assert starts, "no window: size exceeds the candidates"
    best = min(starts, key=score)  # the first of equal scores, the lowest start
    return candidates[best : best + size]


__all__ = [
    "MOVE_OFF_MIN_CPU_PERCENT",
    "CoreUnits",
    "Domain",
    "MachinePlan",
    "Occupant",
    "RankPlan",
    "Suggestion",
    "allowed_pool",
    "core_units",
    "even_split",
    "gpu_domain",
    "gpu_indexes",
    "plan_machine",
    "suggest",
]
