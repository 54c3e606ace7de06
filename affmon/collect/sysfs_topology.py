"""Read a ``Topology`` from a live or recorded Linux sysfs tree (``source="sysfs"``).

Every file is read under ``root`` through ``affmon.collect.fs`` (in a recorded tree,
links are resolved inside the tree and only regular files are read); each per-CPU file
at most once. What is read, and what a missing file becomes:

* Online CPUs: ``/sys/devices/system/cpu/online``; without it, every ``cpuN`` whose
  ``online`` is not ``0`` (``cpu0`` often has no ``online`` file: it is online).
* Cores: the SMT sibling group of each online CPU (``topology/thread_siblings_list``,
  ``core_cpus_list``, or the masks ``thread_siblings``/``core_cpus``) restricted to the
  online CPUs. A CPU without these files is a core of its own. Groups are a partition:
  a CPU already in an earlier group is not put in a second one.
* Packages: ``topology/physical_package_id`` of the online CPUs, kept as written
  (-1 on some VMs and ARM machines, and when the file is missing).
* Cache groups: the data/unified caches (``cache/index*/{level,type}``) of the highest
  level found on any online CPU, each with its ``shared_cpu_list`` (or
  ``shared_cpu_map``) restricted to the online CPUs; CPUs that report no cache of that
  level are in no group.
* NUMA nodes: ``/sys/devices/system/node/node<N>`` by their real, possibly sparse ids,
  with ``cpulist`` (or the mask ``cpumap``, or the ``cpuN`` entries of the node
  directory) restricted to the online CPUs. A node whose list names no CPU at all,
  online or offline, is memory-only (GPU memory, MCDRAM, HBM, CXL): it is kept with an
  empty set and ``memory_only`` set; sysfs gives it no CPUs, and none are invented (its
  locality, which hwloc shows as the CPUs of its parent, is not read). A node whose CPUs
  are all offline has an empty set but is not memory-only. With no node directory at
  all (kernel without NUMA), one node 0 holds every online CPU.
* Node memory: the ``Node <N> MemTotal: <n> kB`` line of ``node<N>/meminfo`` (what
  ``numactl -H`` calls its size, and hwloc its ``local_memory``), in bytes; without
  node directories, ``MemTotal`` of ``/proc/meminfo``. Missing: unknown.
* Node distances: ``node<N>/distance`` holds node N's distance to every online node, in
  the order of ``node/online`` (the kernel writes them ``for_each_online_node``); without
  ``online``, the order of the node directories, which are the online nodes. Row N of
  the matrix is that file, its columns picked for the nodes read above. A missing
  ``distance`` file leaves the matrix unknown; so does a bad one, with a note.
* Allowed CPUs: the cpuset cgroup of this process (``cgroup_cpuset(root, "self")``)
  intersected with the online CPUs; all online CPUs when the cgroup is unknown (or the
  intersection is empty, which no running process can have).
* GPUs: ``/sys/bus/pci/devices/<address>`` whose ``class`` (24 bits; the top 16 are the
  class code) and ``vendor`` make ``gpu_vendor`` answer. A recorded tree may lack the
  ``vendor`` file; the device is then taken as NVIDIA only if the NVIDIA driver lists
  it in ``/proc/driver/nvidia/gpus/<address>``. ``numa_node`` -1 or missing is None
  (unknown, never node 0); ``local_cpulist`` (or the mask ``local_cpus``) is the GPU's
  ``local_cpus`` as the kernel writes it, None when missing. A ``numa_node`` naming a
  memory-only node becomes the node of the GPU's local CPUs (``Topology.build``).
  A tree without ``/sys/bus/pci/devices`` (``hwloc-gather-topology`` without ``--io``)
  says nothing of GPUs: ``gpus_known`` is False.

A root without ``sys/devices/system/cpu`` is not a sysfs tree: ``SourceError``. A
missing or unreadable file degrades as said above; a file whose content cannot be
parsed raises ``ParseError`` naming it, except the memory and distance files: nothing
is planned from them alone, so a bad one (no ``MemTotal`` line, a wrong count of
distances, a distance outside ``distance_problem``'s bounds, a size beyond
``MAX_NODE_MEMORY_BYTES``) leaves that value unknown and adds one line to the
topology's ``notes``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from affmon.collect.cgroup import cgroup_cpuset
from affmon.collect.fs import clipped, is_dir, join, list_dir, quoted, read_line, read_text, shown_path
from affmon.core.errors import ParseError, SourceError
from affmon.core.model.cpuset import CpuSet, parse_cpulist, parse_cpumask
from affmon.core.model.topology import (
    GPU_PCI_CLASSES,
    MAX_NODE_MEMORY_BYTES,
    CacheGroup,
    Core,
    Gpu,
    NumaNode,
    Package,
    Topology,
    distance_problem,
    gpu_vendor,
)

CPU_DIR = "/sys/devices/system/cpu"
NODE_DIR = "/sys/devices/system/node"
PCI_DIR = "/sys/bus/pci/devices"
NVIDIA_PROC_GPUS = "/proc/driver/nvidia/gpus"
PROC_MEMINFO = "/proc/meminfo"

_CPU_NAME = re.compile(r"cpu(\d+)")
_NODE_NAME = re.compile(r"node(\d+)")
_INDEX_NAME = re.compile(r"index\d+")
_CACHE_TYPES = frozenset({"Unified", "Data"})
# "Node 0 MemTotal:       65794764 kB" (node meminfo), "MemTotal:  65794764 kB" (/proc).
# ASCII digits, at most 20 of them: int() of a longer run costs more than it tells.
_NODE_MEMTOTAL = re.compile(r"Node +(?P<node>[0-9]{1,10}) +MemTotal: +(?P<kb>[0-9]{1,20}) kB")
_MEMTOTAL = re.compile(r"MemTotal: +(?P<kb>[0-9]{1,20}) kB")
_DISTANCE = re.compile(r"[0-9]{1,20}")


@dataclass(frozen=True, slots=True)
class _CpuInfo:
    """What sysfs says about one online CPU (each file read once)."""

    package: int
    siblings: CpuSet | None
    caches: dict[int, CpuSet]  # level -> CPUs sharing this CPU's data/unified cache


def read_topology(root: str = "/") -> Topology:
    """The machine under ``root`` as sysfs describes it."""
    if not is_dir(root, CPU_DIR):
        raise SourceError(f"not a Linux sysfs tree: {join(root, CPU_DIR)} is not a directory")
    online = _online_cpus(root)
    infos = {cpu: _cpu_info(root, cpu) for cpu in sorted(online)}
    cores = _partition(online, {cpu: info.siblings for cpu, info in infos.items()})
    packages: dict[int, set[int]] = {}
    for cpu, info in infos.items():
        packages.setdefault(info.package, set()).add(cpu)
    cgroup = cgroup_cpuset(root, "self")
    allowed = online if cgroup is None or not (cgroup & online) else cgroup & online
    notes: list[str] = []
    nodes = _numa_nodes(root, online, notes)
    distances = _distances(root, [n.id for n in nodes], notes) if is_dir(root, NODE_DIR) else None
    gpus_known = is_dir(root, PCI_DIR)
    return Topology.build(
        source="sysfs",
        online_cpus=online,
        allowed_cpus=allowed,
        numa_nodes=nodes,
        packages=[Package(id=pkg, cpus=frozenset(cpus)) for pkg, cpus in packages.items()],
        cores=[Core(package=infos[min(group)].package, cpus=group) for group in cores],
        l3_groups=_cache_groups(online, infos),
        gpus=_gpus(root) if gpus_known else [],
        node_distances=distances,
        gpus_known=gpus_known,
        notes=notes,
    )


def _online_cpus(root: str) -> CpuSet:
    text = read_line(root, f"{CPU_DIR}/online")
    if text:
        return _parse(parse_cpulist, text, f"{CPU_DIR}/online")
    cpus = set()
    for cpu in _numbered(list_dir(root, CPU_DIR), _CPU_NAME):
        if read_line(root, f"{CPU_DIR}/cpu{cpu}/online") != "0":
            cpus.add(cpu)
    return frozenset(cpus)


def _cpu_info(root: str, cpu: int) -> _CpuInfo:
    base = f"{CPU_DIR}/cpu{cpu}"
    package_path = f"{base}/topology/physical_package_id"
    package_text = _value(root, package_path)
    package = -1 if package_text is None else _parse_int(package_text, package_path)
    siblings = _read_set(
        root,
        f"{base}/topology/thread_siblings_list",
        f"{base}/topology/core_cpus_list",
        f"{base}/topology/thread_siblings",
        f"{base}/topology/core_cpus",
    )
    caches: dict[int, CpuSet] = {}
    for index in sorted(list_dir(root, f"{base}/cache")):
        if not _INDEX_NAME.fullmatch(index):
            continue
        cache = f"{base}/cache/{index}"
        if read_line(root, f"{cache}/type") not in _CACHE_TYPES:
            continue
        level_text = _value(root, f"{cache}/level")
        shared = _read_set(root, f"{cache}/shared_cpu_list", f"{cache}/shared_cpu_map")
        if level_text is None or shared is None:
            continue
        level = _parse_int(level_text, f"{cache}/level")
        caches[level] = caches.get(level, frozenset()) | shared
    return _CpuInfo(package=package, siblings=siblings, caches=caches)


def _cache_groups(online: CpuSet, infos: dict[int, _CpuInfo]) -> list[CacheGroup]:
    levels = [level for info in infos.values() for level in info.caches]
    if not levels:
        return []
    top = max(levels)
    shared = {cpu: info.caches[top] for cpu, info in infos.items() if top in info.caches}
    members = frozenset(shared)
    return [CacheGroup(level=top, cpus=group) for group in _partition(members, shared)]


def _partition(cpus: CpuSet, groups_of: Mapping[int, CpuSet | None]) -> list[CpuSet]:
    """Split ``cpus`` into the groups sysfs gives each CPU (restricted to ``cpus``), in
    CPU order; a CPU already placed is not placed again, one with no group is alone."""
    placed: set[int] = set()
    result = []
    for cpu in sorted(cpus):
        if cpu in placed:
            continue
        group = ((groups_of.get(cpu) or frozenset()) & cpus) - placed | {cpu}
        placed |= group
        result.append(frozenset(group))
    return result


def _numa_nodes(root: str, online: CpuSet, notes: list[str]) -> list[NumaNode]:
    ids = _numbered(list_dir(root, NODE_DIR), _NODE_NAME)
    if not ids:
        memory = _memory(root, PROC_MEMINFO, _MEMTOTAL, None)
        return [NumaNode(id=0, cpus=online, memory_bytes=memory if isinstance(memory, int) else None)]
    nodes = []
    bad: list[tuple[int, str]] = []
    for node in ids:
        base = f"{NODE_DIR}/node{node}"
        cpus = _read_set(root, f"{base}/cpulist", f"{base}/cpumap")
        if cpus is None:
            cpus = frozenset(_numbered(list_dir(root, base), _CPU_NAME))
        memory = _memory(root, f"{base}/meminfo", _NODE_MEMTOTAL, node)
        if isinstance(memory, str):
            bad.append((node, memory))
        # No CPU at all, online or not: Linux made it a memory-only node.
        nodes.append(
            NumaNode(
                id=node,
                cpus=cpus & online,
                memory_only=not cpus,
                memory_bytes=memory if isinstance(memory, int) else None,
            )
        )
    if bad:
        more = f" (and {len(bad) - 1} more nodes)" if len(bad) > 1 else ""
        notes.append(f"memory of node {bad[0][0]} unknown{more}: {bad[0][1]}")
    return nodes


def _memory(root: str, path: str, pattern: re.Pattern[str], node: int | None) -> int | str | None:
    """Bytes of the ``MemTotal`` line of a meminfo file; None when the file is missing;
    a one-line reason (for a note) when it is there but gives no usable size."""
    text = read_text(root, path)
    if text is None:
        return None
    for line in text.splitlines():
        match = pattern.fullmatch(line.strip())
        if match is None:
            continue
        if node is not None and int(match["node"]) != node:
            return f"{shown_path(path)} is for node {match['node']}"
        size = int(match["kb"]) * 1024
        if size > MAX_NODE_MEMORY_BYTES:
            return f"{shown_path(path)}: MemTotal of {size:,} bytes is more than any machine addresses"
        return size
    return f"{shown_path(path)} has no MemTotal line in kB"


def _distances(root: str, ids: list[int], notes: list[str]) -> list[list[int]] | None:
    """The distance matrix over ``ids`` (module doc); None when unknown, with a note
    when a file was there but unusable."""
    if not ids:
        return None
    online_path = f"{NODE_DIR}/online"
    # The first line: hwloc's gathered trees end some of these files with "\n\0".
    online_text = (_value(root, online_path) or "").split("\n")[0].strip() or None
    try:
        order = sorted(parse_cpulist(online_text)) if online_text is not None else ids
    except ParseError as exc:
        notes.append(f"node distances unknown: {shown_path(online_path)}: {clipped(str(exc))}")
        return None
    column = {node: i for i, node in enumerate(order)}
    missing = [node for node in ids if node not in column]
    if missing:
        notes.append(f"node distances unknown: node {missing[0]} is not in {shown_path(online_path)}")
        return None
    rows = []
    for node in ids:
        path = f"{NODE_DIR}/node{node}/distance"
        text = _value(root, path)
        if text is None:
            return None
        words = text.split()
        if len(words) != len(order):
            notes.append(
                f"node distances unknown: {shown_path(path)} holds {len(words):,} numbers "
                f"for {len(order):,} online nodes"
            )
            return None
        if not all(_DISTANCE.fullmatch(word) for word in words):
            notes.append(f"node distances unknown: {shown_path(path)}: not a list of distances: {quoted(text)}")
            return None
        values = [int(word) for word in words]
        rows.append([values[column[other]] for other in ids])
    problem = distance_problem(ids, rows)
    if problem is not None:
        notes.append(f"node distances unknown: {NODE_DIR}/node*/distance: {problem}")
        return None
    return rows


def _gpus(root: str) -> list[Gpu]:
    nvidia_listed: set[str] | None = None
    gpus = []
    for address in sorted(list_dir(root, PCI_DIR)):
        base = f"{PCI_DIR}/{address}"
        class_text = _value(root, f"{base}/class")
        if class_text is None:
            continue
        pci_class = _parse_int(class_text, f"{base}/class", base=16) >> 8
        if pci_class not in GPU_PCI_CLASSES:
            continue
        vendor_text = _value(root, f"{base}/vendor")
        if vendor_text is not None:
            device_text = _value(root, f"{base}/device")
            device = None if device_text is None else _parse_int(device_text, f"{base}/device", base=16)
            vendor = gpu_vendor(_parse_int(vendor_text, f"{base}/vendor", base=16), pci_class, device)
        else:
            if nvidia_listed is None:
                nvidia_listed = {name.lower() for name in list_dir(root, NVIDIA_PROC_GPUS)}
            vendor = "nvidia" if address.lower() in nvidia_listed else None
        if vendor is None:
            continue
        node_text = _value(root, f"{base}/numa_node")
        node = None if node_text is None else _parse_int(node_text, f"{base}/numa_node")
        gpus.append(
            Gpu(
                pci_bus_id=address.lower(),
                vendor=vendor,
                numa_node=node if node is not None and node >= 0 else None,
                local_cpus=_read_set(root, f"{base}/local_cpulist", f"{base}/local_cpus"),
            )
        )
    return gpus


def _read_set(root: str, *paths: str) -> CpuSet | None:
    """The first of ``paths`` that can be read: a ``*list`` file is a cpulist, any other a
    hex mask. None when none can be read."""
    for path in paths:
        is_list = path.endswith("list")
        # An empty list is the empty set; an empty mask is no answer (the kernel writes
        # zeros for an empty set), like a missing file.
        text = read_line(root, path) if is_list else _value(root, path)
        if text is None:
            continue
        return _parse(parse_cpulist if is_list else parse_cpumask, text, path)
    return None


def _value(root: str, path: str) -> str | None:
    """A one-value file; None when it is missing, unreadable or empty (a recorded tree
    can hold empty files where sysfs never has them: unknown, not a parse error)."""
    return read_line(root, path) or None


def _parse(parser: Callable[[str], CpuSet], text: str, path: str) -> CpuSet:
    try:
        return parser(text)
    except ParseError as exc:
        raise ParseError(f"{shown_path(path)}: {clipped(str(exc))}") from None


def _parse_int(text: str, path: str, base: int = 10) -> int:
    try:
        return int(text, base)
    except ValueError:
        raise ParseError(f"{shown_path(path)}: not a number: {quoted(text)}") from None


def _numbered(names: Iterable[str], pattern: re.Pattern[str]) -> list[int]:
    """Sorted numbers of the names that are ``pattern`` exactly (``cpu12`` -> 12)."""
    found = (pattern.fullmatch(name) for name in names)
    return sorted(int(m.group(1)) for m in found if m)


__all__ = ["read_topology"]
