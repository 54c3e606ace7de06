"""The machine as affmon plans against it: CPUs, cores, caches, NUMA nodes, GPUs.

A ``Topology`` is built by one of the readers in ``affmon.collect`` (live or recorded
sysfs, hwloc XML) and is immutable afterwards. All CPU ids are OS ids. Lists are kept
sorted the way ``affmon topology --json`` prints them, so two readers of the same
machine produce equal values.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
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
    """A NUMA node by its real (possibly sparse) id; ``cpus`` may be empty (GPU/HBM memory)."""

    id: int
    cpus: CpuSet


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
    (sysfs ``numa_node`` = -1): never read it as node 0. ``local_cpus`` None = unknown."""

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
        """Sort every list the canonical way and index CPUs to their nodes."""
        nodes = tuple(sorted(numa_nodes, key=lambda n: n.id))
        # Where hwloc gives two nodes the same CPUs (KNL's DRAM and MCDRAM, a GPU's
        # memory node), a CPU belongs to the lowest id: the DRAM node, as Linux numbers them.
        node_of_cpu = {cpu: node.id for node in reversed(nodes) for cpu in node.cpus}
        return Topology(
            source=source,
            online_cpus=frozenset(online_cpus),
            allowed_cpus=frozenset(allowed_cpus),
            numa_nodes=nodes,
            packages=tuple(sorted(packages, key=lambda p: p.id)),
            cores=tuple(sorted(cores, key=lambda c: _first(c.cpus))),
            l3_groups=tuple(sorted(l3_groups, key=lambda g: _first(g.cpus))),
            gpus=tuple(sorted(gpus, key=lambda g: g.pci_bus_id)),
            _node_of_cpu=node_of_cpu,
        )

    def node_of_cpu(self, cpu: int) -> int | None:
        return self._node_of_cpu.get(cpu)

    def nodes_of(self, cpus: Iterable[int]) -> tuple[int, ...]:
        """Sorted ids of the NUMA nodes holding any of ``cpus``."""
        found = {self._node_of_cpu[c] for c in cpus if c in self._node_of_cpu}
        return tuple(sorted(found))

    def node(self, node_id: int) -> NumaNode | None:
        return next((n for n in self.numa_nodes if n.id == node_id), None)

    def gpu(self, pci_bus_id: str) -> Gpu | None:
        wanted = normalize_bus_id(pci_bus_id)
        return next((g for g in self.gpus if g.pci_bus_id == wanted), None)

    @property
    def cpu_numa_nodes(self) -> tuple[NumaNode, ...]:
        """The nodes that hold CPUs (GPU-memory and HBM-only nodes left out)."""
        return tuple(n for n in self.numa_nodes if n.cpus)

    def to_json(self) -> dict[str, Any]:
        """The exact shape ``affmon topology --json`` prints."""
        return {
            "source": self.source,
            "online_cpus": format_cpulist(self.online_cpus),
            "allowed_cpus": format_cpulist(self.allowed_cpus),
            "numa_nodes": [{"id": n.id, "cpus": format_cpulist(n.cpus)} for n in self.numa_nodes],
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
