"""Where a GPU's ranks belong and the units they are cut from: the planner's rules 1
and 2 (a GPU's domain; whole physical cores, in L3 order) and the even split of a
domain's cores among its ranks, with the wording the planner's reasons share. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from affmon.core.model.cpuset import EMPTY, CpuSet, format_cpulist
from affmon.core.model.topology import NumaNode, Topology, normalize_bus_id
from affmon.core.text import term_safe


@dataclass(frozen=True, slots=True)
class Domain:
    """Where a GPU's ranks belong: ``cpus`` is its local CPUs that are allowed, or the
    allowed CPUs when ``local`` is False (locality unknown, or nothing local allowed)."""

    cpus: CpuSet
    name: str  # "NUMA node 1", "CPUs 48-55,112-119", "the allowed CPUs 0-15"
    numa_node: int | None
    local: bool
    reasons: tuple[str, ...]
    warnings: tuple[str, ...]


class AllowedPool(NamedTuple):
    """The CPUs a process may use (``allowed_pool``)."""

    cpus: CpuSet
    warnings: tuple[str, ...]  # why they are not the ones asked for, when so


def allowed_pool(topology: Topology, allowed_cpus: CpuSet | None) -> AllowedPool:
    """The online CPUs a process may use: its cgroup's, else the topology's."""
    online = topology.online_cpus
    base = (topology.allowed_cpus & online) or online
    if allowed_cpus is None:
        return AllowedPool(base, ())
    mine = allowed_cpus & online
    if mine:
        return AllowedPool(mine, ())
    return AllowedPool(
        base,
        (
            f"Its allowed CPUs ({fmt_cpus(allowed_cpus)}) hold no online CPU, so the plan uses the machine's allowed "
            f"CPUs {fmt_cpus(base)}.",
        ),
    )


def gpu_domain(topology: Topology, bus_id: str, allowed: CpuSet) -> Domain:
    """The domain of one GPU within ``allowed`` (rule 1)."""
    shown = term_safe(normalize_bus_id(bus_id))  # a bus id from an hwloc file or a recording is foreign text
    gpu = topology.gpu(bus_id)
    fallback = f"the allowed CPUs {fmt_cpus(allowed)}"
    if gpu is None:
        warning = f"GPU {shown} is not in the topology, so its locality is unknown: planning within {fallback}."
        return Domain(allowed, fallback, None, False, (), (warning,))
    online = topology.online_cpus
    local = None if gpu.local_cpus is None else gpu.local_cpus & online
    node = None if gpu.numa_node is None else topology.node(gpu.numa_node)
    node_cpus = EMPTY if node is None else node.cpus & online
    node_id: int | None
    if node is not None and node_cpus:
        node_id = node.id
        if local and local < node_cpus:
            cpus, name = local, f"CPUs {fmt_cpus(local)}"
            where = f"CPUs {fmt_cpus(local)}, {cache_phrase(topology, local)} of NUMA node {node.id}"
        else:
            cpus, name = node_cpus, f"NUMA node {node.id}"
            where = f"NUMA node {node.id} (CPUs {fmt_cpus(node_cpus)})"
    elif local and local != online:
        nodes = topology.nodes_of(local)
        node_id = nodes[0] if len(nodes) == 1 else None
        cpus, name = local, f"CPUs {fmt_cpus(local)}"
        where = f"CPUs {fmt_cpus(local)} ({nodes_phrase(nodes)}; the firmware gives no NUMA node)"
    else:
        known = "no local CPU list" if not local else f"local CPUs {fmt_cpus(local)}, the whole machine"
        text = (
            f"GPU {shown}'s locality is unknown (no NUMA node and {known}): planning within {fallback} "
            "instead of guessing node 0."
        )
        if len(topology.cpu_numa_nodes) == 1:  # one node: nothing to get wrong, so a reason
            reason = (
                f"GPU {shown}'s NUMA node is unknown ({known}), but the machine has a single NUMA node: "
                f"planning within {fallback}."
            )
            return Domain(allowed, fallback, None, False, (reason,), ())
        return Domain(allowed, fallback, None, False, (), (text,))
    reason = f"GPU {shown} is local to {where}."
    pool = cpus & allowed
    if not pool:
        nearest = None if node_id is None else topology.nearest_cpu_node(node_id, within=allowed)
        if node_id is not None and nearest is not None:  # the distances choose among the nodes it may use
            near = (topology.node(nearest) or NumaNode(nearest, EMPTY)).cpus & allowed & online
            warning = (
                f"None of GPU {shown}'s local CPUs is allowed here (allowed: {fmt_cpus(allowed)}): planning on "
                f"NUMA node {nearest} (CPUs {fmt_cpus(near)}), the nearest to its node {node_id} that it may use "
                f"(distance {topology.distance(node_id, nearest)} against {topology.distance(node_id, node_id)})."
            )
            return Domain(near, f"NUMA node {nearest} (its allowed part)", nearest, False, (reason,), (warning,))
        warning = (
            f"None of GPU {shown}'s local CPUs is allowed here (allowed: {fmt_cpus(allowed)}), "
            f"so it cannot run near its GPU: planning within {fallback}."
        )
        return Domain(allowed, fallback, node_id, False, (reason,), (warning,))
    reasons = [reason]
    if pool != cpus:
        reasons.append(
            f"{len(cpus - pool)} of those CPUs ({fmt_cpus(cpus - pool)}) are not allowed, leaving {len(pool)} "
            f"({fmt_cpus(pool)})."
        )
        name = f"{name} (its allowed part)"
    return Domain(pool, name, node_id, True, tuple(reasons), ())


# --------------------------------------------------------------------------------------
# Cores in L3 order, and shares of them


@dataclass(frozen=True, slots=True)
class CoreUnits:
    """The pool's cores (the planner's units) in L3 order, with what was left out."""

    units: tuple[CpuSet, ...]
    unit: str  # "whole core", or "partial core" when no core lies wholly in the pool
    reasons: tuple[str, ...]
    warnings: tuple[str, ...]


def core_units(topology: Topology, pool: CpuSet) -> CoreUnits:
    """Whole cores inside ``pool`` ordered by L3 group then first CPU (rules 2 and 5).
    Cores partly outside the pool are dropped; if that leaves none, their parts are used."""
    whole: list[CpuSet] = []
    partial: list[CpuSet] = []
    covered: set[int] = set()
    for core in topology.cores:
        inside = core.cpus & pool
        if inside:
            covered |= inside
            (whole if inside == core.cpus else partial).append(inside)
    whole += [frozenset({cpu}) for cpu in sorted(pool - covered)]  # CPUs no core lists
    reasons: list[str] = []
    warnings: list[str] = []
    units = whole
    if not whole and partial:
        units = partial
        warnings.append(
            f"Every core of CPUs {fmt_cpus(pool)} is only partly allowed, so whole cores are impossible: "
            f"using the {len(partial)} cores' allowed CPUs."
        )
    elif partial:
        reasons.append(
            f"Left out so that no core is split: {plural(len(partial), 'core')} only partly inside "
            f"CPUs {fmt_cpus(pool)} "
            f"(CPUs {fmt_cpus(union(partial))})."
        )
    l3_of = l3_index(topology)
    units.sort(key=lambda u: (l3_of.get(min(u), len(topology.l3_groups)), min(u)))
    unit = "whole core" if units is whole else "partial core"
    return CoreUnits(tuple(units), unit, tuple(reasons), tuple(warnings))


def even_split(n_units: int, n_ranks: int) -> list[int] | None:
    """Shares of ``n_units`` for ``n_ranks`` ranks, the remainder to the first ones
    (torch ``exclusive``); None when there are fewer units than ranks."""
    k, extra = divmod(n_units, n_ranks)
    if k == 0:
        return None
    return [k + 1] * extra + [k] * (n_ranks - extra)


def slices(units: Sequence[CpuSet], sizes: Sequence[int]) -> list[Sequence[CpuSet]]:
    """Consecutive runs of ``units`` of the given sizes: the ranks' contiguous shares."""
    runs: list[Sequence[CpuSet]] = []
    start = 0
    for size in sizes:
        runs.append(units[start : start + size])
        start += size
    return runs


def l3_index(topology: Topology) -> dict[int, int]:
    return {cpu: i for i, group in enumerate(topology.l3_groups) for cpu in group.cpus}


def l3_span(l3_of: dict[int, int], units: Iterable[CpuSet]) -> int:
    return len({l3_of.get(min(u), -1) for u in units})


def union(units: Iterable[CpuSet]) -> CpuSet:
    """The union of CPU sets, each distinct set once (many threads share one mask)."""
    return EMPTY.union(*set(units))


# --------------------------------------------------------------------------------------
# plan_machine


def gpu_indexes(topology: Topology) -> dict[str, int]:
    """Each GPU's index among the GPUs of its vendor sorted by bus id (NVML, ROCm order)."""
    seen: dict[str, int] = {}
    indexes: dict[str, int] = {}
    for gpu in topology.gpus:  # sorted by bus id
        indexes[gpu.pci_bus_id] = seen.get(gpu.vendor, 0)
        seen[gpu.vendor] = indexes[gpu.pci_bus_id] + 1
    return indexes


# --------------------------------------------------------------------------------------
# Wording


def plural(count: int, word: str) -> str:
    """``1 core``, ``2 cores``; ``2 processes``."""
    if count == 1:
        return f"{count} {word}"
    return f"{count} {word}es" if word.endswith(("s", "sh", "ch", "x")) else f"{count} {word}s"


def fmt_cpus(cpus: Iterable[int]) -> str:
    text = format_cpulist(cpus)
    return text or "none"


def nodes_phrase(nodes: Sequence[int]) -> str:
    if not nodes:
        return "no NUMA node"
    if len(nodes) == 1:
        return f"NUMA node {nodes[0]}"
    return f"NUMA nodes {', '.join(map(str, nodes))}"


def cache_phrase(topology: Topology, cpus: CpuSet) -> str:
    groups = [g for g in topology.l3_groups if g.cpus & cpus]
    if not groups:
        return "no shared cache"
    kind = f"L{groups[0].level}"
    if union(g.cpus for g in groups) == cpus:
        return f"one {kind} group" if len(groups) == 1 else f"{len(groups)} {kind} groups"
    return f"part of {len(groups)} {kind} group{'s' if len(groups) > 1 else ''}"
