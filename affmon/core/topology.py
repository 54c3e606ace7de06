"""The machine as affmon plans against it: CPUs, cores, caches, NUMA nodes, GPUs.

A ``Topology`` is built by one of the readers in ``affmon.collect`` (live or recorded
sysfs, hwloc XML) and is immutable afterwards. All CPU ids are OS ids. Lists are kept
sorted the way ``affmon topology --json`` prints them, so two readers of the same
machine produce equal values.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from affmon.core.cpuset import EMPTY, CpuSet, format_cpulist

NVIDIA_VENDOR_ID = 0x10DE
AMD_VENDOR_ID = 0x1002
GPU_VENDORS = {NVIDIA_VENDOR_ID: "nvidia", AMD_VENDOR_ID: "amd"}
# PCI class (base class 0x03, display controller) subclasses that are GPUs: VGA, 3D,
# other. The vendor filter above is what leaves out the BMC's VGA chip (Matrox, ASPEED).
GPU_PCI_CLASSES = {0x0300, 0x0302, 0x0380}


# Server boards' onboard display chips that carry a GPU vendor's id but are the BMC's
# or the console's VGA, never a compute GPU: (vendor, device).
ONBOARD_VGA = frozenset({(AMD_VENDOR_ID, 0x515E)})  # ATI ES1000 (Radeon 7000 core)


def gpu_vendor(vendor_id: int, pci_class: int, device_id: int | None = None) -> str | None:
    """``"nvidia"``/``"amd"`` when a PCI function (16-bit class code) is a GPU, else None."""
    if pci_class not in GPU_PCI_CLASSES or (vendor_id, device_id) in ONBOARD_VGA:
        return None
    return GPU_VENDORS.get(vendor_id)


def normalize_bus_id(bus_id: str) -> str:
    """Sysfs spelling of a PCI address: NVML's ``00000000:3B:00.0`` -> ``0000:3b:00.0``."""
    text = bus_id.strip().lower()
    domain, sep, rest = text.partition(":")
    if not sep or not rest:
        return text
    try:
        return f"{int(domain, 16):04x}:{rest}"
    except ValueError:
        return text


@dataclass(frozen=True, slots=True)
class NumaNode:
    """A NUMA node by its real (possibly sparse) id.

    ``memory_only``: the node has no CPU of its own (a GPU's memory on POWER9 and Grace
    Hopper, KNL's MCDRAM, HBM, CXL memory). Linux gives such a node no CPUs, so ``cpus``
    is empty, whoever read it: hwloc gives it the CPUs of the object it hangs from, which
    is its locality, not CPUs it owns. Threads never run "on" it, so it is never a
    rank's home node, a ``--membind`` target or the node a GPU is local to. A node that
    is not memory-only may still have empty ``cpus`` here (its CPUs offline, or outside
    the CPUs an hwloc file kept)."""

    id: int
    cpus: CpuSet
    memory_only: bool = False

    def __post_init__(self) -> None:
        if self.memory_only and self.cpus:
            raise ValueError(f"memory-only NUMA node {self.id} cannot hold CPUs")


@dataclass(frozen=True, slots=True)
class Package:
    """A physical socket (``physical_package_id``)."""

    id: int
    cpus: CpuSet


@dataclass(frozen=True, slots=True)
class Core:
    """A physical core: its online SMT siblings."""

    package: int
    cpus: CpuSet


@dataclass(frozen=True, slots=True)
class CacheGroup:
    """CPUs sharing the highest cache level of the machine (normally L3; ``level`` says)."""

    level: int
    cpus: CpuSet


@dataclass(frozen=True, slots=True)
class Gpu:
    """A GPU found on the PCI bus. ``numa_node`` None means the firmware did not say
    (sysfs ``numa_node`` = -1): never read it as node 0. ``local_cpus`` None = unknown.
    In a built ``Topology`` ``numa_node`` never names a memory-only node (see
    ``Topology.gpu_home_node``)."""

    pci_bus_id: str
    vendor: str
    numa_node: int | None
    local_cpus: CpuSet | None


@dataclass(frozen=True, slots=True)
class Topology:
    source: str  # "sysfs" or "hwloc-xml"
    online_cpus: CpuSet
    allowed_cpus: CpuSet
    numa_nodes: tuple[NumaNode, ...]
    packages: tuple[Package, ...]
    cores: tuple[Core, ...]
    l3_groups: tuple[CacheGroup, ...]
    gpus: tuple[Gpu, ...]
    _node_of_cpu: dict[int, int] = field(default_factory=dict, compare=False, repr=False)

    @staticmethod
    def build(
        *,
        source: str,
        online_cpus: Iterable[int],
        allowed_cpus: Iterable[int],
        numa_nodes: Iterable[NumaNode],
        packages: Iterable[Package],
        cores: Iterable[Core],
        l3_groups: Iterable[CacheGroup],
        gpus: Iterable[Gpu],
    ) -> Topology:
        """Sort every list the canonical way and index CPUs to their nodes.

        A GPU whose ``numa_node`` names a memory-only node (its own memory, as NVML
        reports it on Grace Hopper) is given the node its local CPUs are on instead
        (``gpu_home_node``), so no reader or recording makes a memory-only node a home."""
        nodes = tuple(sorted(numa_nodes, key=lambda n: n.id))
        # Readers give every CPU one node; where a file gives two nodes the same CPUs, a
        # CPU belongs to the lowest id. Memory-only nodes hold no CPUs, so none is indexed.
        node_of_cpu = {cpu: node.id for node in reversed(nodes) for cpu in node.cpus}
        topology = Topology(
            source=source,
            online_cpus=frozenset(online_cpus),
            allowed_cpus=frozenset(allowed_cpus),
            numa_nodes=nodes,
            packages=tuple(sorted(packages, key=lambda p: p.id)),
            cores=tuple(sorted(cores, key=lambda c: _first(c.cpus))),
            l3_groups=tuple(sorted(l3_groups, key=lambda g: _first(g.cpus))),
            gpus=(),
            _node_of_cpu=node_of_cpu,
        )
        homed = (replace(g, numa_node=topology.gpu_home_node(g.numa_node, g.local_cpus)) for g in gpus)
        return replace(topology, gpus=tuple(sorted(homed, key=lambda g: g.pci_bus_id)))

    def node_of_cpu(self, cpu: int) -> int | None:
        return self._node_of_cpu.get(cpu)

    def nodes_of(self, cpus: Iterable[int]) -> tuple[int, ...]:
        """Sorted ids of the NUMA nodes holding any of ``cpus`` (never a memory-only one)."""
        found = {self._node_of_cpu[c] for c in cpus if c in self._node_of_cpu}
        return tuple(sorted(found))

    def home_node_of(self, cpus: Iterable[int]) -> int | None:
        """The one node holding every CPU of ``cpus``: the node to bind their memory to.
        None when ``cpus`` is empty, spans several nodes, or has a CPU in no node. Never
        a memory-only node: those hold no CPUs."""
        found = {self._node_of_cpu.get(c) for c in cpus}
        if len(found) != 1:
            return None
        return found.pop()

    def gpu_home_node(self, reported: int | None, local_cpus: CpuSet | None) -> int | None:
        """The node a GPU is local to, from the node its source reported and its local CPUs.

        A reported node that is memory-only is the GPU's own memory (NVML's
        ``nvmlDeviceGetNumaNodeId`` on Grace Hopper names it, and POWER9's GPU memory
        nodes are such nodes): the answer is then the node holding all of the GPU's
        local CPUs (its CPU affinity), None when they span nodes or are unknown. Any
        other reported node, or None (unknown: never guessed), is kept as it is."""
        node = None if reported is None else self.node(reported)
        if node is None or not node.memory_only:
            return reported
        return None if local_cpus is None else self.home_node_of(local_cpus & self.online_cpus)

    def node(self, node_id: int) -> NumaNode | None:
        return next((n for n in self.numa_nodes if n.id == node_id), None)

    def gpu(self, pci_bus_id: str) -> Gpu | None:
        wanted = normalize_bus_id(pci_bus_id)
        return next((g for g in self.gpus if g.pci_bus_id == wanted), None)

    @property
    def cpu_numa_nodes(self) -> tuple[NumaNode, ...]:
        """The nodes that hold CPUs: those threads run on (memory-only nodes left out)."""
        return tuple(n for n in self.numa_nodes if n.cpus)

    @property
    def memory_only_nodes(self) -> tuple[NumaNode, ...]:
        """The nodes with memory and no CPU of their own (GPU memory, MCDRAM, HBM, CXL)."""
        return tuple(n for n in self.numa_nodes if n.memory_only)

    def to_json(self) -> dict[str, Any]:
        """The exact shape ``affmon topology --json`` prints. A node carries
        ``"memory_only": true`` only when it is memory-only, so machines without such
        nodes print (and record) the same shape as before the flag existed."""
        return {
            "source": self.source,
            "online_cpus": format_cpulist(self.online_cpus),
            "allowed_cpus": format_cpulist(self.allowed_cpus),
            "numa_nodes": [_node_json(n) for n in self.numa_nodes],
            "packages": [{"id": p.id, "cpus": format_cpulist(p.cpus)} for p in self.packages],
            "cores": [{"package": c.package, "cpus": format_cpulist(c.cpus)} for c in self.cores],
            "l3_groups": [{"cpus": format_cpulist(g.cpus)} for g in self.l3_groups],
            "gpus": [
                {
                    "pci_bus_id": g.pci_bus_id,
                    "vendor": g.vendor,
                    "numa_node": g.numa_node,
                    "local_cpus": None if g.local_cpus is None else format_cpulist(g.local_cpus),
                }
                for g in self.gpus
            ],
        }


def _node_json(node: NumaNode) -> dict[str, Any]:
    data: dict[str, Any] = {"id": node.id, "cpus": format_cpulist(node.cpus)}
    if node.memory_only:
        data["memory_only"] = True
    return data


def _first(cpus: CpuSet) -> int:
    return min(cpus) if cpus else -1


__all__ = [
    "EMPTY",
    "CacheGroup",
    "Core",
    "Gpu",
    "NumaNode",
    "Package",
    "Topology",
    "gpu_vendor",
    "normalize_bus_id",
]
