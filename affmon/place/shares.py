"""How a rank's CPUs are shared between its main process and its DataLoader workers. Pure,
and light to import: a DataLoader worker started by spawn loads it.

``split_for_workers`` lays ``rules.threads.thread_budget`` out on the rank's cores, in the
planner's order (L3 group, then first CPU): a whole core for each DataLoader worker, the
rest of the rank for the main process's intra-op pool. A worker gets a contiguous run of
its cores (``worker_share``): neighbours in that order share an L3 cache where the machine
has several.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from affmon.core.model.cpuset import CpuSet, format_cpulist
from affmon.core.model.domains import even_split, l3_index, plural, union
from affmon.core.model.topology import Topology
from affmon.core.rules.threads import thread_budget


def core_groups(topology: Topology, cpus: CpuSet) -> tuple[CpuSet, ...]:
    """``cpus`` grouped by physical core (the part of each core inside ``cpus``; a CPU no
    core lists is a core of its own), in the planner's order: L3 group, then first CPU."""
    groups = [core.cpus & cpus for core in topology.cores if core.cpus & cpus]
    listed = union(groups)
    groups += [frozenset({cpu}) for cpu in sorted(cpus - listed)]
    l3_of = l3_index(topology)
    return tuple(sorted(groups, key=lambda g: (l3_of.get(min(g), len(topology.l3_groups)), min(g))))


@dataclass(frozen=True, slots=True)
class WorkerSplit:
    """The rank's CPUs shared out: ``worker_cores``, the cores the DataLoader workers run
    on (in the planner's order), ``worker_cpus`` their CPUs, ``main_cpus`` the rank's CPUs
    no worker runs on (every CPU of the rank where the workers have them all), and
    ``main_threads`` the main process's intra-op threads (``thread_budget``). With no
    worker count (None) or none (0), the workers may use every core of the rank."""

    main_threads: int
    main_cpus: CpuSet
    worker_cpus: CpuSet
    worker_cores: tuple[CpuSet, ...]


def split_for_workers(topology: Topology, cpus: CpuSet, workers: int | None) -> WorkerSplit:
    """The workers get the rank's last ``workers`` cores, a whole core each (all the cores
    where there are fewer); the main process keeps its mask, the whole rank. Its intra-op
    budget, the rank's CPUs less one per worker, is what the first cores hold and, with
    SMT, the sibling that each one-thread worker leaves free: of 8 cores of 2 CPUs, 6
    workers get the last 6 cores, one each, and the main pool 10 threads."""
    cores = core_groups(topology, cpus)
    budget = thread_budget(len(cpus), workers or 0)
    if not workers:
        return WorkerSplit(budget.main_threads, cpus, cpus, cores)
    mine = cores[-workers:]
    taken = union(mine)
    return WorkerSplit(budget.main_threads, (cpus - taken) or cpus, taken, mine)


def too_few_cores(topology: Topology, cpus: CpuSet, workers: int | None) -> str | None:
    """Why ``cpus`` cannot hold the rank and its workers (None when they can): fewer whole
    or partial cores than DataLoader workers."""
    if not workers:
        return None
    cores = len(core_groups(topology, cpus))
    if cores >= workers:
        return None
    return (
        f"CPUs {format_cpulist(cpus)} hold {plural(cores, 'core')}, fewer than the {workers} DataLoader workers: "
        "affmon.place plans a core per worker at least"
    )


def worker_share(cores: Sequence[CpuSet], worker_id: int, num_workers: int) -> CpuSet:
    """The CPUs of worker ``worker_id`` of ``num_workers``: a contiguous run of ``cores``,
    the runs as even as ``even_split`` makes them, where there are at least as many cores
    as workers; every one of ``cores`` otherwise (the workers share them)."""
    count = max(1, num_workers)
    sizes = even_split(len(cores), count)
    if sizes is None:
        return union(cores)
    index = worker_id % count
    start = sum(sizes[:index])
    return union(cores[start : start + sizes[index]])
