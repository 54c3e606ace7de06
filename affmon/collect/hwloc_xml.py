"""Read a ``Topology`` from an hwloc XML file (``lstopo --of xml``, hwloc 2.x format).

Only the standard library's ``xml.etree.ElementTree`` is used. The DOCTYPE hwloc
writes (``hwloc2.dtd``) is never fetched: expat does not load external DTDs or
external entities. hwloc never declares entities, so a file that does is refused; an
undefined entity is a parse error in text, and in an attribute (where expat drops it)
leaves a value that fails its own check.

Versions
    ``<topology version="2.0">`` (and any ``2.x``) is the format this reader is written
    for. hwloc 3.0 writes ``version="3.0"`` with the same ``object`` elements and the
    same attributes for everything read here (``type``, ``os_index``, ``cpuset``,
    ``nodeset``, ``allowed_cpuset``, ``depth``, ``cache_type``, ``pci_busid``,
    ``pci_type``); it drops ``gp_index`` and adds top-level elements
    (``pci_locality``, ``cpukind``, ...), which are ignored. So ``3.x`` is accepted,
    and the same checks apply: a root object and at least one PU with an ``os_index``
    must be present, or the file is refused. hwloc 1.x XML (``<topology>`` without a
    ``version`` attribute, ``version="1.x"``, or the old ``<root>`` element) is
    refused with a one-line message asking for a re-export with hwloc 2: its NUMA
    nodes are parents of CPUs and its caches have another shape.

What is read
    * Online CPUs: the ``os_index`` of every ``PU`` object in the tree. hwloc only
      creates PU objects for online CPUs; offline ones appear solely in the
      ``complete_cpuset`` masks (``16em64t-4s2c2t-offlines``: complete 0-15, PUs
      0,1,3,4,6,12,15). A file exported without ``--disallowed`` from a restricted
      process (cgroup, cpuset) has no PU objects for the CPUs it could not use, so
      those are missing here too: the XML no longer says they exist.
    * Allowed CPUs: the root object's ``allowed_cpuset`` intersected with the online
      CPUs; all online CPUs when the attribute is absent.
    * NUMA nodes: every ``NUMANode`` object by ``os_index`` (sparse ids kept), with the
      CPUs Linux gives it, so that the file and the machine's sysfs read the same.
      hwloc 2 attaches memory objects to a parent instead of putting CPUs under them,
      and a node's ``cpuset`` is the set of CPUs it is local to: a node without CPUs of
      its own (KNL's MCDRAM, a GPU's memory on POWER9 or Grace Hopper, HBM, CXL) hangs
      beside or above a DRAM node and has that node's CPUs there, so one CPU would be in
      two nodes. Such a node is memory-only (``memory_only``, no CPUs) when its
      ``subtype`` is set and is not ``DRAM`` (hwloc writes ``MCDRAM``, ``GPUMemory``,
      ``HBM``, ``NVM``, ``SPM``, ``CXL-DRAM``...), when its ``complete_cpuset`` is empty
      (no CPU at all; a file exported from a restricted process also writes that for
      nodes whose CPUs it could not see), or when it owns none of its CPUs: each online
      CPU of a remaining node's ``cpuset`` belongs to the most local one (the smallest
      cpuset holding it, then the lowest id, as Linux numbers nodes with CPUs first).
      hwloc's tools show a memory-only node with its locality's CPUs; that locality is
      not kept. A node whose ``cpuset`` has no online CPU but whose
      ``complete_cpuset`` has some is not memory-only: its CPUs are just not in the file.
    * Node memory: the NUMANode's ``local_memory`` (bytes). hwloc writes no attribute
      both for a node of 0 bytes and for one whose size it does not know, so a node
      without it has unknown memory.
    * Node distances: the ``<distances2 type="NUMANode">`` element under ``<topology>``
      named ``NUMALatency`` (hwloc's name for the kernel's table), else the first one
      whose ``kind`` has the latency bit (4): ``nbobjs`` objects, their OS indexes in
      ``<indexes>`` and ``nbobjs`` squared values in ``<u64values>`` (each list may be
      split over several elements), row by row. The matrix kept is the one over the
      file's NUMA nodes; it is unknown when there is no such element, when a node is
      missing from it, and (with a note) when it is malformed or ``distance_problem``
      refuses it. Bandwidth matrices and ``<distances2hetero>`` (GPU NVLink bandwidths)
      are not read. hwloc 1.x's ``<distances>`` elements only occur in 1.x files, which
      are refused (below).
    * Packages: ``Package`` objects by ``os_index`` (-1 when the file has none) with the
      online CPUs under them; a package with no online CPU is left out.
    * Cores: each ``Core`` object's PUs, with the ``os_index`` of the ``Package`` above
      it (-1 when there is none). A PU with no Core above it is a core of its own.
    * Cache groups: the objects of the highest cache level present (``L<n>Cache``,
      level from the ``depth`` attribute), leaving out instruction caches
      (``L<n>iCache``, ``cache_type="2"``) and memory-side caches (``MemCache``), each
      with the PUs under it. No machine nests a cache in another of the same level; in a
      file that does, each PU is in the nearest one only. (Counting it in every
      enclosing one, 5,000 nested caches with a PU each made 12.5 million memberships:
      ``affmon topology`` took 10 s and 1.2 GB.)
    * GPUs: ``PCIDev`` objects whose ``pci_type`` (``"0302 [10de:1db5] [10de:1249] a1"``:
      class, [vendor:device], [subvendor:subdevice], revision...) is a display class of
      a GPU vendor (``gpu_vendor``). The bus id is ``pci_busid``, lower-cased.
      ``local_cpus`` is the cpuset of the first ancestor that is not an I/O object
      (the first one with a cpuset: Bridge, PCIDev and OSDev have none), which is what
      ``hwloc_get_non_io_ancestor_obj`` gives; an empty cpuset there (a device under a
      CPU-less Group) is reported as unknown (None), and so is its node. ``numa_node``
      is the node of that ancestor's ``nodeset`` when exactly one NUMA node of the
      nodeset has CPUs (memory-only nodes have none: a GPU beside KNL's DRAM and MCDRAM
      nodes is on the DRAM one); otherwise (none, or several, as for a GPU hwloc placed
      under a whole Group or Machine) it is None: unknown, never a guess. The nodeset
      is the one written in the file; hwloc recomputes nodesets when it loads a file,
      which only differs for hand-edited files. A file with no PCI object at all
      (exported with I/O filtered out, ``lstopo --no-io``) says nothing of GPUs:
      ``gpus_known`` is False.

Objects of other types (Machine, Group, Die, Misc, MemCache, caches below the top
level, Bridge, OSDev) are walked through; only ``object`` elements are descended into.

Bounds
    At most ``MAX_XML_BYTES`` (32 MiB) are read; a larger file (or an endless stream
    such as ``/dev/zero``) is refused. hwloc writes about 1.7 KB per CPU (326 KB for
    the 192-CPU fixture), so the largest machine Linux supports (8,192 CPUs) fits with
    room for its I/O objects; 32 MiB of the smallest possible objects is read in about
    6 s and 0.5 GB. A PU ``os_index`` above ``MAX_CPU_ID`` is refused, as it is in a
    cpuset. Elements nested deeper than ``MAX_DEPTH`` (1,000) are refused while
    parsing, before the tree is built: a machine's objects nest a few dozen deep
    (Machine, Package, Group, Die, caches, Core, PU, and a chain of PCI bridges).
    Within those bounds time and memory grow linearly with the file: every object is
    visited once, what it inherits is shared with its parent, and a GPU's locality is
    parsed once per ancestor however many GPUs share it.

    A distance matrix is read for at most ``MAX_DISTANCE_NODES`` (1,024) nodes, each
    value at most 20 digits, before ``distance_problem`` checks it.

Errors: a file that cannot be read, or is too big, is a ``SourceError``; anything
wrong with its content (not XML, truncated, too deep, not hwloc, wrong version,
missing or malformed attribute) is a ``ParseError``. Both carry one line naming the
file, and quote at most a short, escaped part of its content. A bad ``local_memory`` or
distance matrix is the exception: nothing is planned from it alone, so it is left
unknown and said in one line of the topology's ``notes``.
"""

from __future__ import annotations

import os
import re
import stat
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from affmon.core.errors import ParseError, SourceError
from affmon.core.model.cpuset import EMPTY, MAX_CPU_ID, CpuSet, parse_cpumask
from affmon.core.model.topology import (
    MAX_DISTANCE_NODES,
    MAX_NODE_MEMORY_BYTES,
    CacheGroup,
    Core,
    Gpu,
    NumaNode,
    Package,
    Topology,
    distance_problem,
    gpu_vendor,
    normalize_bus_id,
)

SOURCE = "hwloc-xml"
MAX_XML_BYTES = 32 << 20
MAX_DEPTH = 1000
_FEED_BYTES = 1 << 16  # parsed this much at a time, the nesting depth checked in between

# Objects of these types carry no cpuset: locality comes from the first other ancestor.
_IO_TYPES = frozenset({"Bridge", "PCIDev", "OSDev"})
# hwloc 2 cache type names: L1Cache..L5Cache (data or unified), L1iCache..L3iCache.
_CACHE_TYPE = re.compile(r"L([0-9]{1,3})([diu]?)Cache")
_INSTRUCTION_CACHE = "2"  # cache_type attribute: 0 unified, 1 data, 2 instruction
# "0302 [10de:1db5] [10de:1249] a1": class (base+sub), then [vendor:device].
_PCI_TYPE = re.compile(r"\s*([0-9A-Fa-f]{1,4})\s+\[([0-9A-Fa-f]{1,4}):([0-9A-Fa-f]{1,4})\]")
# ASCII digits (``\d`` also matches "３"), and few of them: int() refuses 4,300 and more.
_VERSION = re.compile(r"([0-9]{1,9})(?:\.[0-9]+)*")
_V1_HINT = "is hwloc XML v1; re-export it with hwloc 2 (lstopo --of xml)"
_NUMBER = re.compile(r"[0-9]{1,20}")  # a local_memory, an index or a distance
_LATENCY_KIND = 4  # HWLOC_DISTANCES_KIND_MEANS_LATENCY
_PCI_TYPES = frozenset({"PCIDev", "Bridge"})


@dataclass(frozen=True, slots=True)
class _Cache:
    """An enclosing data/unified cache object, linked to the next one up: a child
    shares its parent's chain instead of copying it."""

    level: int
    serial: int
    parent: _Cache | None


class _Ctx(NamedTuple):
    """What an object inherits from its ancestors during the walk."""

    package: int | None  # os_index of the nearest Package (-1: it has none); None: no Package
    core: int | None  # serial of the nearest Core element
    cache: _Cache | None  # nearest enclosing data/unified cache
    locality: ET.Element | None  # nearest ancestor-or-self with a cpuset, not an I/O object


class _Pu(NamedTuple):
    serial: int
    ctx: _Ctx


def read_hwloc_xml(path: str) -> Topology:
    """Build the ``Topology`` an hwloc 2.x (or 3.x) XML export describes (module doc)."""
    root = _parse(path, _read(path))
    machine = _root_object(path, root)
    return _build(path, root, machine)


def _read(path: str) -> bytes:
    """The file's bytes, at most ``MAX_XML_BYTES``. A pipe (``--hwloc-xml <(lstopo --of
    xml)``) is read too, up to the same bound."""
    too_big = f"hwloc XML {path} is larger than {MAX_XML_BYTES >> 20} MiB: not a machine's topology"
    chunks: list[bytes] = []
    total = 0
    try:
        with open(path, "rb", buffering=0) as f:
            info = os.fstat(f.fileno())
            if stat.S_ISREG(info.st_mode) and info.st_size > MAX_XML_BYTES:
                raise SourceError(too_big)
            # In pieces: ``read(MAX_XML_BYTES + 1)`` would allocate the whole bound at once.
            while chunk := f.read(_FEED_BYTES):
                total += len(chunk)
                if total > MAX_XML_BYTES:
                    raise SourceError(too_big)
                chunks.append(chunk)
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
        raise SourceError(f"cannot read hwloc XML {path}: {reason}") from None
    return b"".join(chunks)


def _parse(path: str, data: bytes) -> ET.Element:
    if not data.strip():
        raise ParseError(f"{path}: empty file, not hwloc XML")
    if b"<!ENTITY" in data:
        # hwloc never declares entities; refusing them rules out entity expansion
        # tricks (external entities, exponential expansion) whatever expat allows.
        raise ParseError(f"{path}: entity declarations are not allowed in hwloc XML")
    try:
        return _parse_bounded(path, data)
    except ParseError:
        raise
    except ET.ParseError as exc:
        raise ParseError(f"{path}: malformed XML: {_shown(str(exc), 120)}") from None
    except (ValueError, LookupError) as exc:
        raise ParseError(f"{path}: unreadable XML: {_shown(str(exc), 120)}") from None


def _parse_bounded(path: str, data: bytes) -> ET.Element:
    """``ET.fromstring``, refusing elements nested deeper than ``MAX_DEPTH`` as soon as
    the parser reaches them (a deep file is refused before its tree is built)."""
    parser: ET.XMLPullParser[ET.Element] = ET.XMLPullParser(events=("start", "end"))
    root: ET.Element | None = None
    depth = 0
    for offset in range(0, len(data), _FEED_BYTES):
        parser.feed(data[offset : offset + _FEED_BYTES])
        for event in parser.read_events():
            if event[0] == "end":
                depth -= 1
                continue
            depth += 1
            if depth > MAX_DEPTH:
                raise ParseError(f"{path}: XML elements nested more than {MAX_DEPTH} deep: not a machine's topology")
            if root is None and isinstance(event[-1], ET.Element):
                root = event[-1]
    parser.close()
    if root is None:  # expat refuses a document without an element first
        raise ParseError(f"{path}: no XML element")
    return root


def _root_object(path: str, root: ET.Element) -> ET.Element:
    if root.tag == "root":
        raise ParseError(f"{path} {_V1_HINT}")
    if root.tag != "topology":
        raise ParseError(f"{path}: not hwloc XML (root element <{_shown(root.tag, 40)}>)")
    version = root.get("version")
    if version is None:
        raise ParseError(f"{path} {_V1_HINT}")
    match = _VERSION.fullmatch(version.strip())
    major = int(match.group(1)) if match else None
    if major == 1:
        raise ParseError(f"{path} {_V1_HINT}")
    if major not in (2, 3):
        raise ParseError(f"{path}: unsupported hwloc XML version {_one_line(version)[:20]!r} (expected 2.x or 3.x)")
    objects = root.findall("object")
    if len(objects) != 1:
        raise ParseError(f"{path}: expected one root object in <topology>, found {len(objects)}")
    return objects[0]


def _build(path: str, root: ET.Element, machine: ET.Element) -> Topology:
    pus: dict[int, _Pu] = {}
    numa_elems: list[ET.Element] = []
    gpu_elems: list[tuple[ET.Element, ET.Element | None]] = []
    has_pci = False

    serial = 0
    stack: list[tuple[ET.Element, _Ctx]] = [(machine, _Ctx(None, None, None, None))]
    while stack:
        elem, ctx = stack.pop()
        serial += 1
        kind = elem.get("type")
        if kind is None:
            raise ParseError(f"{path}: <object> without a type attribute")
        if kind not in _IO_TYPES and elem.get("cpuset") is not None:
            ctx = ctx._replace(locality=elem)
        if kind == "PU":
            cpu = _int_attr(path, elem, "os_index")
            if cpu > MAX_CPU_ID:
                raise ParseError(f"{path}: PU os_index {cpu} is beyond any Linux CPU id (at most {MAX_CPU_ID})")
            if cpu in pus:
                raise ParseError(f"{path}: PU os_index {cpu} appears twice")
            pus[cpu] = _Pu(serial, ctx)
        elif kind == "Core":
            ctx = ctx._replace(core=serial)
        elif kind == "Package":
            ctx = ctx._replace(package=_int_attr(path, elem, "os_index", default=-1))
        elif kind == "NUMANode":
            numa_elems.append(elem)
        elif kind in _PCI_TYPES:
            has_pci = True
            if kind == "PCIDev":
                gpu_elems.append((elem, ctx.locality))
        else:
            level = _cache_level(path, elem, kind)
            if level is not None:
                ctx = ctx._replace(cache=_Cache(level, serial, ctx.cache))
        # Reversed so the walk visits children in file order (not needed, but tidy).
        stack.extend((child, ctx) for child in reversed(elem.findall("object")))

    if not pus:
        raise ParseError(f"{path}: no PU objects with an os_index (not a CPU topology)")
    online: CpuSet = frozenset(pus)

    allowed_text = machine.get("allowed_cpuset")
    allowed = online if allowed_text is None else _mask(path, machine, "allowed_cpuset") & online

    notes: list[str] = []
    nodes = _numa_nodes(path, numa_elems, online, notes)
    distances = _distances(path, root, sorted(nodes), notes)

    package_cpus: dict[int, set[int]] = {}
    core_cpus: dict[int, set[int]] = {}
    core_package: dict[int, int] = {}
    cache_cpus: dict[int, set[int]] = {}
    top_level = _top_cache_level(pu.ctx.cache for pu in pus.values())
    nearest_top: dict[int, int | None] = {}
    for cpu, pu in pus.items():
        if pu.ctx.package is not None:
            package_cpus.setdefault(pu.ctx.package, set()).add(cpu)
        core_key = pu.ctx.core if pu.ctx.core is not None else pu.serial
        core_cpus.setdefault(core_key, set()).add(cpu)
        core_package[core_key] = -1 if pu.ctx.package is None else pu.ctx.package
        cache = _nearest_of_level(pu.ctx.cache, top_level, nearest_top)
        if cache is not None:
            cache_cpus.setdefault(cache, set()).add(cpu)
    l3_groups = [CacheGroup(top_level, frozenset(cpus)) for cpus in cache_cpus.values() if top_level is not None]

    localities: dict[ET.Element, tuple[CpuSet | None, int | None]] = {}
    gpus = [gpu for elem, locality in gpu_elems if (gpu := _gpu(path, elem, locality, online, nodes, localities))]
    bus_ids = [g.pci_bus_id for g in gpus]
    if len(set(bus_ids)) != len(bus_ids):
        raise ParseError(f"{path}: a GPU PCI bus id appears twice")

    return Topology.build(
        source=SOURCE,
        online_cpus=online,
        allowed_cpus=allowed,
        numa_nodes=nodes.values(),
        packages=[Package(pid, frozenset(cpus)) for pid, cpus in package_cpus.items()],
        cores=[Core(core_package[key], frozenset(cpus)) for key, cpus in core_cpus.items()],
        l3_groups=l3_groups,
        gpus=gpus,
        node_distances=distances,
        gpus_known=has_pci,
        notes=notes,
    )


def _numa_nodes(path: str, elems: list[ET.Element], online: CpuSet, notes: list[str]) -> dict[int, NumaNode]:
    """The NUMA nodes with the CPUs each owns, as Linux gives them, and their memory
    (module doc)."""
    local: dict[int, CpuSet] = {}
    memory_only: set[int] = set()
    memory: dict[int, int | None] = {}
    bad_memory: list[tuple[int, str]] = []
    for elem in elems:
        node_id = _int_attr(path, elem, "os_index")
        if node_id in local:
            raise ParseError(f"{path}: NUMANode os_index {node_id} appears twice")
        memory[node_id] = _local_memory(elem, node_id, bad_memory)
        local[node_id] = _mask(path, elem, "cpuset") & online
        subtype = elem.get("subtype")
        complete = None if elem.get("complete_cpuset") is None else _mask(path, elem, "complete_cpuset")
        if (subtype is not None and subtype.strip().upper() != "DRAM") or complete == frozenset():
            memory_only.add(node_id)
    # Each CPU goes to the most local node that may own CPUs: the smallest cpuset holding
    # it, then the lowest id (hwloc attaches a CPU-less node without a subtype beside the
    # DRAM node, or higher up, and Linux numbers nodes with CPUs first). Counted once per
    # (node, CPU) pair, so the work grows with the file, not with nodes squared.
    owner: dict[int, tuple[int, int]] = {}
    for node_id, cpus in local.items():
        if node_id in memory_only:
            continue
        rank = (len(cpus), node_id)
        for cpu in cpus:
            if cpu not in owner or rank < owner[cpu]:
                owner[cpu] = rank
    owned: dict[int, set[int]] = {}
    for cpu, (_, node_id) in owner.items():
        owned.setdefault(node_id, set()).add(cpu)
    nodes = {}
    for node_id, cpus in local.items():
        mine = frozenset(owned.get(node_id, ()))
        # A node that had CPUs here but owns none is memory attached beside another node.
        only = node_id in memory_only or (bool(cpus) and not mine)
        nodes[node_id] = NumaNode(node_id, EMPTY if only else mine, memory_only=only, memory_bytes=memory[node_id])
    if bad_memory:
        more = f" (and {len(bad_memory) - 1} more nodes)" if len(bad_memory) > 1 else ""
        notes.append(f"{path}: memory of node {bad_memory[0][0]} unknown{more}: {bad_memory[0][1]}")
    return nodes


def _local_memory(elem: ET.Element, node_id: int, bad: list[tuple[int, str]]) -> int | None:
    """A NUMANode's ``local_memory`` in bytes; None when absent or unusable (then the
    reason is added to ``bad``)."""
    text = elem.get("local_memory")
    if text is None:
        return None
    if not _NUMBER.fullmatch(text.strip()):
        bad.append((node_id, f"local_memory {_shown(text, 30)!r} is not a number of bytes"))
        return None
    value = int(text.strip())
    if value > MAX_NODE_MEMORY_BYTES:
        bad.append((node_id, f"local_memory of {value:,} bytes is more than any machine addresses"))
        return None
    return value


def _distances(path: str, root: ET.Element, ids: list[int], notes: list[str]) -> list[list[int]] | None:
    """The NUMA latency matrix over ``ids`` (module doc), or None."""
    candidates = [e for e in root.findall("distances2") if e.get("type", "").strip() == "NUMANode"]
    chosen = next((e for e in candidates if e.get("name") == "NUMALatency"), None)
    if chosen is None:
        chosen = next((e for e in candidates if _is_latency(e.get("kind"))), None)
    if chosen is None or not ids:
        return None
    try:
        return _distance_rows(chosen, ids)
    except ValueError as exc:
        notes.append(f"{path}: node distances unknown: {exc}")
        return None


def _distance_rows(elem: ET.Element, ids: list[int]) -> list[list[int]] | None:
    """The rows of ``elem`` for the nodes ``ids``; None when a node is not in it.
    ``ValueError`` says what is wrong with a malformed element."""
    count_text = elem.get("nbobjs", "").strip()
    if not _NUMBER.fullmatch(count_text):
        raise ValueError(f"bad nbobjs {_shown(count_text, 20)!r}")
    count = int(count_text)
    if count > MAX_DISTANCE_NODES:
        raise ValueError(f"a matrix of {count:,} nodes, more than Linux numbers ({MAX_DISTANCE_NODES:,})")
    if elem.get("indexing", "os").strip() != "os":
        raise ValueError("nodes not given by OS index")
    indexes = _numbers(elem, "indexes", count)
    values = _numbers(elem, "u64values", count * count)
    if len(set(indexes)) != count:
        raise ValueError("a node appears twice in the matrix")
    position = {node: i for i, node in enumerate(indexes)}
    if any(node not in position for node in ids):
        return None
    rows = [[values[position[a] * count + position[b]] for b in ids] for a in ids]
    problem = distance_problem(ids, rows)
    if problem is not None:
        raise ValueError(problem)
    return rows


def _numbers(elem: ET.Element, tag: str, count: int) -> list[int]:
    """Exactly ``count`` numbers from the text of ``elem``'s ``tag`` children."""
    words = [word for child in elem.findall(tag) for word in (child.text or "").split()]
    if len(words) != count:
        raise ValueError(f"{len(words):,} <{tag}> numbers for {count:,}")
    bad = next((word for word in words if not _NUMBER.fullmatch(word)), None)
    if bad is not None:
        raise ValueError(f"<{tag}> holds {_shown(bad, 30)!r}, not a number")
    return [int(word) for word in words]


def _is_latency(kind: str | None) -> bool:
    text = (kind or "").strip()
    return bool(_NUMBER.fullmatch(text)) and bool(int(text) & _LATENCY_KIND)


def _top_cache_level(chains: Iterable[_Cache | None]) -> int | None:
    """The highest level among the caches with a PU under them; each cache is looked at
    once, however many PUs it holds."""
    seen: set[int] = set()
    top: int | None = None
    for cache in chains:
        while cache is not None and cache.serial not in seen:
            seen.add(cache.serial)
            top = cache.level if top is None else max(top, cache.level)
            cache = cache.parent
    return top


def _nearest_of_level(cache: _Cache | None, level: int | None, memo: dict[int, int | None]) -> int | None:
    """Serial of the nearest cache of ``level`` in the chain from ``cache`` up, or None;
    ``memo`` (serial -> answer) makes every cache's answer computed once."""
    passed: list[int] = []
    found: int | None = None
    while cache is not None:
        if cache.serial in memo:
            found = memo[cache.serial]
            break
        if cache.level == level:
            found = cache.serial
            break
        passed.append(cache.serial)
        cache = cache.parent
    for serial in passed:
        memo[serial] = found
    if cache is not None:
        memo[cache.serial] = found
    return found


def _cache_level(path: str, elem: ET.Element, kind: str) -> int | None:
    """Level of a CPU-side data or unified cache object; None for anything else."""
    match = _CACHE_TYPE.fullmatch(kind)
    if match is None:
        return None
    if match.group(2) == "i" or elem.get("cache_type", "").strip() == _INSTRUCTION_CACHE:
        return None
    if elem.get("depth") is None:
        return int(match.group(1))
    return _int_attr(path, elem, "depth")


def _gpu(
    path: str,
    elem: ET.Element,
    locality: ET.Element | None,
    online: CpuSet,
    nodes: dict[int, NumaNode],
    localities: dict[ET.Element, tuple[CpuSet | None, int | None]],
) -> Gpu | None:
    pci_type = _attr(path, elem, "pci_type")
    match = _PCI_TYPE.match(pci_type)
    if match is None:
        raise ParseError(f"{path}: PCIDev object: bad pci_type {_one_line(pci_type)[:60]!r}")
    vendor = gpu_vendor(int(match.group(2), 16), int(match.group(1), 16), int(match.group(3), 16))
    if vendor is None:
        return None
    bus_id = normalize_bus_id(_attr(path, elem, "pci_busid"))
    local_cpus: CpuSet | None = None
    numa_node: int | None = None
    if locality is not None:
        if locality not in localities:
            localities[locality] = _locality(path, locality, online, nodes)
        local_cpus, numa_node = localities[locality]
    return Gpu(pci_bus_id=bus_id, vendor=vendor, numa_node=numa_node, local_cpus=local_cpus)


def _locality(
    path: str, locality: ET.Element, online: CpuSet, nodes: dict[int, NumaNode]
) -> tuple[CpuSet | None, int | None]:
    """Local CPUs and NUMA node of the devices under ``locality`` (module doc)."""
    local_cpus = _mask(path, locality, "cpuset") & online or None
    numa_node = None
    if local_cpus is not None and locality.get("nodeset") is not None:
        candidates = [
            n
            for n in sorted(_mask(path, locality, "nodeset"))
            if n in nodes and nodes[n].cpus  # a node with CPUs, present in the file
        ]
        if len(candidates) == 1:
            numa_node = candidates[0]
    return local_cpus, numa_node


def _attr(path: str, elem: ET.Element, name: str) -> str:
    value = elem.get(name)
    if value is None:
        raise ParseError(f"{path}: {_describe(elem)} object without a {name} attribute")
    return value


def _int_attr(path: str, elem: ET.Element, name: str, default: int | None = None) -> int:
    value = elem.get(name)
    if value is None:
        if default is not None:
            return default
        raise ParseError(f"{path}: {_describe(elem)} object without a {name} attribute")
    text = value.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 10:
        raise ParseError(f"{path}: {_describe(elem)} object: bad {name} {_one_line(value)[:30]!r}")
    return int(text)


def _mask(path: str, elem: ET.Element, name: str) -> CpuSet:
    """A cpuset/nodeset attribute (hwloc spelling; ``parse_cpumask`` knows it)."""
    text = _attr(path, elem, name)
    if not text.strip():
        # Also what an undefined entity in an attribute becomes: expat drops it.
        raise ParseError(f"{path}: {_describe(elem)} object: empty {name}")
    try:
        return parse_cpumask(text)
    except ParseError as exc:
        raise ParseError(f"{path}: {_describe(elem)} object: bad {name}: {_shown(str(exc), 120)}") from None


def _describe(elem: ET.Element) -> str:
    kind = _shown(elem.get("type", "untyped"), 30)
    index = elem.get("os_index")
    return kind if index is None else f"{kind} (os_index {_shown(index, 12)})"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _shown(text: str, limit: int) -> str:
    """Text from the file (or a message quoting it) for an error: one line, at most
    ``limit`` characters, escaped with ``repr`` if anything in it is not printable (XML
    allows C1 controls and bidirectional overrides in attribute values)."""
    line = _one_line(text)[:limit]
    return line if line.isprintable() else repr(line)


__all__ = ["SOURCE", "read_hwloc_xml"]
