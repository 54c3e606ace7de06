"""Placements to try around a suggestion, for a closed loop that measures each (``affmon
tune``): the suggestion itself, wider, narrower, with and without moving the others off, the
main loop and the DataLoader workers on separate cores, the whole domain. Pure.

Each obeys the planner's rules: it is made of the domain's cores (whole cores inside the
job's allowed CPUs, in L3 order, ``domains.core_units``), so a physical core is never split
between the job and the others it moves off; isolation is offered only where CPUs are left
for the others to go to.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from affmon.core.model.cpuset import CpuSet
from affmon.core.model.domains import core_units, fmt_cpus, plural, union
from affmon.core.model.topology import Topology


@dataclass(frozen=True, slots=True)
class Placement:
    """One placement: the job on ``cpus``; ``isolate``: the other busy processes moved off
    them. When ``main_cpus`` and ``worker_cpus`` are set, the root process (main loop and
    its helper threads) goes on the first and its DataLoader workers on the second."""

    cpus: CpuSet
    isolate: bool
    description: str
    main_cpus: CpuSet | None = None
    worker_cpus: CpuSet | None = None


def placements(
    topology: Topology,
    domain: CpuSet,
    suggested: CpuSet,
    *,
    main_threads: int,
    others_busy: bool,
) -> list[Placement]:
    """The suggestion first, then its variations within ``domain``. ``main_threads``: the
    root's threads that need a CPU (for the split); ``others_busy``: whether other busy
    processes hold CPUs of the domain (isolation then means something)."""
    units = list(core_units(topology, domain).units)
    mine = [u for u in units if u & suggested]
    rest = [u for u in units if not u & suggested]
    if not mine:
        return []
    step = max(1, len(mine) // 4)
    first = units.index(mine[0])
    # The nearest cores first, so a wider set stays as contiguous (L3 order) as it can.
    nearby = sorted(rest, key=lambda u: (abs(units.index(u) - first), units.index(u)))
    shapes: list[tuple[Sequence[CpuSet], str]] = [(mine, "the suggestion")]
    if rest:
        shapes.append(([*mine, *nearby[:step]], f"wider by {plural(min(step, len(rest)), 'core')}"))
    if len(mine) > 1:
        shapes.append((mine[: len(mine) - min(step, len(mine) - 1)], f"narrower by {plural(step, 'core')}"))
    found: list[Placement] = []
    for shape, name in shapes:
        cpus = union(shape)
        what = f"{name}: {plural(len(shape), 'core')}, CPUs {fmt_cpus(cpus)}"
        if others_busy and domain - cpus:
            found.append(Placement(cpus, True, f"{what}, the other busy processes moved off"))
        found.append(Placement(cpus, False, f"{what}, the others left where they are"))
    if len(mine) >= 2:
        own = min(len(mine) - 1, max(1, math.ceil(main_threads / max(len(u) for u in mine))))
        main, workers = union(mine[:own]), union(mine[own:])
        found.append(
            Placement(
                union(mine),
                others_busy and bool(domain - union(mine)),
                f"the suggestion split: main loop on CPUs {fmt_cpus(main)}, DataLoader workers on {fmt_cpus(workers)}",
                main_cpus=main,
                worker_cpus=workers,
            )
        )
    whole = union(units)
    if whole != union(mine):
        found.append(Placement(whole, False, f"all {plural(len(units), 'core')} of its domain, shared with the others"))
    unique: dict[tuple[CpuSet, bool, CpuSet | None], Placement] = {}
    for p in found:
        unique.setdefault((p.cpus, p.isolate, p.main_cpus), p)
    return list(unique.values())
