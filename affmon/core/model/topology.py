"""The machine as affmon plans against it: CPUs, cores, caches, NUMA nodes (with their
memory and the distances between them), GPUs.

A ``Topology`` is built by one of the readers in ``affmon.collect`` (live or recorded
sysfs, hwloc XML) and is immutable afterwards. All CPU ids are OS ids. Lists are kept
sorted the way ``affmon topology --json`` prints them, so two readers of the same
machine produce equal values.

Node distances are the kernel's (ACPI SLIT or device tree) relative figures, as
``numactl -H`` prints them: 10 for a node to itself, larger for farther nodes. They are
a matrix over every node, memory-only ones included, or unknown as a whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from affmon.core.model.cpuset import EMPTY, CpuSet, format_cpulist

NVIDIA_VENDOR_ID = 0x10DE
AMD_VENDOR_ID = 0x1002
GPU_VENDORS = {NVIDIA_VENDOR_ID: "nvidia", AMD_VENDOR_ID: "amd"}
# PCI class (base class 0x03, display controller) subclasses that are GPUs: VGA, 3D,
# other. The vendor filter above is what leaves out the BMC's VGA chip (Matrox, ASPEED).
GPU_PCI_CLASSES = {0x0300, 0x0302, 0x0380}


# Server boards' onboard display chips that carry a GPU vendor's id but are the BMC's
# or the console's VGA, never a compute GPU: (vendor, device).
ONBOARD_VGA = frozenset({(AMD_VENDOR_ID, 0x515E)})  # ATI ES1000 (Radeon 7000 core)

# Linux keeps a node distance in one byte (``numa_distance`` on x86, arm64, RISC-V and
# LoongArch; POWER computes at most 160) and numbers at most 1,024 nodes (NODES_SHIFT is
# at most 10): a larger distance or matrix is not a machine's.
MAX_DISTANCE = 255
MAX_DISTANCE_NODES = 1024
# 4 PiB: what 52-bit physical addresses (x86-64 with 5-level paging, arm64 LPA) reach.
MAX_NODE_MEMORY_BYTES = 1 << 52


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
    the CPUs an hwloc file kept).

    ``memory_bytes``: the node's memory (sysfs ``MemTotal``, hwloc's ``local_memory``);
    None when the source does not say. A memory-less node (the NVIDIA driver keeps such
    nodes for MIG) has 0."""

    id: int
    cpus: CpuSet
    memory_only: bool = False
    memory_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.memory_only and self.cpus:
            raise ValueError(f"memory-only NUMA node {self.id} cannot hold CPUs")
        if self.memory_bytes is not None and not 0 <= self.memory_bytes <= MAX_NODE_MEMORY_BYTES:
            raise ValueError(f"NUMA node {self.id}: memory of {self.memory_bytes} bytes is not a node's")


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
    """``node_distances``: row i, column j is the distance from ``numa_nodes[i]`` to
    ``numa_nodes[j]`` (``distance`` looks it up by node id); None when unknown.
    ``gpus_known``: False when the source had no PCI bus to look at (a sysfs tree
    gathered without ``/sys/bus/pci``, an hwloc file exported without I/O objects):
    ``gpus`` is then empty because nothing was read, not because there are none.
    ``notes``: what the reader found unusable and left unknown, one line each, for the
    front end to say once (not compared, not recorded)."""

    source: str  # "sysfs" or "hwloc-xml"
    online_cpus: CpuSet
    allowed_cpus: CpuSet
    numa_nodes: tuple[NumaNode, ...]
    packages: tuple[Package, ...]
    cores: tuple[Core, ...]
    l3_groups: tuple[CacheGroup, ...]
    gpus: tuple[Gpu, ...]
    node_distances: tuple[tuple[int, ...], ...] | None = None
    gpus_known: bool = True
    notes: tuple[str, ...] = field(default=(), compare=False)
    _node_of_cpu: dict[int, int] = field(default_factory=dict, compare=False, repr=False)
    _node_index: dict[int, int] = field(default_factory=dict, compare=False, repr=False)

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
        node_distances: Sequence[Sequence[int]] | None = None,
        gpus_known: bool = True,
        notes: Iterable[str] = (),
    ) -> Topology:
        """Sort every list the canonical way and index CPUs to their nodes.

        ``node_distances`` rows and columns are in the order of the nodes' ids; a matrix
        that ``distance_problem`` refuses is a ``ValueError`` (readers check it first and
        leave the distances unknown, with a note).

        A GPU whose ``numa_node`` names a memory-only node (its own memory, as NVML
        reports it on Grace Hopper) is given the node its local CPUs are on instead
        (``gpu_home_node``), so no reader or recording makes a memory-only node a home."""
        nodes = tuple(sorted(numa_nodes, key=lambda n: n.id))
        # Readers give every CPU one node; where a file gives two nodes the same CPUs, a
        # CPU belongs to the lowest id. Memory-only nodes hold no CPUs, so none is indexed.
        node_of_cpu = {cpu: node.id for node in reversed(nodes) for cpu in node.cpus}
        ids = [n.id for n in nodes]
        distances = None
        if node_distances is not None:
            problem = distance_problem(ids, node_distances)
            if problem is not None:
                raise ValueError(problem)
            distances = tuple(tuple(row) for row in node_distances)
        topology = Topology(
            source=source,
            online_cpus=frozenset(online_cpus),
            allowed_cpus=frozenset(allowed_cpus),
            numa_nodes=nodes,
            packages=tuple(sorted(packages, key=lambda p: p.id)),
            cores=tuple(sorted(cores, key=lambda c: _first(c.cpus))),
            l3_groups=tuple(sorted(l3_groups, key=lambda g: _first(g.cpus))),
            gpus=(),
            node_distances=distances,
            gpus_known=gpus_known,
            notes=tuple(notes),
            _node_of_cpu=node_of_cpu,
            _node_index={node_id: i for i, node_id in enumerate(ids)},
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
        local CPUs (its CPU affinity); where they span nodes or are unknown, the node with
        CPUs nearest to it by the distance matrix (``nearest_cpu_node``); else None. Any
        other reported node, or None (unknown: never guessed), is kept as it is."""
        node = None if reported is None else self.node(reported)
        if node is None or not node.memory_only:
            return reported
        home = None if local_cpus is None else self.home_node_of(local_cpus & self.online_cpus)
        return home if home is not None else self.nearest_cpu_node(node.id)

    def nearest_cpu_node(self, node_id: int, within: CpuSet | None = None) -> int | None:
        """The node with CPUs (online, and in ``within`` where given) nearest to
        ``node_id`` by the distance matrix, itself excluded; None when the distances are
        unknown or two such nodes are equally near (no guess between them)."""
        order = self.nodes_by_distance(node_id)
        if order is None:
            return None
        pool = self.online_cpus if within is None else self.online_cpus & within
        nodes = (self.node(i) for i in order if i != node_id)
        usable = [n.id for n in nodes if n is not None and n.cpus & pool]
        if not usable:
            return None
        if len(usable) > 1 and self.distance(node_id, usable[0]) == self.distance(node_id, usable[1]):
            return None
        return usable[0]

    def node(self, node_id: int) -> NumaNode | None:
        return next((n for n in self.numa_nodes if n.id == node_id), None)

    def distance(self, a: int, b: int) -> int | None:
        """The distance from node ``a`` to node ``b`` (10 from a node to itself on Linux);
        None when the distances are unknown or either node is not in the topology."""
        i, j = self._node_index.get(a), self._node_index.get(b)
        if self.node_distances is None or i is None or j is None:
            return None
        return self.node_distances[i][j]

    def nodes_by_distance(self, node_id: int) -> tuple[int, ...] | None:
        """Every node's id, nearest to ``node_id`` first (itself, then ties by id): the
        order to fall back in when a node cannot be used. None when unknown."""
        i = self._node_index.get(node_id)
        if self.node_distances is None or i is None:
            return None
        row = self.node_distances[i]
        return tuple(sorted((n.id for n in self.numa_nodes), key=lambda n: (row[self._node_index[n]], n)))

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
        ``"memory_only": true`` only when it is memory-only, and always
        ``"memory_bytes"`` (null: unknown). ``"node_distances"`` is the matrix in the
        order of ``"numa_nodes"`` (null: unknown); ``"gpus_known"`` false says the
        source had no PCI bus to read, so an empty ``"gpus"`` proves nothing."""
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
            "node_distances": None if self.node_distances is None else [list(r) for r in self.node_distances],
            "gpus_known": self.gpus_known,
        }


def distance_problem(node_ids: Sequence[int], rows: Sequence[Sequence[int]]) -> str | None:
    """Why ``rows`` (in the order of ``node_ids``) is not a NUMA distance matrix, or None.

    A matrix is one row of one distance per node for every node, each distance an
    integer from 1 to ``MAX_DISTANCE``, and every node strictly nearest to itself: Linux
    refuses any other table from the firmware (``slit_valid``: 10 on the diagonal, more
    elsewhere; ``numa_set_distance`` likewise), so another one was not the kernel's."""
    count = len(node_ids)
    if count > MAX_DISTANCE_NODES:
        return f"{count:,} nodes, more than Linux numbers ({MAX_DISTANCE_NODES:,})"
    if len(rows) != count:
        return f"{len(rows)} rows of distances for {count} nodes"
    for node_id, row in zip(node_ids, rows, strict=True):
        if len(row) != count:
            return f"node {node_id} has {len(row)} distances for {count} nodes"
        for value in row:
            if type(value) is not int or not 1 <= value <= MAX_DISTANCE:
                return f"node {node_id} has distance {str(value)[:20]}, outside 1-{MAX_DISTANCE}"
    for i, (node_id, row) in enumerate(zip(node_ids, rows, strict=True)):
        if any(value <= row[i] for j, value in enumerate(row) if j != i):
            return f"node {node_id} is not nearer to itself ({row[i]}) than to every other node"
    return None


def format_gib(memory_bytes: int | None) -> str:
    """A node's memory for a person: ``"62.7 GiB"``, ``"0 GiB"`` for a memory-less node,
    ``"unknown"`` for None."""
    if memory_bytes is None:
        return "unknown"
    return "0 GiB" if memory_bytes == 0 else f"{memory_bytes / (1 << 30):.1f} GiB"


def _node_json(node: NumaNode) -> dict[str, Any]:
    data: dict[str, Any] = {"id": node.id, "cpus": format_cpulist(node.cpus)}
    if node.memory_only:
        data["memory_only"] = True
    data["memory_bytes"] = node.memory_bytes
    return data


def _first(cpus: CpuSet) -> int:
    return min(cpus) if cpus else -1


__all__ = [
    "EMPTY",
    "MAX_DISTANCE",
    "MAX_DISTANCE_NODES",
    "MAX_NODE_MEMORY_BYTES",
    "CacheGroup",
    "Core",
    "Gpu",
    "NumaNode",
    "Package",
    "Topology",
    "distance_problem",
    "format_gib",
    "gpu_vendor",
    "normalize_bus_id",
]
