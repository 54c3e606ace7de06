"""The hwloc XML reader against hwloc's own tools, the fixtures' documented facts, and
bad input.

Every fixture under ``tests/fixtures/hwloc_xml`` (see SOURCES.md there) is read twice:
by ``read_hwloc_xml`` and by Debian's hwloc 2.9 tools with ``-i FILE``: the object tree
with physical indexes and cpusets from ``lstopo-no-graphics -p -c -v``, online and
allowed PUs from ``hwloc-calc --po -I pu all`` (with and without ``--disallowed``), and
the nodeset of each GPU's first non-I/O ancestor from ``hwloc-info --ancestors``. The
tools run with ``--disallowed`` (CPUs a cgroup kept from the exporting process still
count as online) and ``--whole-io`` (no PCI device filtered out). Their answers are
turned into a ``Topology`` here, with a bitmap parser of this file's own, and compared
field by field. The tools are required: ``.ci/run`` installs them, and a
missing tool fails the run instead of skipping it.

hwloc 2.9 cannot load ``version="3.0"`` XML; for those fixtures the tools read a copy
whose version attribute says 2.0 (nothing else changed) while our reader reads the
original, which checks that the 3.0 files mean the same to us as to hwloc.

Where the Topology deliberately differs from what hwloc prints, the expected value is
derived from hwloc's data by the documented rule (see the reader's module docstring):
packages and caches without any CPU in the file are left out, an empty GPU locality is
None (and so is that GPU's node), a GPU's NUMA node is the one node of its non-I/O
ancestor's nodeset that has CPUs, and a NUMA node whose subtype (``NUMANode(MCDRAM)`` in
lstopo's tree) is not DRAM, or whose ``complete_cpuset`` in the file is empty, is
memory-only: no CPUs, where hwloc prints its locality's.
"""

from __future__ import annotations

import functools
import random
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from affmon.collect.hwloc_xml import read_hwloc_xml
from affmon.core.errors import ParseError, SourceError
from affmon.core.model.topology import CacheGroup, Core, Gpu, NumaNode, Package, Topology
from tests.helpers.hwloc_xml import MINIMAL_V2, cpus, document, gpu_under_bridge, machine, obj, pu

FIXTURES = Path(__file__).parent.parent / "fixtures" / "hwloc_xml"
V2_FILES = sorted(p.name for p in FIXTURES.glob("hwloc-xml__*.xml")) + sorted(
    p.name for p in FIXTURES.glob("mpibind-xml__*.xml")
)
V3_FILES = sorted(p.name for p in FIXTURES.glob("*.expected-lstopo.xml"))
ALL_FILES = V2_FILES + V3_FILES
TOOLS = ("lstopo-no-graphics", "hwloc-info", "hwloc-calc")

# Independent of affmon.core.model.topology on purpose: what counts as a GPU.
GPU_CLASSES = {0x0300, 0x0302, 0x0380}
GPU_VENDORS = {0x10DE: "nvidia", 0x1002: "amd"}
# An onboard server VGA chip with AMD's vendor id (ATI ES1000), like the BMC's Matrox: not a GPU.
NOT_GPUS = {(0x1002, 0x515E)}


def hwloc_bitmap(text: str) -> frozenset[int]:
    """hwloc's bitmap spelling as the tools print it: 32-bit words, most significant
    first, each ``0x``-prefixed, an empty word meaning zero (``0xff,,0x1``)."""
    value = 0
    for word in text.strip().split(","):
        word = word.strip()
        word = word[2:] if word.startswith("0x") else word
        value = (value << 32) | int(word or "0", 16)
    return frozenset(i for i in range(value.bit_length()) if value >> i & 1)


# --------------------------------------------------------------------------- hwloc side


@dataclass
class Obj:
    """One object line of ``lstopo -p -c -v``: type, subtype, P# (OS index), cpuset, parent."""

    kind: str
    os_index: int | None
    cpuset: frozenset[int] | None
    text: str
    parent: Obj | None
    subtype: str | None = None


@dataclass(frozen=True)
class HwlocView:
    topology: Topology  # hwloc's answers, shaped by the reader's documented rules
    online_by_calc: frozenset[int]  # hwloc-calc --disallowed -I pu all
    allowed_by_calc: frozenset[int]  # hwloc-calc -I pu all (disallowed PUs removed)
    package_ids: tuple[int, ...]  # every Package hwloc has, with or without CPUs


OBJ_LINE = re.compile(r"(?P<indent> *)(?P<kind>[A-Za-z][\w-]*|)(?:\((?P<sub>[^)]*)\))?(?: P#(?P<os>\d+))?(?P<rest>.*)")
PCI_ATTRS = re.compile(r"busid=(\S+) id=([0-9a-fA-F]{4}):([0-9a-fA-F]{4}) class=([0-9a-fA-F]{4})")


def run_tool(*args: str) -> str:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def lstopo_tree(xml: Path) -> list[Obj]:
    """Every object, in order, from the verbose console tree (2 spaces per level).

    ``hwloc-info`` is not used for sets: it cuts attribute values at 127 characters,
    which loses the high words of a 384-CPU machine's masks; lstopo prints them whole."""
    out = run_tool(
        "lstopo-no-graphics", "-i", str(xml), "--if", "xml", "--disallowed", "--whole-io",
        "-p", "-c", "-v", "--of", "console",
    )  # fmt: skip
    objs: list[Obj] = []
    stack: list[tuple[int, Obj]] = []
    for line in out.splitlines():
        if line.startswith(("depth ", "Special depth ")):
            break  # the level summary and matrices that follow the tree
        match = OBJ_LINE.fullmatch(line)
        assert match, f"unexpected lstopo line {line!r}"
        indent = len(match["indent"])
        if indent % 2 and not match["kind"]:
            # An OS device whose type hwloc 2.9 has no name for (the 3.0 files spell
            # osdev_type as a bit mask): "<indent><empty name> (Address=...)".
            indent -= 1
        assert indent % 2 == 0, line
        while stack and stack[-1][0] >= indent:
            stack.pop()
        assert len(stack) == indent // 2, f"lstopo tree out of step at {line!r}"
        cpuset = re.search(r" cpuset=(\S+)(?: \(disallowed\))?$", match["rest"])
        obj = Obj(
            kind=match["kind"],
            os_index=None if match["os"] is None else int(match["os"]),
            cpuset=None if cpuset is None else hwloc_bitmap(cpuset[1]),
            text=match["rest"],
            parent=stack[-1][1] if stack else None,
            subtype=match["sub"],
        )
        objs.append(obj)
        stack.append((indent, obj))
    assert objs and objs[0].kind == "Machine"
    return objs


def ancestor_nodesets(xml: Path, bus_ids: Iterable[str]) -> dict[str, tuple[str, frozenset[int]]]:
    """For each PCI bus id: type and nodeset of its first ancestor that has a nodeset
    (``hwloc-info --ancestors``); nodesets are short enough not to be cut."""
    out = run_tool(
        "hwloc-info", "-i", str(xml), "--if", "xml", "--disallowed", "--whole-io",
        "--ancestors", *(f"pci={b}" for b in bus_ids),
    )  # fmt: skip
    found: dict[str, tuple[str, frozenset[int]]] = {}
    current = header = ""
    for line in out.splitlines():
        if not line.startswith(" "):
            header = line
            continue
        key, _, value = line.strip().partition(" = ")
        if key == "attr PCI bus id" and " of " not in header:
            current = value.lower()  # the device's own block starts its chain
        elif key == "nodeset" and current not in found:
            assert len(value) < 120, f"hwloc-info may have cut {value!r}"
            found[current] = (header.split()[0], hwloc_bitmap(value))
    return found


def node_memory(xml: Path) -> dict[int, int | None]:
    """Each NUMANode's ``local memory`` in bytes as ``hwloc-info`` prints it; a node it
    prints 0 or nothing for is unknown (hwloc writes no attribute for either)."""
    out = run_tool("hwloc-info", "-i", str(xml), "--if", "xml", "--disallowed", "numanode:all")
    found: dict[int, int | None] = {}
    node = None
    for line in out.splitlines():
        key, _, value = line.strip().partition(" = ")
        if key == "os index":
            node = int(value)
            found[node] = None
        elif key == "local memory" and node is not None:
            found[node] = int(value) or None
    return found


LATENCY_HEADER = re.compile(r"Relative latency matrix \(name (?P<name>\S+) kind (?P<kind>\d+)\) between \d+ NUMANodes")


def numa_latency(xml: Path, ids: list[int]) -> tuple[tuple[int, ...], ...] | None:
    """The NUMA latency matrix over ``ids`` as ``lstopo --distances -p`` prints it (the one
    named NUMALatency, else the first NUMANode latency one), kept only when it is what
    Linux accepts: every distance 1-255, each node strictly nearest to itself."""
    out = run_tool("lstopo-no-graphics", "-i", str(xml), "--if", "xml", "--disallowed", "--distances", "-p")
    lines = out.splitlines()
    tables: list[tuple[str, dict[int, dict[int, int]]]] = []
    for n, line in enumerate(lines):
        header = LATENCY_HEADER.match(line)
        if header is None:
            continue
        columns = [int(c) for c in lines[n + 1].split()[1:]]
        table: dict[int, dict[int, int]] = {}
        for row in lines[n + 2 : n + 2 + len(columns)]:
            first, *values = (int(v) for v in row.split())
            table[first] = dict(zip(columns, values, strict=True))
        tables.append((header["name"], table))
    chosen = next((t for name, t in tables if name == "NUMALatency"), tables[0][1] if tables else None)
    if chosen is None or any(node not in chosen for node in ids):
        return None
    rows = tuple(tuple(chosen[a][b] for b in ids) for a in ids)
    for i, row in enumerate(rows):
        if not all(1 <= v <= 255 for v in row) or any(v <= row[i] for j, v in enumerate(row) if j != i):
            return None
    return rows


def calc_pus(xml: Path, *extra: str) -> frozenset[int]:
    out = run_tool("hwloc-calc", "-i", str(xml), "--if", "xml", *extra, "--po", "-I", "pu", "all")
    return frozenset(int(x) for x in out.strip().split(",") if x)


def complete_cpusets_of_nodes(xml: Path) -> dict[int, frozenset[int]]:
    """Each NUMANode's ``complete_cpuset`` as the file writes it (lstopo does not print it)."""
    found = {}
    for elem in ET.parse(xml).getroot().iter("object"):
        if elem.get("type") == "NUMANode" and elem.get("complete_cpuset") is not None:
            found[int(elem.get("os_index", "-1"))] = hwloc_bitmap(elem.get("complete_cpuset", ""))
    return found


def hwloc_view(xml: Path) -> HwlocView:
    objs = lstopo_tree(xml)

    def of_kind(kind: str) -> list[Obj]:
        return [o for o in objs if o.kind == kind]

    def cpuset(obj: Obj) -> frozenset[int]:
        assert obj.cpuset is not None, obj
        return obj.cpuset

    online = frozenset(o.os_index for o in of_kind("PU") if o.os_index is not None)
    assert len(online) == len(of_kind("PU"))
    allowed = calc_pus(xml)
    marked = frozenset(o.os_index for o in of_kind("PU") if o.text.endswith(" (disallowed)"))
    assert allowed == online - marked  # hwloc-calc and lstopo agree on what is disallowed
    complete = complete_cpusets_of_nodes(xml)
    memory = node_memory(xml)
    nodes = []
    for o in of_kind("NUMANode"):
        assert o.os_index is not None
        only = o.subtype not in (None, "DRAM") or complete.get(o.os_index) == frozenset()
        nodes.append(
            NumaNode(o.os_index, frozenset() if only else cpuset(o), memory_only=only, memory_bytes=memory[o.os_index])
        )
    # The fixtures need no more than the subtype and complete_cpuset rules to give every
    # CPU one node; a file that needed the reader's ownership rule would fail here.
    assert sum(len(n.cpus) for n in nodes) == len(frozenset().union(*(n.cpus for n in nodes)))
    all_packages = [Package(-1 if o.os_index is None else o.os_index, cpuset(o)) for o in of_kind("Package")]
    packages = [p for p in all_packages if p.cpus]

    def package_of(core_cpus: frozenset[int]) -> int:
        return next((p.id for p in packages if core_cpus <= p.cpus), -1)

    core_sets = [cpuset(o) for o in of_kind("Core")] or [frozenset({cpu}) for cpu in online]
    cores = [Core(package_of(c), c) for c in core_sets]

    levels = {o.kind: int(m[1]) for o in objs if (m := re.fullmatch(r"L(\d+)[du]?Cache", o.kind))}
    groups = []
    if levels:
        top = max(levels.values())
        # Like packages, caches with no CPU in the file (kept by hwloc because a
        # CPU-less NUMA node hangs under them) are not groups of CPUs.
        groups = [CacheGroup(top, cpuset(o)) for o in objs if levels.get(o.kind) == top and cpuset(o)]

    gpu_objs = {}
    for o in of_kind("PCI"):
        attrs = PCI_ATTRS.search(o.text)
        assert attrs, o.text
        vendor_id, device_id = int(attrs[2], 16), int(attrs[3], 16)
        if int(attrs[4], 16) in GPU_CLASSES and vendor_id in GPU_VENDORS and (vendor_id, device_id) not in NOT_GPUS:
            gpu_objs[attrs[1].lower()] = (o, GPU_VENDORS[vendor_id])
    nodesets = ancestor_nodesets(xml, gpu_objs) if gpu_objs else {}
    with_cpus = {n.id for n in nodes if n.cpus}
    gpus = []
    for bus_id, (dev, vendor) in gpu_objs.items():
        anc = dev.parent
        while anc is not None and anc.cpuset is None:
            anc = anc.parent
        assert anc is not None, bus_id
        anc_kind, nodeset = nodesets[bus_id]
        assert anc_kind.startswith(anc.kind), (anc_kind, anc.kind)  # same ancestor both ways
        in_nodeset = nodeset & with_cpus
        local = cpuset(anc) or None  # an empty locality is unknown, and so is its node
        gpus.append(
            Gpu(
                pci_bus_id=bus_id,
                vendor=vendor,
                numa_node=min(in_nodeset) if local and len(in_nodeset) == 1 else None,
                local_cpus=local,
            )
        )

    topology = Topology.build(
        source="hwloc-xml",
        online_cpus=online,
        allowed_cpus=allowed,
        numa_nodes=nodes,
        packages=packages,
        cores=cores,
        l3_groups=groups,
        gpus=gpus,
        node_distances=numa_latency(xml, sorted(n.id for n in nodes)),
        gpus_known=any(o.kind in ("PCI", "HostBridge", "PCIBridge") for o in objs),
    )
    return HwlocView(
        topology=topology,
        online_by_calc=calc_pus(xml, "--disallowed"),
        allowed_by_calc=allowed,
        package_ids=tuple(sorted(p.id for p in all_packages)),
    )


@pytest.fixture(scope="session")
def hwloc(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], HwlocView]:
    """hwloc's view of a fixture, computed once per file per session."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"hwloc tools not installed: {', '.join(missing)} (apt-get install hwloc)")
    copies = tmp_path_factory.mktemp("hwloc-v2-copies")

    @functools.cache
    def view(name: str) -> HwlocView:
        path = FIXTURES / name
        if name in V3_FILES:
            text = path.read_text(encoding="utf-8")
            assert text.count('<topology version="3.0">') == 1, name
            path = copies / name
            path.write_text(text.replace('<topology version="3.0">', '<topology version="2.0">'), "utf-8")
        return hwloc_view(path)

    return view


@functools.cache
def ours(name: str) -> Topology:
    return read_hwloc_xml(str(FIXTURES / name))


# ------------------------------------------------------------------ compared with hwloc


def test_fixture_set_is_complete() -> None:
    assert len(V2_FILES) == 17
    assert len(V3_FILES) == 3
    sources = (FIXTURES / "SOURCES.md").read_text(encoding="utf-8")
    for name in ALL_FILES:
        assert f"| {name} |" in sources, f"{name} has no source line in SOURCES.md"


@pytest.mark.parametrize("name", ALL_FILES)
def test_online_and_allowed_cpus(name: str, hwloc: Callable[[str], HwlocView]) -> None:
    view, topo = hwloc(name), ours(name)
    assert topo.source == "hwloc-xml"
    assert topo.online_cpus == view.topology.online_cpus == view.online_by_calc
    assert topo.allowed_cpus == view.topology.allowed_cpus == view.allowed_by_calc
    assert topo.allowed_cpus <= topo.online_cpus


@pytest.mark.parametrize("name", ALL_FILES)
def test_numa_nodes(name: str, hwloc: Callable[[str], HwlocView]) -> None:
    assert ours(name).to_json()["numa_nodes"] == hwloc(name).topology.to_json()["numa_nodes"]


@pytest.mark.parametrize("name", ALL_FILES)
def test_packages(name: str, hwloc: Callable[[str], HwlocView]) -> None:
    view, topo = hwloc(name), ours(name)
    assert topo.to_json()["packages"] == view.topology.to_json()["packages"]
    # The only packages left out are those hwloc has with no CPU at all.
    dropped = set(view.package_ids) - {p.id for p in topo.packages}
    assert all(not p.cpus for p in view.topology.packages if p.id in dropped)


@pytest.mark.parametrize("name", ALL_FILES)
def test_cores(name: str, hwloc: Callable[[str], HwlocView]) -> None:
    topo = ours(name)
    assert topo.to_json()["cores"] == hwloc(name).topology.to_json()["cores"]
    # Every online CPU is in exactly one core.
    assert sorted(c for core in topo.cores for c in core.cpus) == sorted(topo.online_cpus)


@pytest.mark.parametrize("name", ALL_FILES)
def test_highest_cache_groups(name: str, hwloc: Callable[[str], HwlocView]) -> None:
    topo, expected = ours(name), hwloc(name).topology
    assert topo.to_json()["l3_groups"] == expected.to_json()["l3_groups"]
    assert [g.level for g in topo.l3_groups] == [g.level for g in expected.l3_groups]


@pytest.mark.parametrize("name", ALL_FILES)
def test_gpus(name: str, hwloc: Callable[[str], HwlocView]) -> None:
    assert ours(name).to_json()["gpus"] == hwloc(name).topology.to_json()["gpus"]


@pytest.mark.parametrize("name", ALL_FILES)
def test_whole_topology(name: str, hwloc: Callable[[str], HwlocView]) -> None:
    assert ours(name) == hwloc(name).topology


# ----------------------------------------- facts known of these machines from their sources


def gpu_nodes(topo: Topology) -> dict[str, int | None]:
    return {g.pci_bus_id: g.numa_node for g in topo.gpus}


def node_cpus(topo: Topology) -> dict[int, frozenset[int]]:
    return {n.id: n.cpus for n in topo.numa_nodes}


def test_dgx2_sixteen_nvidia_gpus_eight_per_node() -> None:
    topo = ours("hwloc-xml__nvidiaDGX2.xml")
    assert [g.vendor for g in topo.gpus] == ["nvidia"] * 16
    node0 = ["34", "36", "39", "3b", "57", "59", "5c", "5e"]
    node1 = ["b7", "b9", "bc", "be", "e0", "e2", "e5", "e7"]
    assert gpu_nodes(topo) == {f"0000:{b}:00.0": 0 for b in node0} | {f"0000:{b}:00.0": 1 for b in node1}
    assert node_cpus(topo) == {0: cpus("0-1"), 1: cpus("24-25")}
    assert all(g.local_cpus == node_cpus(topo)[g.numa_node or 0] for g in topo.gpus)


def test_power8_gpus_in_pci_domains_and_sparse_cpus() -> None:
    topo = ours("hwloc-xml__power8gpudistances.xml")
    assert gpu_nodes(topo) == {"0002:01:00.0": 0, "0003:01:00.0": 0, "000a:01:00.0": 1, "000b:01:00.0": 1}
    assert node_cpus(topo) == {0: cpus("0-1,8-9,16-17,24-25"), 1: cpus("80-81,88-89,96-97,104-105")}


def test_wholeio_mixed_vendors_and_matrox_is_not_a_gpu() -> None:
    topo = ours("hwloc-xml__32em64t-2n8c2t-pci-wholeio.xml")
    assert {(g.pci_bus_id, g.vendor, g.numa_node) for g in topo.gpus} == {
        ("0000:03:00.0", "nvidia", 0),
        ("0000:83:00.0", "nvidia", 1),
        ("0000:84:00.0", "nvidia", 1),
        ("0000:84:00.1", "amd", 1),
    }
    text = (FIXTURES / "hwloc-xml__32em64t-2n8c2t-pci-wholeio.xml").read_text(encoding="utf-8")
    assert 'pci_busid="0000:05:03.0" pci_type="0300 [102b:0532]' in text  # the Matrox VGA
    assert topo.gpu("0000:05:03.0") is None
    assert node_cpus(topo) == {0: cpus("0-7,16-23"), 1: cpus("8-15,24-31")}


def test_24em64t_interleaved_numbering() -> None:
    topo = ours("hwloc-xml__24em64t-2n6c2t-pci.xml")
    assert node_cpus(topo) == {0: frozenset(range(0, 24, 2)), 1: frozenset(range(1, 24, 2))}
    assert [p.cpus for p in topo.packages] == [frozenset(range(0, 24, 2)), frozenset(range(1, 24, 2))]
    assert {c.cpus for c in topo.cores} == {frozenset({c, c + 12}) for c in range(12)}
    assert {g.pci_bus_id: (g.vendor, g.numa_node) for g in topo.gpus} == {
        "0000:06:00.0": ("nvidia", 0),
        "0000:11:00.0": ("nvidia", 1),
        "0000:14:00.0": ("nvidia", 1),
    }  # the ATI ES1000 onboard VGA (1002:515e) is not among them
    text = (FIXTURES / "hwloc-xml__24em64t-2n6c2t-pci.xml").read_text(encoding="utf-8")
    assert "[1002:515e]" in text


def test_irregular_groups_restricted_allowed_set_gpus_on_nodes_4_and_7() -> None:
    topo = ours("hwloc-xml__64intel64-3g2n+2n-irregulargroups+pci.xml")
    assert topo.online_cpus == cpus("0-63")
    assert topo.allowed_cpus == cpus("0-15")
    assert node_cpus(topo) == {n: frozenset(range(8 * n, 8 * n + 8)) for n in range(8)}
    assert gpu_nodes(topo) == {"0002:01:00.0": 4, "0004:01:00.0": 7}
    assert topo.gpu("0000:08:00.0") is None  # Matrox VGA
    assert not any(g.local_cpus and g.local_cpus & topo.allowed_cpus for g in topo.gpus)


def test_8ia64_sparse_nodes_and_cpu_less_node() -> None:
    topo = ours("hwloc-xml__8ia64-2n2s2c+1n.v1tov2.xml")
    assert node_cpus(topo) == {0: cpus("0-3"), 2: cpus("16-19"), 16: frozenset()}
    assert [(n.id, n.cpus) for n in topo.cpu_numa_nodes] == [(0, cpus("0-3")), (2, cpus("16-19"))]
    assert [(n.id, n.cpus) for n in topo.memory_only_nodes] == [(16, frozenset())]
    # The machine's listed "CPU ids 0-7,16-23" is the complete_cpuset; the file has PUs for half.
    assert topo.online_cpus == cpus("0-3,16-19")
    assert [p.id for p in topo.packages] == [0, 1, 131072, 131073]
    assert topo.l3_groups == ()  # no cache objects in this file


def test_eas_tioga_gpus_each_local_to_one_l3() -> None:
    topo = ours("mpibind-xml__eas-tioga.xml")
    assert len(topo.l3_groups) == 8
    assert all(len(g.cpus) == 16 for g in topo.l3_groups)  # 8 cores + SMT siblings (+64)
    l3s = {g.cpus for g in topo.l3_groups}
    assert [g.vendor for g in topo.gpus] == ["amd"] * 8
    assert all(g.local_cpus in l3s for g in topo.gpus)
    assert len({g.local_cpus for g in topo.gpus}) == 8  # one GCD per L3
    assert gpu_nodes(topo) == {
        "0000:d1:00.0": 0,
        "0000:d6:00.0": 0,
        "0000:c9:00.0": 1,
        "0000:ce:00.0": 1,
        "0000:d9:00.0": 2,
        "0000:de:00.0": 2,
        "0000:c1:00.0": 3,
        "0000:c6:00.0": 3,
    }
    local = {g.pci_bus_id: g.local_cpus for g in topo.gpus}
    assert local["0000:d1:00.0"] == cpus("0-7,64-71")
    assert local["0000:d6:00.0"] == cpus("8-15,72-79")
    assert node_cpus(topo) == {n: cpus(f"{16 * n}-{16 * n + 15},{64 + 16 * n}-{64 + 16 * n + 15}") for n in range(4)}


def test_192em64t_scale() -> None:
    topo = ours("hwloc-xml__192em64t-24n8c2t.xml")
    assert len(topo.online_cpus) == 384
    assert topo.online_cpus == topo.allowed_cpus == cpus("0-383")
    assert node_cpus(topo) == {n: cpus(f"{8 * n}-{8 * n + 7},{192 + 8 * n}-{192 + 8 * n + 7}") for n in range(24)}
    assert {c.cpus for c in topo.cores} == {frozenset({c, c + 192}) for c in range(192)}
    assert len(topo.packages) == 24
    assert topo.gpus == ()  # only a Matrox VGA


def test_16amd64_restricted_cpuset() -> None:
    topo = ours("hwloc-xml__16amd64-8n2c-cpusets.xml")
    assert topo.allowed_cpus == topo.online_cpus == cpus("0-3,5-6,12-15")
    assert node_cpus(topo) == {1: cpus("2-3"), 2: cpus("5"), 3: cpus("6"), 4: frozenset(), 5: frozenset()}
    assert len(topo.cores) == 10


def test_16em64t_offline_cpus_and_mixed_smt() -> None:
    topo = ours("hwloc-xml__16em64t-4s2c2t-offlines.xml")
    assert topo.online_cpus == cpus("0-1,3-4,6,12,15")  # complete_cpuset says 0-15
    assert node_cpus(topo) == {0: cpus("0-1,3-4,6,12,15")}
    assert sorted(sorted(c.cpus) for c in topo.cores) == [[0], [1], [3], [4, 12], [6], [15]]
    assert [(c.package, sorted(c.cpus)) for c in topo.cores if len(c.cpus) == 2] == [(0, [4, 12])]


def test_memory_side_caches_round_robin_nodes() -> None:
    topo = ours("hwloc-xml__memorysidecaches.xml")
    assert node_cpus(topo) == {n: frozenset(range(n, 80, 4)) for n in range(4)}
    assert len(topo.cores) == 40 and len(topo.packages) == 2
    assert [g.level for g in topo.l3_groups] == [3, 3]  # MemCache objects are not CPU caches


def test_knl_mcdram_nodes_are_memory_only() -> None:
    """hwloc gives DRAM node 0 and MCDRAM node 7 the same cpuset (the cluster both hang
    from); Linux gives the MCDRAM nodes no CPUs, and so does the reader."""
    name = "hwloc-xml__64intel64-fakeKNL-SNC4-hybrid.xml"
    text = (FIXTURES / name).read_text(encoding="utf-8")
    assert 'os_index="7" cpuset="0x000f000f,0x000f000f"' in text and 'subtype="MCDRAM"' in text
    topo = ours(name)
    nodes = node_cpus(topo)
    assert nodes[0] == cpus("0-3,16-19,32-35,48-51")
    assert {n: nodes[n] for n in range(4, 8)} == {n: frozenset() for n in range(4, 8)}
    assert [n.id for n in topo.memory_only_nodes] == [4, 5, 6, 7]
    assert [n.id for n in topo.cpu_numa_nodes] == [0, 1, 2, 3]
    assert topo.node_of_cpu(0) == 0 and topo.home_node_of(cpus("0-3")) == 0
    assert all(len(c.cpus) == 4 for c in topo.cores) and len(topo.cores) == 16


def test_lassen_sparse_nodes_and_reserved_cpus() -> None:
    topo = ours("mpibind-xml__coral-lassen.xml")
    assert node_cpus(topo) == {0: cpus("8-87"), 8: cpus("96-175")}
    assert topo.allowed_cpus == cpus("8-87,96-175")
    assert gpu_nodes(topo) == {"0004:04:00.0": 0, "0004:05:00.0": 0, "0035:03:00.0": 8, "0035:04:00.0": 8}
    assert all(len(c.cpus) == 4 for c in topo.cores) and len(topo.cores) == 40


def test_pascal_all_gpus_on_node_0() -> None:
    topo = ours("mpibind-xml__cts1-pascal.xml")
    assert gpu_nodes(topo) == {"0000:04:00.0": 0, "0000:07:00.0": 0}
    assert node_cpus(topo) == {0: cpus("0-17,36-53"), 1: cpus("18-35,54-71")}


def test_epyc_corona_nps4() -> None:
    topo = ours("mpibind-xml__epyc-corona.xml")
    assert gpu_nodes(topo) == {"0000:13:00.0": 1, "0000:23:00.0": 2, "0000:53:00.0": 5, "0000:73:00.0": 7}
    assert {g.vendor for g in topo.gpus} == {"amd"}
    assert node_cpus(topo) == {n: cpus(f"{6 * n}-{6 * n + 5},{48 + 6 * n}-{48 + 6 * n + 5}") for n in range(8)}


def test_epyc_corona_p2_ccx_groups() -> None:
    topo = ours("mpibind-xml__epyc-corona-p2.xml")
    assert gpu_nodes(topo) == {f"0000:{b}:00.0": 0 for b in ("03", "27", "43", "63")} | {
        f"0000:{b}:00.0": 1 for b in ("83", "a3", "c3", "e3")
    }
    assert len(topo.l3_groups) == 16
    assert all(len(g.cpus) == 6 for g in topo.l3_groups)  # 3 cores + SMT siblings
    assert all(len(topo.nodes_of(g.cpus)) == 1 for g in topo.l3_groups)


def test_g4dn_metal() -> None:
    topo = ours("mpibind-xml__g4dnmetal.xml")
    assert gpu_nodes(topo) == {f"0000:{b}:00.0": 0 for b in ("18", "19", "35", "36")} | {
        f"0000:{b}:00.0": 1 for b in ("e7", "e8", "f4", "f5")
    }
    assert node_cpus(topo) == {0: cpus("0-23,48-71"), 1: cpus("24-47,72-95")}


def test_v3_dgx_gb10_two_l3_clusters() -> None:
    topo = ours("hwloc-sysfs__nvidia-dgx-gb10.expected-lstopo.xml")
    assert topo.online_cpus == cpus("0-19")
    assert node_cpus(topo) == {0: cpus("0-19")}
    assert [g.cpus for g in topo.l3_groups] == [cpus("0-9"), cpus("10-19")]
    assert topo.gpus == ()


def test_v3_cgroup2_file_keeps_only_the_allowed_cpus() -> None:
    topo = ours("hwloc-sysfs__32amd64-4s2n4c-cgroup2.expected-lstopo.xml")
    # Exported without --disallowed: the 26 other CPUs are not in the file at all.
    assert topo.online_cpus == topo.allowed_cpus == cpus("0-5")
    assert node_cpus(topo) == {
        0: cpus("0-3"),
        1: cpus("4-5"),
        2: frozenset(),
        3: frozenset(),
        4: frozenset(),
        5: frozenset(),
    }
    assert [p.id for p in topo.packages] == [0]


def test_v3_pci_locality_round_robin_nodes() -> None:
    topo = ours("hwloc-sysfs__40intel64-2g2n4c+pcilocality.expected-lstopo.xml")
    assert node_cpus(topo) == {n: frozenset(range(n, 40, 4)) for n in range(4)}
    assert topo.gpus == ()


# ------------------------------------------------------------------------ bad input

# What hwloc 1.11 wrote: no version attribute, NUMA nodes as parents, "Socket"/"Cache".
V1_XML = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc.dtd">
<topology>
  <object type="Machine" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003" \
online_cpuset="0x00000003" allowed_cpuset="0x00000003" nodeset="0x00000001" \
complete_nodeset="0x00000001" allowed_nodeset="0x00000001">
    <object type="NUMANode" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003" \
online_cpuset="0x00000003" allowed_cpuset="0x00000003" nodeset="0x00000001" \
complete_nodeset="0x00000001" allowed_nodeset="0x00000001" local_memory="1073741824">
      <object type="Socket" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003" \
online_cpuset="0x00000003" allowed_cpuset="0x00000003" nodeset="0x00000001" \
complete_nodeset="0x00000001" allowed_nodeset="0x00000001">
        <object type="Cache" cpuset="0x00000003" complete_cpuset="0x00000003" \
online_cpuset="0x00000003" allowed_cpuset="0x00000003" nodeset="0x00000001" \
complete_nodeset="0x00000001" allowed_nodeset="0x00000001" cache_size="8388608" depth="3" \
cache_linesize="64" cache_associativity="16" cache_type="0">
          <object type="Core" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003" \
online_cpuset="0x00000003" allowed_cpuset="0x00000003" nodeset="0x00000001" \
complete_nodeset="0x00000001" allowed_nodeset="0x00000001">
            <object type="PU" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" \
online_cpuset="0x00000001" allowed_cpuset="0x00000001" nodeset="0x00000001" \
complete_nodeset="0x00000001" allowed_nodeset="0x00000001"/>
            <object type="PU" os_index="1" cpuset="0x00000002" complete_cpuset="0x00000002" \
online_cpuset="0x00000002" allowed_cpuset="0x00000002" nodeset="0x00000001" \
complete_nodeset="0x00000001" allowed_nodeset="0x00000001"/>
          </object>
        </object>
      </object>
    </object>
  </object>
</topology>
"""


def write(tmp_path: Path, text: str | bytes, name: str = "topo.xml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def refused(path: Path, error: type[Exception] = ParseError) -> str:
    """Read ``path``, expect exactly ``error`` with a one-line message naming the file."""
    with pytest.raises(error) as info:
        read_hwloc_xml(str(path))
    assert type(info.value) is error
    message = str(info.value)
    assert "\n" not in message and str(path) in message, message
    return message


def test_minimal_v2_document_reads_as_hwloc_does(tmp_path: Path, hwloc: Callable[[str], HwlocView]) -> None:
    path = write(tmp_path, MINIMAL_V2)
    topo = read_hwloc_xml(str(path))
    assert topo == hwloc_view(path).topology  # the hand-written file is valid hwloc XML
    assert topo.online_cpus == cpus("0-1") and topo.allowed_cpus == cpus("0")
    assert topo.cores == (Core(0, cpus("0-1")),)
    assert topo.gpus == (Gpu("0000:01:00.0", "nvidia", 0, cpus("0-1")),)


def test_v1_xml_is_refused_though_hwloc_reads_it(tmp_path: Path, hwloc: Callable[[str], HwlocView]) -> None:
    path = write(tmp_path, V1_XML)
    assert hwloc_view(path).topology.online_cpus == cpus("0-1")  # a real v1 file for hwloc
    message = refused(path)
    assert "hwloc XML v1" in message and "re-export it with hwloc 2" in message


@pytest.mark.parametrize(
    ("old", "new", "fragment"),
    [
        ('<topology version="2.0">', '<topology version="1.0">', "hwloc XML v1"),
        ("<topology version=", "<topology xversion=", "hwloc XML v1"),
        ('<topology version="2.0">', '<topology version="4.0">', "unsupported hwloc XML version"),
        ('<topology version="2.0">', '<topology version="two">', "unsupported hwloc XML version"),
    ],
)
def test_versions_refused(tmp_path: Path, old: str, new: str, fragment: str) -> None:
    assert fragment in refused(write(tmp_path, MINIMAL_V2.replace(old, new, 1)))


@pytest.mark.parametrize("minor", ["2.1", "2", "3.0", "3.1"])
def test_versions_accepted(tmp_path: Path, minor: str) -> None:
    text = MINIMAL_V2.replace('version="2.0">', f'version="{minor}">', 1)
    assert read_hwloc_xml(str(write(tmp_path, text))) == read_hwloc_xml(str(write(tmp_path, MINIMAL_V2, "b.xml")))


def test_root_style_v1_refused(tmp_path: Path) -> None:
    text = '<?xml version="1.0"?><root><object type="Machine" os_index="0"/></root>'
    assert "hwloc XML v1" in refused(write(tmp_path, text))


@pytest.mark.parametrize(
    "text",
    [
        "<html><body>not a topology</body></html>",
        '<?xml version="1.0"?><system version="2.0"><object type="Machine"/></system>',
    ],
)
def test_wrong_root_element(tmp_path: Path, text: str) -> None:
    assert "not hwloc XML" in refused(write(tmp_path, text))


@pytest.mark.parametrize(
    ("old", "new", "fragment"),
    [
        ('type="PU" os_index="1" ', 'type="PU" ', "PU object without a os_index"),
        ('type="NUMANode" os_index="0" ', 'type="NUMANode" ', "NUMANode object without a os_index"),
        ('gp_index="2" local_memory', 'gp_index="2" local_memory', ""),  # unchanged: control
        ('type="NUMANode" os_index="0" cpuset="0x00000003" ', 'type="NUMANode" os_index="0" ', "cpuset"),
        ('pci_type="0302 [10de:1db5] [10de:1249] a1" ', "", "pci_type"),
        ('pci_busid="0000:01:00.0" ', "", "pci_busid"),
        ('pci_type="0302 [10de:1db5]', 'pci_type="video [10de:1db5]', "bad pci_type"),
        ('type="PU" os_index="1" ', 'type="PU" os_index="one" ', "bad os_index"),
        ('type="PU" os_index="1" ', 'type="PU" os_index="-1" ', "bad os_index"),
        ('type="PU" os_index="1" ', 'type="PU" os_index="0" ', "appears twice"),
        ('allowed_cpuset="0x00000001"', 'allowed_cpuset="0xzz"', "bad allowed_cpuset"),
        ('allowed_cpuset="0x00000001"', 'allowed_cpuset="0xf...f"', "bad allowed_cpuset"),
        ('<object type="Core" os_index="0"', '<object os_index="0"', "without a type"),
    ],
)
def test_missing_or_bad_attributes(tmp_path: Path, old: str, new: str, fragment: str) -> None:
    assert old in MINIMAL_V2
    path = write(tmp_path, MINIMAL_V2.replace(old, new, 1))
    if not fragment:
        read_hwloc_xml(str(path))
        return
    assert fragment in refused(path)


def test_no_pu_objects(tmp_path: Path) -> None:
    text = re.sub(r'\s*<object type="PU"[^>]*/>', "", MINIMAL_V2)
    assert 'type="PU"' not in text
    assert "no PU objects" in refused(write(tmp_path, text))


@pytest.mark.parametrize("count", [0, 2])
def test_root_object_count(tmp_path: Path, count: int) -> None:
    start, end = MINIMAL_V2.index("  <object"), MINIMAL_V2.index("</topology>")
    machine = MINIMAL_V2[start:end]
    text = MINIMAL_V2[:start] + machine * count + MINIMAL_V2[end:]
    assert "one root object" in refused(write(tmp_path, text))


def test_truncated_xml(tmp_path: Path) -> None:
    data = (FIXTURES / "hwloc-xml__24em64t-2n6c2t-pci.xml").read_bytes()
    assert "malformed XML" in refused(write(tmp_path, data[: len(data) // 2]))


@pytest.mark.parametrize(
    "data",
    [b"", b"   \n", b'{"not": "xml"}', b"\x00\x01\x02\xff\xfe garbage", b"<topology version='2.0'>"],
    ids=["empty", "blank", "json", "binary", "unclosed"],
)
def test_not_xml(tmp_path: Path, data: bytes) -> None:
    message = refused(write(tmp_path, data))
    assert "malformed XML" in message or "empty file" in message


def test_missing_file(tmp_path: Path) -> None:
    assert "cannot read hwloc XML" in refused(tmp_path / "absent.xml", SourceError)


def test_directory_and_non_directory_paths(tmp_path: Path) -> None:
    refused(tmp_path, SourceError)
    refused(write(tmp_path, MINIMAL_V2) / "child.xml", SourceError)


def test_dtd_next_to_the_file_is_not_loaded(tmp_path: Path) -> None:
    # If the parser fetched hwloc2.dtd, &cpus; would be defined and the file would load;
    # unfetched, expat drops the reference and the attribute is left empty.
    write(tmp_path, '<!ENTITY cpus "0x00000003">', "hwloc2.dtd")
    text = MINIMAL_V2.replace('allowed_cpuset="0x00000001"', 'allowed_cpuset="&cpus;"', 1)
    assert "empty allowed_cpuset" in refused(write(tmp_path, text))
    text = MINIMAL_V2.replace('<object type="NUMANode"', '<info>&cpus;</info><object type="NUMANode"', 1)
    assert "undefined entity" in refused(write(tmp_path, text))


def test_external_entity_is_not_resolved(tmp_path: Path) -> None:
    secret = write(tmp_path, "0x00000003", "secret.txt")
    text = MINIMAL_V2.replace(
        '<!DOCTYPE topology SYSTEM "hwloc2.dtd">',
        f'<!DOCTYPE topology [<!ENTITY xxe SYSTEM "file://{secret}">]>',
    ).replace('<object type="NUMANode"', '<info>&xxe;</info><object type="NUMANode"', 1)
    assert "entity declarations are not allowed" in refused(write(tmp_path, text))


def test_entity_expansion_refused(tmp_path: Path) -> None:
    lol = "".join(f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">' for i in range(1, 9))
    text = MINIMAL_V2.replace(
        '<!DOCTYPE topology SYSTEM "hwloc2.dtd">', f'<!DOCTYPE topology [<!ENTITY l0 "lol">{lol}]>'
    ).replace('<object type="NUMANode"', '<info>&l8;</info><object type="NUMANode"', 1)
    assert "entity declarations are not allowed" in refused(write(tmp_path, text))


def mutations(data: bytes, rng: random.Random) -> Iterable[bytes]:
    for _ in range(60):
        yield data[: rng.randrange(len(data))]
    for _ in range(60):
        mutated = bytearray(data)
        for _ in range(rng.randrange(1, 4)):
            mutated[rng.randrange(len(mutated))] = rng.choice(b'<>"=/,x0 \xff&')
        yield bytes(mutated)


@pytest.mark.parametrize("name", ["hwloc-xml__24em64t-2n6c2t-pci.xml", "hwloc-xml__8ia64-2n2s2c+1n.v1tov2.xml"])
def test_damaged_files_give_only_our_errors(tmp_path: Path, name: str) -> None:
    rng = random.Random(name)
    outcomes = set()
    for data in mutations((FIXTURES / name).read_bytes(), rng):
        path = write(tmp_path, data)
        try:
            read_hwloc_xml(str(path))
            outcomes.add("read")
        except ParseError as exc:
            assert type(exc) is ParseError
            assert "\n" not in str(exc) and str(path) in str(exc)
            outcomes.add("refused")
    assert "refused" in outcomes


# ------------------------------------------- hand-made trees for rules no fixture hits


def test_pus_without_cores_and_package_without_os_index(tmp_path: Path, hwloc: Callable[[str], HwlocView]) -> None:
    text = document(
        machine(
            obj(
                "Package",
                obj("NUMANode", cpu_list="0-1", node_list="0", os_index="0", local_memory="1024"),
                pu(0),
                pu(1),
                cpu_list="0-1",
                node_list="0",
            ),
            obj(
                "Package",
                obj("NUMANode", cpu_list="2-3", node_list="1", os_index="1", local_memory="1024"),
                pu(2),
                pu(3),
                cpu_list="2-3",
                node_list="1",
                os_index="1",
            ),
            gpu_under_bridge("0000:01:00.0"),
            cpu_list="0-3",
            node_list="0-1",
        )
    )
    path = write(tmp_path, text)
    topo = read_hwloc_xml(str(path))
    assert topo == hwloc_view(path).topology
    assert [(c.package, sorted(c.cpus)) for c in topo.cores] == [(-1, [0]), (-1, [1]), (1, [2]), (1, [3])]
    assert topo.packages == (Package(-1, cpus("0-1")), Package(1, cpus("2-3")))
    # Under the Machine, the GPU's locality is the whole machine: no single node.
    assert topo.gpus == (Gpu("0000:01:00.0", "nvidia", None, cpus("0-3")),)


def test_gpu_numa_node_ignores_cpu_less_nodes(tmp_path: Path, hwloc: Callable[[str], HwlocView]) -> None:
    text = document(
        machine(
            obj("NUMANode", cpu_list="0-1", node_list="0", os_index="0", local_memory="1024"),
            obj(
                "Package",
                obj("Core", pu(0), pu(1), cpu_list="0-1", node_list="0-1", os_index="0"),
                cpu_list="0-1",
                node_list="0-1",
                os_index="0",
            ),
            obj(
                "Group",
                obj("NUMANode", cpu_list="", node_list="1", os_index="1", local_memory="1024"),
                gpu_under_bridge("0000:0A:00.0"),  # upper-case as some tools write it
                cpu_list="",
                node_list="0-1",  # what hwloc computes for it on load
                kind="1001",
                subkind="0",
            ),
            gpu_under_bridge("0000:02:00.0", "0380 [1002:740c] [1002:0b0c] 01"),
            cpu_list="0-1",
            node_list="0-1",
        )
    )
    path = write(tmp_path, text)
    topo = read_hwloc_xml(str(path))
    assert topo == hwloc_view(path).topology
    assert node_cpus(topo) == {0: cpus("0-1"), 1: frozenset()}
    assert topo.gpus == (
        Gpu("0000:02:00.0", "amd", 0, cpus("0-1")),
        # Under an object without CPUs: locality unknown, not "no CPU".
        Gpu("0000:0a:00.0", "nvidia", None, None),
    )


def test_gpu_beside_dram_and_mcdram_nodes_is_on_the_dram_node(
    tmp_path: Path, hwloc: Callable[[str], HwlocView]
) -> None:
    text = document(
        machine(
            obj(
                "Package",
                obj("NUMANode", cpu_list="0-1", node_list="0", os_index="0", local_memory="1024"),
                obj(
                    "NUMANode",
                    cpu_list="0-1",
                    node_list="1",
                    os_index="1",
                    local_memory="1024",
                    subtype="MCDRAM",
                ),
                obj("Core", pu(0), pu(1), cpu_list="0-1", node_list="0-1", os_index="0"),
                gpu_under_bridge("0000:03:00.0"),
                cpu_list="0-1",
                node_list="0-1",
                os_index="0",
            ),
            cpu_list="0-1",
            node_list="0-1",
        )
    )
    path = write(tmp_path, text)
    topo = read_hwloc_xml(str(path))
    assert topo == hwloc_view(path).topology
    # MCDRAM node 1 is memory-only: the GPU's nodeset holds one node with CPUs.
    assert node_cpus(topo) == {0: cpus("0-1"), 1: frozenset()}
    assert topo.gpus == (Gpu("0000:03:00.0", "nvidia", 0, cpus("0-1")),)


@pytest.mark.parametrize(
    ("outer", "expected_level"),
    [
        ({"type": "L3iCache", "depth": "3"}, 2),  # instruction cache by name
        ({"type": "L3Cache", "depth": "3", "cache_type": "2"}, 2),  # by cache_type
        ({"type": "L3Cache", "depth": "3", "cache_type": "1"}, 3),  # data cache counts
        ({"type": "MemCache", "depth": "1"}, 2),  # memory-side cache does not
    ],
)
def test_highest_cache_level_rules(tmp_path: Path, outer: dict[str, str], expected_level: int) -> None:
    kind = outer.pop("type")
    core = obj("Core", pu(0), pu(1), cpu_list="0-1", node_list="0", os_index="0")
    l2 = obj("L2Cache", core, cpu_list="0-1", node_list="0", depth="2", cache_type="0")
    text = document(
        machine(
            obj("NUMANode", cpu_list="0-1", node_list="0", os_index="0", local_memory="1024"),
            obj(kind, l2, cpu_list="0-1", node_list="0", **outer),
            cpu_list="0-1",
            node_list="0",
        )
    )
    topo = read_hwloc_xml(str(write(tmp_path, text)))
    assert topo.l3_groups == (CacheGroup(expected_level, cpus("0-1")),)


# ------------------------------------------------------------ memory-only NUMA nodes

MEMORY_SUBTYPES = [None, "HBM", "GPUMemory", "MCDRAM", "CXL-DRAM", "NVM"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    layout=st.lists(
        st.tuples(st.integers(1, 4), st.lists(st.sampled_from(MEMORY_SUBTYPES), max_size=3)), min_size=1, max_size=4
    ),
    dram_subtype=st.sampled_from([None, "DRAM"]),
    machine_level=st.lists(st.sampled_from(MEMORY_SUBTYPES), max_size=2),
    gap=st.integers(0, 240),
)
def test_memory_nodes_never_share_cpus_with_dram_nodes(
    tmp_path: Path,
    layout: list[tuple[int, list[str | None]]],
    dram_subtype: str | None,
    machine_level: list[str | None],
    gap: int,
) -> None:
    """Packages of 1-4 CPUs, each with its DRAM node and CPU-less nodes (HBM, GPU memory,
    CXL, or no subtype at all) hung beside it, and more at the Machine level, all with
    ids above the DRAM nodes' (Linux numbers nodes with CPUs first): the reading is what
    Linux's sysfs says, each package's CPUs in its DRAM node only, every other node
    memory-only with no CPUs."""
    packages, extras, expected = [], [], {}
    next_cpu, next_extra = 0, len(layout) + gap
    for number, (size, beside) in enumerate(layout):
        cpu_list = f"{next_cpu}-{next_cpu + size - 1}"
        next_cpu += size
        dram = {"subtype": dram_subtype} if dram_subtype else {}
        children = [obj("NUMANode", cpu_list=cpu_list, node_list=str(number), os_index=str(number), **dram)]
        expected[number] = NumaNode(number, cpus(cpu_list))
        for subtype in beside:
            extra = {"subtype": subtype} if subtype else {}
            children.append(
                obj("NUMANode", cpu_list=cpu_list, node_list=str(next_extra), os_index=str(next_extra), **extra)
            )
            expected[next_extra] = NumaNode(next_extra, frozenset(), memory_only=True)
            next_extra += 1
        children.append(obj("Core", *(pu(c) for c in cpus(cpu_list)), cpu_list=cpu_list, node_list=str(number)))
        packages.append(obj("Package", *children, cpu_list=cpu_list, node_list=str(number), os_index=str(number)))
    all_cpus = f"0-{next_cpu - 1}"
    for subtype in machine_level:
        extra = {"subtype": subtype} if subtype else {}
        extras.append(obj("NUMANode", cpu_list=all_cpus, node_list=str(next_extra), os_index=str(next_extra), **extra))
        expected[next_extra] = NumaNode(next_extra, frozenset(), memory_only=True)
        next_extra += 1
    path = write(tmp_path, document(machine(*extras, *packages, cpu_list=all_cpus, node_list=f"0-{next_extra}")))
    topo = read_hwloc_xml(str(path))
    assert topo.numa_nodes == tuple(expected[n] for n in sorted(expected))
    placed = [cpu for node in topo.numa_nodes for cpu in node.cpus]
    assert sorted(placed) == sorted(topo.online_cpus)  # every CPU in exactly one node
    assert all(topo.node_of_cpu(cpu) == number for number, _ in enumerate(layout) for cpu in expected[number].cpus)


def test_every_fixture_gives_each_cpu_one_node() -> None:
    for name in ALL_FILES:
        topo = ours(name)
        placed = [cpu for node in topo.numa_nodes for cpu in node.cpus]
        assert len(placed) == len(set(placed)), name
        assert all(not n.cpus for n in topo.memory_only_nodes), name
