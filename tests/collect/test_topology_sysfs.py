"""``read_topology`` on hwloc's recorded sysfs trees, checked against hwloc's own answers.

Each of hwloc's six trees in ``tests/fixtures/sysfs`` (sources in ``SOURCES.md``) is read by
affmon and compared with hwloc two independent ways:

1. the expected output shipped with the tree by the hwloc developers (hwloc master,
   3.0 XML or ``lstopo`` console text), parsed here;
2. ``lstopo-no-graphics`` (Debian's hwloc 2.9) run on the extracted tree with
   ``--disallowed`` (what hwloc 1.x called ``--whole-system``: CPUs and nodes outside
   the cgroup are shown, ``allowed_cpuset`` says which are allowed) and ``--whole-io``.

Where affmon and hwloc disagree on purpose the test says so and asserts both sides:

* CPU-less NUMA nodes (GPU memory 250-255): sysfs gives them no CPUs and affmon reports
  them memory-only with an empty set; hwloc attaches each to a CPU-bearing parent and
  gives it that parent's cpuset.
* cgroup v1 (``nvidiagpunumanodes``): affmon reads ``cpuset.effective_cpus`` (what the
  kernel applies, 0-87 here), hwloc reads ``cpuset.cpus`` (0-175), so hwloc allows
  0-15,88-103 where affmon allows 0-15.
* A GPU whose ``vendor`` file is missing from the tree (``nvidiagpunumanodes``): hwloc
  shows vendor 0000; affmon recognises it from ``/proc/driver/nvidia/gpus``.
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
import subprocess
import tarfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import affmon.collect.sysfs_topology as sysfs_topology
from affmon.collect.cgroup import cgroup_mems
from affmon.collect.sysfs_topology import read_topology
from affmon.core.errors import ParseError, SourceError
from affmon.core.model.cpuset import parse_cpulist
from affmon.core.model.topology import Topology

FIXTURES = Path(__file__).parent.parent / "fixtures" / "sysfs"

# short name -> file stem in FIXTURES
TREES = {
    "offlines": "hwloc-sysfs__16em64t-4s2c2t-offlines",
    "cgroup2": "hwloc-sysfs__32amd64-4s2n4c-cgroup2",
    "pcilocality": "hwloc-sysfs__40intel64-2g2n4c+pcilocality",
    "sparse": "hwloc-sysfs__48amd64-4pa2n6c-sparse",
    "gb10": "hwloc-sysfs__nvidia-dgx-gb10",
    "gpunuma": "hwloc-sysfs__nvidiagpunumanodes",
    # gathered by affmon's team on the lent GPU machines (tests/core/test_multi_gpu.py)
    "h200x2": "affmon-sysfs__h200x2-vm",
    "h200x4": "affmon-sysfs__h200x4-vm",
    # written by tests/fixtures/sysfs/make_trees.py (tests/collect/test_topology_memory_nodes.py)
    "gh200x2": "affmon-sysfs__gh200x2-like",
    "corona": "affmon-sysfs__epyc-corona-nps4",
}

# Independent of affmon's own tables: PCI display classes of GPUs, and GPU vendors.
GPU_CLASSES = {0x0300, 0x0302, 0x0380}
GPU_VENDOR_IDS = {0x10DE: "nvidia", 0x1002: "amd"}


def cpus(text: str) -> frozenset[int]:
    return parse_cpulist(text)


# --------------------------------------------------------------------------------------
# Extraction (shared with tests/collect/test_cgroup.py): once per session, into pytest's tmp dir.

_EXTRACTED: dict[str, Path] = {}


def _check_member(member: tarfile.TarInfo) -> None:
    """The checks of tarfile's "data" filter that matter here, for Pythons without it."""
    parts = member.name.split("/")
    if member.name.startswith("/") or ".." in parts:
        raise AssertionError(f"unsafe path in fixture tarball: {member.name}")
    if member.issym() or member.islnk():
        base = posixpath.dirname(member.name) if member.issym() else ""
        target = posixpath.normpath(posixpath.join(base, member.linkname))
        if member.linkname.startswith("/") or target.startswith(".."):
            raise AssertionError(f"link leaves the tree: {member.name} -> {member.linkname}")
    elif not (member.isfile() or member.isdir()):
        raise AssertionError(f"special file in fixture tarball: {member.name}")


def extract_tree(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """The extracted root directory (with ``sys/`` and ``proc/``) of tree ``name``."""
    if name in _EXTRACTED:
        return _EXTRACTED[name]
    dest = tmp_path_factory.mktemp(f"sysfs-{name}")
    with tarfile.open(FIXTURES / f"{TREES[name]}.tar.bz2") as tar:
        members = tar.getmembers()
        tops = {m.name.split("/")[0] for m in members}
        assert len(tops) == 1, f"{name}: expected one top directory, got {sorted(tops)}"
        if hasattr(tarfile, "data_filter"):  # 3.12, and 3.8-3.11 security releases
            tar.extractall(dest, filter="data")
        else:
            for member in members:
                _check_member(member)
            tar.extractall(dest, members=members)
    root = dest / tops.pop()
    _EXTRACTED[name] = root
    return root


@pytest.fixture(scope="session")
def tree(tmp_path_factory):
    return lambda name: extract_tree(tmp_path_factory, name)


# --------------------------------------------------------------------------------------
# hwloc's answers, parsed here independently of affmon's readers.


@dataclass
class Obj:
    type: str
    os_index: int | None = None
    subtype: str | None = None
    attrs: dict[str, str] = field(default_factory=dict)
    children: list[Obj] = field(default_factory=list)
    parent: Obj | None = None

    def walk(self):
        yield self
        for child in self.children:
            yield from child.walk()

    def pus(self) -> frozenset[int]:
        return frozenset(o.os_index for o in self.walk() if o.type == "PU" and o.os_index is not None)

    def ancestor(self, skip: set[str]) -> Obj:
        obj = self.parent
        while obj is not None and obj.type in skip:
            obj = obj.parent
        assert obj is not None, f"{self.type} has no ancestor outside {skip}"
        return obj

    def ancestor_of_type(self, type_: str) -> Obj | None:
        obj = self.parent
        while obj is not None and obj.type != type_:
            obj = obj.parent
        return obj


def hwloc_mask(text: str) -> frozenset[int]:
    """hwloc's bitmap spelling: 32-bit words, most significant first, ``0x`` on each,
    an empty word meaning 0 (``0xfc000000,,,,,,,0x00000101``)."""
    value = 0
    for word in text.split(","):
        value = (value << 32) | (int(word, 16) if word else 0)
    return frozenset(bit for bit in range(value.bit_length()) if value >> bit & 1)


def parse_hwloc_xml(text: str) -> Obj:
    def convert(elem: ET.Element, parent: Obj | None) -> Obj:
        attrs = dict(elem.attrib)
        for info in elem.findall("info"):
            attrs[info.get("name", "")] = info.get("value", "")
        os_index = attrs.get("os_index")
        obj = Obj(
            type=attrs["type"],
            os_index=None if os_index is None else int(os_index),
            subtype=attrs.get("subtype"),
            attrs=attrs,
            parent=parent,
        )
        obj.children = [convert(child, obj) for child in elem.findall("object")]
        return obj

    top = ET.fromstring(text).find("object")
    assert top is not None and top.get("type") == "Machine"
    return convert(top, None)


_CONSOLE_LINE = re.compile(
    r"^(?P<indent> *)(?P<type>[A-Za-z0-9]+)(?:\((?P<sub>[^)]*)\))?(?: L#\d+)?(?: \((?P<attrs>.*)\))?$"
)
_CONSOLE_TYPES = {"PCI": "PCIDev", "HostBridge": "Bridge", "PCIBridge": "Bridge"}


def parse_hwloc_console(text: str) -> tuple[Obj, frozenset[int]]:
    """The object tree of ``lstopo`` console text (``-p``-style ``P#`` physical ids, two
    spaces of indentation per level), and the CPUs it says are not represented."""
    lines = text.splitlines()
    assert lines[0].startswith("Machine")
    stack: list[tuple[int, Obj]] = []
    machine: Obj | None = None
    for line in lines:
        if machine is not None and not line.startswith(" "):
            break  # end of the tree: "depth 0: ..." and the summaries
        match = _CONSOLE_LINE.match(line)
        assert match, f"unparsed lstopo line {line!r}"
        attrs_text = match["attrs"] or ""
        attrs = {k: v.strip('"') for k, v in re.findall(r'(\w+)=("[^"]*"|\S+)', attrs_text)}
        physical = re.match(r"P#(\d+)", attrs_text)
        obj = Obj(
            type=_CONSOLE_TYPES.get(match["type"], match["type"]),
            os_index=int(physical[1]) if physical else None,
            subtype=match["sub"],
            attrs=attrs,
        )
        depth = len(match["indent"]) // 2
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            obj.parent = stack[-1][1]
            obj.parent.children.append(obj)
        else:
            machine = obj
        stack.append((depth, obj))
    missing = re.search(r"processors not represented in topology: (\S+)", text)
    assert machine is not None
    return machine, hwloc_mask(missing[1]) if missing else frozenset()


_CACHE_TYPE = re.compile(r"L(\d+)([id]?)Cache")


@dataclass
class HwlocView:
    """What a hwloc topology says, in the terms affmon compares."""

    machine: Obj
    pus: frozenset[int]
    numa: dict[int, Obj]
    packages: dict[int, Obj]
    cores: list[Obj]
    caches: dict[int, list[Obj]]  # level -> data/unified cache objects
    pcidevs: dict[str, Obj]

    @staticmethod
    def of(machine: Obj) -> HwlocView:
        objs = list(machine.walk())
        caches: dict[int, list[Obj]] = {}
        for obj in objs:
            match = _CACHE_TYPE.fullmatch(obj.type)
            if match and match[2] != "i" and obj.attrs.get("cache_type") != "2":
                caches.setdefault(int(match[1]), []).append(obj)
        return HwlocView(
            machine=machine,
            pus=machine.pus(),
            numa={o.os_index: o for o in objs if o.type == "NUMANode" and o.os_index is not None},
            packages={o.os_index: o for o in objs if o.type == "Package" and o.os_index is not None},
            cores=[o for o in objs if o.type == "Core"],
            caches=caches,
            pcidevs={_busid(o): o for o in objs if o.type == "PCIDev"},
        )

    def node_cpus(self, node: int) -> frozenset[int]:
        """A NUMA node's CPUs as hwloc places it: the PUs of the object it hangs from."""
        return self.numa[node].ancestor({"NUMANode", "MemCache"}).pus()

    def pci_locality(self, busid: str) -> frozenset[int]:
        return self.pcidevs[busid].ancestor({"Bridge", "PCIDev", "OSDev", "Misc"}).pus()

    def pci_ids(self, busid: str) -> tuple[int, int]:
        """(16-bit class, vendor) of a PCI device, from the XML or the console."""
        obj = self.pcidevs[busid]
        if "pci_type" in obj.attrs:  # "0300 [102b:0532] [1028:02d3] 0a 00"
            m = re.match(r"([0-9a-f]{4}) \[([0-9a-f]{4}):", obj.attrs["pci_type"])
        else:  # console: class=0300(VGA) id=0000:0000
            m = re.match(r"([0-9a-f]{4})", obj.attrs["class"])
            m2 = re.match(r"([0-9a-f]{4}):", obj.attrs["id"])
            assert m and m2
            return int(m[1], 16), int(m2[1], 16)
        assert m, obj.attrs
        return int(m[1], 16), int(m[2], 16)

    def top_cache(self) -> tuple[int, set[frozenset[int]]]:
        level = max(self.caches)
        return level, {c.pus() for c in self.caches[level] if c.pus()}


def _busid(obj: Obj) -> str:
    return (obj.attrs.get("pci_busid") or obj.attrs["busid"]).lower()


_LSTOPO_CACHE: dict[str, HwlocView] = {}


def lstopo_view(root: Path) -> HwlocView:
    """hwloc 2.9's reading of the tree, with disallowed CPUs/nodes and all PCI devices."""
    key = str(root)
    if key in _LSTOPO_CACHE:
        return _LSTOPO_CACHE[key]
    lstopo = shutil.which("lstopo-no-graphics")
    if lstopo is None:
        pytest.fail("lstopo-no-graphics is missing: install Debian's hwloc (tests/run does)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HWLOC_")}
    # show the GPU-memory NUMA nodes of POWER9+V100 (hidden by default, see the -kept test)
    env["HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES"] = "1"
    argv = [lstopo, "--if", "fsroot", "-i", key, "--of", "xml", "--disallowed", "--whole-io", "-"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    view = HwlocView.of(parse_hwloc_xml(proc.stdout))
    _LSTOPO_CACHE[key] = view
    return view


def expected_view(name: str) -> tuple[HwlocView, frozenset[int]]:
    """The expected lstopo output shipped with tree ``name`` (XML or console), and the CPUs
    it lists as not represented (console only)."""
    found = sorted(FIXTURES.glob(f"{TREES[name]}.expected-lstopo*"))
    assert len(found) == 1, found
    text = found[0].read_text()
    if found[0].suffix == ".xml":
        return HwlocView.of(parse_hwloc_xml(text)), frozenset()
    machine, missing = parse_hwloc_console(text)
    return HwlocView.of(machine), missing


# --------------------------------------------------------------------------------------
# The comparison of one affmon Topology with one hwloc view.


def compare_cpu_side(topo: Topology, hw: HwlocView, within: frozenset[int]) -> None:
    """Packages, cores, highest-level caches and CPU-bearing NUMA nodes, as seen inside
    ``within`` (the online CPUs for an unrestricted hwloc view; the allowed CPUs for a
    view hwloc restricted to the cgroup)."""

    def restricted(groups):
        return {g & within for g in groups if g & within}

    assert hw.pus == within
    assert {p.id: p.cpus & within for p in topo.packages if p.cpus & within} == {
        i: o.pus() for i, o in hw.packages.items() if o.pus()
    }
    assert restricted(c.cpus for c in topo.cores) == {o.pus() for o in hw.cores if o.pus()}
    for core in hw.cores:
        if core.pus():
            package = core.ancestor_of_type("Package")
            ours = [c for c in topo.cores if c.cpus & within == core.pus()]
            assert [c.package for c in ours] == [-1 if package is None else package.os_index]
    level, groups = hw.top_cache()
    assert {g.level for g in topo.l3_groups} == {level}
    assert restricted(g.cpus for g in topo.l3_groups) == groups
    for node in topo.numa_nodes:
        if node.cpus and node.cpus & within:
            assert node.cpus & within == hw.node_cpus(node.id), f"node {node.id}"


def compare_gpus(topo: Topology, hw: HwlocView, driver_listed: frozenset[str] | set[str] = frozenset()) -> None:
    """Our GPUs are hwloc's PCI display devices of a GPU vendor (plus those the NVIDIA
    driver lists when the tree lost the vendor file), with hwloc's locality."""
    expected = set()
    for busid in hw.pcidevs:
        pci_class, vendor = hw.pci_ids(busid)
        if pci_class in GPU_CLASSES and (vendor in GPU_VENDOR_IDS or busid in driver_listed):
            expected.add(busid)
    assert {g.pci_bus_id for g in topo.gpus} == expected
    for gpu in topo.gpus:
        assert gpu.local_cpus is not None
        assert gpu.local_cpus & topo.online_cpus == hw.pci_locality(gpu.pci_bus_id)


# --------------------------------------------------------------------------------------
# Per tree: the shipped expected output, lstopo 2.9, and what its source says of the machine.


def test_offlines(tree):
    root = tree("offlines")
    topo = read_topology(str(root))
    present = cpus("0-15")  # cpu0..cpu15 directories
    # The machine: offline CPUs (cpuN/online = 0), no cpu/online file, no node0/cpulist
    assert not (root / "sys/devices/system/cpu/online").exists()
    assert topo.online_cpus == present - {2, 5, 13, 14}
    assert topo.allowed_cpus == topo.online_cpus  # no cgroup information in this tree
    assert [(n.id, n.cpus) for n in topo.numa_nodes] == [(0, topo.online_cpus)]
    assert [p.id for p in topo.packages] == [0, 1, 2, 3]
    assert len(topo.cores) == 7  # 8 physical cores; cpu5+cpu13 (one whole core) offline
    assert {len(c.cpus) for c in topo.cores} == {1, 2}
    # 1. shipped console (hwloc master, no special environment): the same machine view
    expected, not_represented = expected_view("offlines")
    assert not_represented == present - topo.online_cpus
    compare_cpu_side(topo, expected, topo.online_cpus)
    assert set(expected.numa) == {0}
    # 2. lstopo 2.9
    hw = lstopo_view(root)
    compare_cpu_side(topo, hw, topo.online_cpus)
    assert hwloc_mask(hw.machine.attrs["complete_cpuset"]) == present
    assert hwloc_mask(hw.machine.attrs["allowed_cpuset"]) == topo.allowed_cpus
    assert set(hw.numa) == {n.id for n in topo.numa_nodes}
    compare_gpus(topo, hw)


def test_cgroup2(tree):
    root = tree("cgroup2")
    topo = read_topology(str(root))
    # The machine: 4 sockets, 8 nodes n = 4n..4n+3, no SMT; Slurm cgroup v2 cpus 0-5, mems 0-5
    assert topo.online_cpus == cpus("0-31")
    assert topo.allowed_cpus == cpus("0-5")
    assert [(n.id, n.cpus) for n in topo.numa_nodes] == [(n, cpus(f"{4 * n}-{4 * n + 3}")) for n in range(8)]
    assert len(topo.packages) == 4 and len(topo.cores) == 32
    mems = cgroup_mems(str(root))
    assert mems == cpus("0-5")
    # 1. shipped XML: hwloc master in the restricted (default) view, so it only has the
    # allowed PUs and the allowed NUMA nodes; complete_cpuset still gives whole objects.
    expected, _ = expected_view("cgroup2")
    allowed = hwloc_mask(expected.machine.attrs["allowed_cpuset"])
    assert allowed == topo.allowed_cpus
    compare_cpu_side(topo, expected, topo.allowed_cpus)
    assert set(expected.numa) == {n.id for n in topo.numa_nodes} & mems
    assert hwloc_mask(expected.machine.attrs["allowed_nodeset"]) == mems
    ours_nodes = {n.id: n.cpus for n in topo.numa_nodes}
    for node_id, obj in expected.numa.items():
        assert hwloc_mask(obj.attrs["complete_cpuset"]) == ours_nodes[node_id]
    ours_packages = {p.id: p.cpus for p in topo.packages}
    for pkg_id, obj in expected.packages.items():
        assert hwloc_mask(obj.attrs["complete_cpuset"]) == ours_packages[pkg_id]
    l3 = {g.cpus for g in topo.l3_groups}
    assert {hwloc_mask(o.attrs["complete_cpuset"]) for o in expected.caches[3]} <= l3
    # 2. lstopo 2.9 with --disallowed: everything, plus the allowed masks
    hw = lstopo_view(root)
    compare_cpu_side(topo, hw, topo.online_cpus)
    assert hwloc_mask(hw.machine.attrs["allowed_cpuset"]) == topo.allowed_cpus
    assert hwloc_mask(hw.machine.attrs["allowed_nodeset"]) == mems
    assert set(hw.numa) == {n.id for n in topo.numa_nodes}
    compare_gpus(topo, hw)


def test_pcilocality(tree):
    root = tree("pcilocality")
    topo = read_topology(str(root))
    # The machine: 4 sockets, HT off, 4 nodes round-robin (node n = n, n+4, ..., n+36)
    assert topo.online_cpus == topo.allowed_cpus == cpus("0-39")  # Torque cpuset: 0-39
    assert [(n.id, n.cpus) for n in topo.numa_nodes] == [(n, frozenset(range(n, 40, 4))) for n in range(4)]
    assert [(p.id, p.cpus) for p in topo.packages] == [(n, frozenset(range(n, 40, 4))) for n in range(4)]
    assert len(topo.cores) == 40 and all(len(c.cpus) == 1 for c in topo.cores)
    # No GPU: the only display device is the BMC's Matrox VGA (vendor 0x102b).
    assert topo.gpus == ()
    # 1. shipped XML: generated with HWLOC_PCI_LOCALITY forcing buses 00-09 near the
    # first package and 40-46 near the second, so hwloc's PCI placement (and the Groups
    # it added for it) describe that override, not the tree. The CPU side is comparable.
    expected, _ = expected_view("pcilocality")
    compare_cpu_side(topo, expected, topo.online_cpus)
    assert set(expected.numa) == {0, 1, 2, 3}
    assert expected.pci_ids("0000:09:03.0") == (0x0300, 0x102B)
    compare_gpus(topo, expected)  # display devices: only the Matrox, not a GPU
    # 2. lstopo 2.9 without the override: every PCI device local to the whole machine
    hw = lstopo_view(root)
    compare_cpu_side(topo, hw, topo.online_cpus)
    assert hw.pci_locality("0000:09:03.0") == cpus("0-39")
    compare_gpus(topo, hw)
    assert set(hw.numa) == {0, 1, 2, 3}


def test_pcilocality_gpu_numa_minus_one(tree, tmp_path):
    """The recorded fact "every PCI numa_node is -1, local_cpulist 0-39", through a GPU: the
    tree's display device, copied into a small root with its vendor made NVIDIA's."""
    source = tree("pcilocality")
    device = (source / "sys/bus/pci/devices/0000:09:03.0").resolve()
    assert (device / "numa_node").read_text().strip() == "-1"
    root = tmp_path / "root"
    (root / "sys/devices").mkdir(parents=True)
    # A copy: a link to the source tree would leave this root, and links are resolved inside it.
    shutil.copytree(source / "sys/devices/system", root / "sys/devices/system", symlinks=True)
    copy = root / "sys/bus/pci/devices/0000:09:03.0"
    copy.mkdir(parents=True)
    for name in ("class", "numa_node", "local_cpulist", "local_cpus"):
        shutil.copy(device / name, copy / name)
    (copy / "vendor").write_text("0x10de\n")
    topo = read_topology(str(root))
    assert [(g.pci_bus_id, g.vendor, g.numa_node, g.local_cpus) for g in topo.gpus] == [
        ("0000:09:03.0", "nvidia", None, cpus("0-39"))
    ]


def test_sparse(tree):
    root = tree("sparse")
    topo = read_topology(str(root))
    # The machine: 4 sockets, 8 nodes with sparse ids, 48 cores no SMT, NR_CPUS=48
    assert [n.id for n in topo.numa_nodes] == [0, 1, 2, 33, 34, 45, 72, 73]
    assert [n.cpus for n in topo.numa_nodes] == [frozenset(range(6 * i, 6 * i + 6)) for i in range(8)]
    assert topo.node_of_cpu(47) == 73
    assert [p.id for p in topo.packages] == [0, 1, 2, 3]
    assert len(topo.cores) == 48
    assert {g.level for g in topo.l3_groups} == {3} and len(topo.l3_groups) == 8
    expected, not_represented = expected_view("sparse")
    assert not_represented == frozenset()
    compare_cpu_side(topo, expected, topo.online_cpus)
    assert set(expected.numa) == {n.id for n in topo.numa_nodes}
    hw = lstopo_view(root)
    compare_cpu_side(topo, hw, topo.online_cpus)
    assert set(hw.numa) == {n.id for n in topo.numa_nodes}
    compare_gpus(topo, hw)


def test_gb10(tree):
    root = tree("gb10")
    topo = read_topology(str(root))
    # The machine: one package, one node 0-19, 20 cores without SMT, two L3 clusters
    assert topo.online_cpus == topo.allowed_cpus == cpus("0-19")
    assert [(n.id, n.cpus) for n in topo.numa_nodes] == [(0, cpus("0-19"))]
    assert [(p.id, p.cpus) for p in topo.packages] == [(36, cpus("0-19"))]  # physical_package_id 36
    assert len(topo.cores) == 20
    assert [(g.level, g.cpus) for g in topo.l3_groups] == [(3, cpus("0-9")), (3, cpus("10-19"))]
    # The integrated GB10 GPU is not on PCI in this tree.
    assert topo.gpus == ()
    expected, _ = expected_view("gb10")
    compare_cpu_side(topo, expected, topo.online_cpus)
    assert hwloc_mask(expected.machine.attrs["allowed_cpuset"]) == topo.allowed_cpus
    assert set(expected.numa) == {0}
    hw = lstopo_view(root)
    compare_cpu_side(topo, hw, topo.online_cpus)
    # cgroup2 is mounted at /sys/fs/cgroup but the tree did not record it: unknown -> online
    assert hwloc_mask(hw.machine.attrs["allowed_cpuset"]) == topo.allowed_cpus
    compare_gpus(topo, hw)


GPUNUMA_GPUS = {
    # bus id: (local CPUs, GPU-memory node hwloc names for it)
    "0004:05:00.0": ("0-15", 255),
    "0004:06:00.0": ("0-15", 254),
    "0006:00:00.0": ("0-15", 253),
    "0007:00:00.0": ("88-103", 252),
    "0035:04:00.0": ("88-103", 251),
    "0035:05:00.0": ("88-103", 250),
}


def test_gpunuma(tree):
    root = tree("gpunuma")
    topo = read_topology(str(root))
    # The machine: POWER9, CPUs trimmed to 0-15 and 88-103, SMT4; CPU nodes 0 and 8 and six
    # CPU-less GPU-memory nodes 250-255; 6 V100 on PCI.
    assert topo.online_cpus == cpus("0-15,88-103")
    assert [(n.id, n.cpus) for n in topo.numa_nodes] == [(0, cpus("0-15")), (8, cpus("88-103"))] + [
        (n, frozenset()) for n in range(250, 256)
    ]
    assert [n.id for n in topo.cpu_numa_nodes] == [0, 8]
    assert [n.id for n in topo.memory_only_nodes] == list(range(250, 256))
    assert [(p.id, p.cpus) for p in topo.packages] == [(0, cpus("0-15")), (8, cpus("88-103"))]
    assert all(len(c.cpus) == 4 for c in topo.cores) and len(topo.cores) == 8
    # cgroup v1 /jjh: cpuset.effective_cpus 0-87 (cpuset.cpus 0-175), effective_mems 0
    assert topo.allowed_cpus == cpus("0-15")
    assert cgroup_mems(str(root)) == frozenset({0})
    # The tree kept only class and local_cpus of the GPUs: no vendor file (the NVIDIA
    # driver's /proc/driver/nvidia/gpus lists them), no numa_node file -> None. The GPU
    # memory nodes are not the GPUs' numa_node: that is where the GPU is attached.
    assert {g.pci_bus_id: (g.vendor, g.numa_node, g.local_cpus) for g in topo.gpus} == {
        bus: ("nvidia", None, cpus(local)) for bus, (local, _) in GPUNUMA_GPUS.items()
    }
    driver_listed = frozenset(os.listdir(root / "proc/driver/nvidia/gpus"))

    # 1. shipped console, made with HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES=1 ("kept": the GPU
    # memory nodes are kept, not a restricted view). hwloc reads cgroup v1 cpuset.cpus,
    # so it shows all 32 online PUs as allowed.
    expected, not_represented = expected_view("gpunuma")
    assert not_represented == frozenset()
    compare_cpu_side(topo, expected, topo.online_cpus)
    assert set(expected.numa) == {n.id for n in topo.numa_nodes}
    for bus, (_, mem_node) in GPUNUMA_GPUS.items():
        node = expected.numa[mem_node]
        assert node.subtype == "GPUMemory" and node.attrs["PCIBusID"].lower() == bus
        # hwloc hangs the GPU memory node from the package the GPU is local to, and gives
        # it that package's CPUs; sysfs (and affmon) gives the node no CPUs.
        assert expected.node_cpus(mem_node) == topo.gpu(bus).local_cpus
        assert topo.node(mem_node).cpus == frozenset()
    compare_gpus(topo, expected, driver_listed)
    assert all(expected.pci_ids(bus)[1] == 0 for bus in GPUNUMA_GPUS)  # hwloc: vendor 0000

    # 2. lstopo 2.9 (same environment variable)
    hw = lstopo_view(root)
    compare_cpu_side(topo, hw, topo.online_cpus)
    assert set(hw.numa) == {n.id for n in topo.numa_nodes}
    compare_gpus(topo, hw, driver_listed)
    # Deliberate difference: hwloc allows what cpuset.cpus says, affmon what the kernel
    # enforces (effective_cpus / effective_mems).
    assert hwloc_mask(hw.machine.attrs["allowed_cpuset"]) == topo.online_cpus
    assert hwloc_mask(hw.machine.attrs["allowed_nodeset"]) == {n.id for n in topo.numa_nodes}
    assert topo.allowed_cpus < topo.online_cpus


# --------------------------------------------------------------------------------------
# Hand-made trees: the degraded paths and the GPU rules.


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")


def small_cpu_tree(root: Path) -> None:
    """Two online CPUs (SMT pair), one offline, node 0, an L2 shared by the pair."""
    files = {"sys/devices/system/cpu/online": "0-1", "sys/devices/system/node/node0/cpulist": "0-2"}
    for cpu in (0, 1):
        base = f"sys/devices/system/cpu/cpu{cpu}"
        files[f"{base}/topology/physical_package_id"] = "0"
        files[f"{base}/topology/core_cpus_list"] = "0-1"
        files[f"{base}/cache/index0/level"] = "1"
        files[f"{base}/cache/index0/type"] = "Data"
        files[f"{base}/cache/index0/shared_cpu_list"] = str(cpu)
        files[f"{base}/cache/index1/level"] = "2"
        files[f"{base}/cache/index1/type"] = "Unified"
        files[f"{base}/cache/index1/shared_cpu_map"] = "3"
        files[f"{base}/cache/index2/level"] = "3"  # an instruction cache never counts
        files[f"{base}/cache/index2/type"] = "Instruction"
        files[f"{base}/cache/index2/shared_cpu_list"] = "0-1"
    files["sys/devices/system/cpu/cpu2/online"] = "0"
    write(root, files)


def test_gpu_rules(tmp_path):
    small_cpu_tree(tmp_path)
    pci = "sys/bus/pci/devices"
    write(
        tmp_path,
        {
            # NVIDIA 3D controller, firmware gave no node: -1 -> None, never 0
            f"{pci}/0000:3b:00.0/class": "0x030200",
            f"{pci}/0000:3b:00.0/vendor": "0x10de",
            f"{pci}/0000:3b:00.0/numa_node": "-1",
            f"{pci}/0000:3b:00.0/local_cpulist": "0-1",
            # AMD display controller on node 0: 0 stays 0; only the mask form of local_cpus
            f"{pci}/0000:C1:00.0/class": "0x038000",
            f"{pci}/0000:C1:00.0/vendor": "0x1002",
            f"{pci}/0000:C1:00.0/numa_node": "0",
            f"{pci}/0000:C1:00.0/local_cpus": "00000000,00000002",
            # NVIDIA VGA without numa_node or locality files: unknown
            f"{pci}/0000:af:00.0/class": "0x030000",
            f"{pci}/0000:af:00.0/vendor": "0x10de",
            # not GPUs: a BMC VGA (ASPEED), an NVIDIA bridge (NVSwitch class 0x0680),
            # a display class without vendor and without an NVIDIA driver entry
            f"{pci}/0000:02:00.0/class": "0x030000",
            f"{pci}/0000:02:00.0/vendor": "0x1a03",
            f"{pci}/0000:05:00.0/class": "0x068000",
            f"{pci}/0000:05:00.0/vendor": "0x10de",
            f"{pci}/0000:06:00.0/class": "0x030200",
        },
    )
    (tmp_path / f"{pci}/0000:07:00.0").mkdir()  # a device directory without class
    topo = read_topology(str(tmp_path))
    assert [(g.pci_bus_id, g.vendor, g.numa_node, g.local_cpus) for g in topo.gpus] == [
        ("0000:3b:00.0", "nvidia", None, cpus("0-1")),
        ("0000:af:00.0", "nvidia", None, None),
        ("0000:c1:00.0", "amd", 0, cpus("1")),
    ]
    assert topo.gpu("00000000:C1:00.0") is not None  # NVML spelling finds it
    # The NVIDIA driver's list stands in for a missing vendor file.
    write(tmp_path, {"proc/driver/nvidia/gpus/0000:06:00.0/information": "Model: x"})
    assert "0000:06:00.0" in {g.pci_bus_id for g in read_topology(str(tmp_path)).gpus}


def test_small_tree_cpu_side(tmp_path):
    small_cpu_tree(tmp_path)
    topo = read_topology(str(tmp_path))
    assert topo.source == "sysfs"
    assert topo.online_cpus == topo.allowed_cpus == cpus("0-1")
    assert [(n.id, n.cpus) for n in topo.numa_nodes] == [(0, cpus("0-1"))]  # offline cpu2 left out
    assert [(c.package, c.cpus) for c in topo.cores] == [(0, cpus("0-1"))]
    assert [(g.level, g.cpus) for g in topo.l3_groups] == [(2, cpus("0-1"))]
    assert topo.gpus == ()


def test_degraded_tree(tmp_path):
    """No cpu/online, no node directory, a CPU without topology or cache files."""
    write(
        tmp_path,
        {
            "sys/devices/system/cpu/cpu0/topology/physical_package_id": "-1",
            # the mask names offline cpu2 too: it must not end up in a core
            "sys/devices/system/cpu/cpu0/topology/thread_siblings": "00000000,0000000d",
            "sys/devices/system/cpu/cpu1/online": "1",
            "sys/devices/system/cpu/cpu2/online": "0",
            "sys/devices/system/cpu/cpu3/online": "1",
            "sys/devices/system/cpu/cpu3/topology/physical_package_id": "-1",
            "sys/devices/system/cpu/cpu3/topology/thread_siblings_list": "0,3",
            "sys/devices/system/cpu/kernel_max": "8191",
        },
    )
    topo = read_topology(str(tmp_path))
    assert topo.online_cpus == cpus("0-1,3")
    assert [(n.id, n.cpus) for n in topo.numa_nodes] == [(0, cpus("0-1,3"))]
    assert [(c.package, c.cpus) for c in topo.cores] == [(-1, cpus("0,3")), (-1, cpus("1"))]
    assert [(p.id, p.cpus) for p in topo.packages] == [(-1, cpus("0-1,3"))]
    assert topo.l3_groups == ()


def test_inconsistent_siblings_still_partition(tmp_path):
    """cpu0 says {0,1}, cpu1 says {1,2}: every online CPU ends up in exactly one core."""
    files = {"sys/devices/system/cpu/online": "0-2"}
    for cpu, siblings in ((0, "0-1"), (1, "1-2"), (2, "2")):
        files[f"sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"] = siblings
    write(tmp_path, files)
    topo = read_topology(str(tmp_path))
    placed = [cpu for core in topo.cores for cpu in core.cpus]
    assert sorted(placed) == [0, 1, 2]


def test_sparse_nodes_and_cgroup_in_small_tree(tmp_path):
    small_cpu_tree(tmp_path)
    write(
        tmp_path,
        {
            "sys/devices/system/node/node0/cpulist": "0",
            "sys/devices/system/node/node8/cpumap": "00000002",  # mask form only
            "sys/devices/system/node/node250/cpulist": "",  # GPU memory: no CPUs
            "proc/mounts": "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0",
            "proc/self/cgroup": "0::/job",
            "sys/fs/cgroup/cgroup.controllers": "cpuset cpu",
            "sys/fs/cgroup/job/cpuset.cpus.effective": "1,7",
        },
    )
    topo = read_topology(str(tmp_path))
    assert [(n.id, n.cpus) for n in topo.numa_nodes] == [(0, cpus("0")), (8, cpus("1")), (250, frozenset())]
    assert [n.memory_only for n in topo.numa_nodes] == [False, False, True]
    assert topo.allowed_cpus == cpus("1")  # cgroup 1,7 intersected with online 0-1


def test_not_a_tree(tmp_path):
    (tmp_path / "sys").mkdir()
    with pytest.raises(SourceError) as info:
        read_topology(str(tmp_path))
    message = str(info.value)
    assert "\n" not in message and str(tmp_path) in message


def test_malformed_file_names_it(tmp_path):
    small_cpu_tree(tmp_path)
    write(tmp_path, {"sys/devices/system/cpu/cpu1/topology/physical_package_id": "zero"})
    with pytest.raises(ParseError, match="cpu1/topology/physical_package_id"):
        read_topology(str(tmp_path))


def test_per_cpu_files_read_once(tree, monkeypatch):
    root = str(tree("gpunuma"))
    seen: dict[str, int] = {}
    real = sysfs_topology.read_line

    def counting(root_arg: str, path: str) -> str | None:
        seen[path] = seen.get(path, 0) + 1
        return real(root_arg, path)

    monkeypatch.setattr(sysfs_topology, "read_line", counting)
    read_topology(root)
    per_cpu = {p: n for p, n in seen.items() if re.match(r"/sys/devices/system/cpu/cpu\d+/", p)}
    assert per_cpu, "the counter saw no per-CPU read"
    assert max(per_cpu.values()) == 1, [p for p, n in per_cpu.items() if n > 1]


# --------------------------------------------------------------------------------------
# This machine.


def test_live_machine():
    topo = read_topology("/")
    online_file = Path("/sys/devices/system/cpu/online")
    if online_file.exists():
        assert topo.online_cpus == parse_cpulist(online_file.read_text())
    affinity = frozenset(os.sched_getaffinity(0))
    assert affinity <= topo.allowed_cpus <= topo.online_cpus
    # every online CPU is in exactly one core and one package
    for groups in ([c.cpus for c in topo.cores], [p.cpus for p in topo.packages]):
        flat = [cpu for group in groups for cpu in group]
        assert sorted(flat) == sorted(topo.online_cpus)
    node_cpus = [cpu for node in topo.numa_nodes for cpu in node.cpus]
    assert len(node_cpus) == len(set(node_cpus)) and set(node_cpus) <= topo.online_cpus
