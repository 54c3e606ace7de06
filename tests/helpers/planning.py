"""Topologies for the core-set planner's tests: the recorded hwloc XML machines, machines
built by hand, and ``suggest`` for a rank of g4dnmetal's GPU 2 among other tenants."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from affmon.collect.hwloc_xml import read_hwloc_xml
from affmon.core.model.cpuset import CpuSet, parse_cpulist
from affmon.core.model.topology import CacheGroup, Core, Gpu, NumaNode, Package, Topology
from affmon.core.plan.planner import Occupant, Suggestion, suggest

XML_DIR = Path(__file__).parent.parent / "fixtures" / "hwloc_xml"


def cpus(text: str) -> CpuSet:
    return parse_cpulist(text)


def xml(name: str) -> Topology:
    return read_hwloc_xml(str(XML_DIR / name))


def small_machine(
    *, nodes: dict[int, str], smt: int, gpus: list[Gpu], allowed: str | None = None, l3: list[str] | None = None
) -> Topology:
    """A hand-built machine: ``smt`` siblings per core, numbered like Linux (0..n-1 then n..)."""
    node_cpus = {n: cpus(text) for n, text in nodes.items()}
    online = frozenset().union(*node_cpus.values())
    n_cores = len(online) // smt
    cores = [Core(0, frozenset(c + k * n_cores for k in range(smt))) for c in range(n_cores)]
    return Topology.build(
        source="test",
        online_cpus=online,
        allowed_cpus=online if allowed is None else cpus(allowed),
        numa_nodes=[NumaNode(n, c) for n, c in node_cpus.items()],
        packages=[Package(0, online)],
        cores=cores,
        l3_groups=[CacheGroup(3, cpus(t)) for t in (l3 or [])],
        gpus=gpus,
    )


# --------------------------------------------------------------------------------------
# suggest on g4dnmetal (node 0: GPUs 0-3, 24 cores with 2 threads each)

G4 = "mpibind-xml__g4dnmetal.xml"
NODE0_GPUS = ("0000:18:00.0", "0000:19:00.0", "0000:35:00.0", "0000:36:00.0")


def peer(pid: int, gpu: str, busy: str = "", pinned: str | None = None, percent: float = 0.0) -> Occupant:
    return Occupant(pid, "python", cpus(busy), percent, True, (gpu,), None if pinned is None else cpus(pinned))


def hog(pid: int, where: str, percent: float = 100.0) -> Occupant:
    return Occupant(pid, "stress", cpus(where), percent, False)


IDLE_PEERS = [peer(101, NODE0_GPUS[0]), peer(102, NODE0_GPUS[1]), peer(104, NODE0_GPUS[3])]


def suggest_g4(
    *,
    gpu_bus_ids: tuple[str, ...] = (NODE0_GPUS[2],),
    allowed_cpus: CpuSet | None = None,
    current_cpus: CpuSet = frozenset(),
    demand_cpus: float = 4.0,
    others: Sequence[Occupant] = (),
) -> Suggestion:
    """``suggest`` for the rank of g4dnmetal's GPU 2 (node 0, 24 cores with 2 threads each)."""
    return suggest(
        xml(G4),
        gpu_bus_ids=gpu_bus_ids,
        allowed_cpus=allowed_cpus,
        current_cpus=current_cpus,
        demand_cpus=demand_cpus,
        others=others,
    )
