"""hwloc's recorded sysfs trees (``tests/fixtures/sysfs``, sources in ``SOURCES.md``): their
extraction, once per session, into pytest's tmp dir; hwloc's answers on them (its XML and
``lstopo-no-graphics`` run on a tree), parsed here independently of affmon's readers; and the
comparison of an affmon ``Topology`` with one hwloc view. The tests are
``tests/collect/test_topology_sysfs.py``'s; others read the same trees."""

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


# --------------------------------------------------------------------------------------
# Extraction (shared by every module that reads these trees): once per session, into pytest's tmp dir.

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
# hwloc 2.9's NUMA memory and distances (tests/collect/test_topology_numa_distances.py)


def lstopo_memory_and_distances(root: Path) -> tuple[dict[int, int], dict[int, dict[int, int]] | None]:
    """Each NUMANode's ``local_memory`` (nodes hwloc writes none for are left out) and
    the NUMALatency matrix by OS index (None when hwloc has none), from hwloc 2.9."""
    lstopo = shutil.which("lstopo-no-graphics")
    if lstopo is None:
        pytest.fail("lstopo-no-graphics is missing: install Debian's hwloc (tests/run does)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HWLOC_")}
    env["HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES"] = "1"
    argv = [lstopo, "--if", "fsroot", "-i", str(root), "--disallowed", "--whole-io", "--of", "xml", "-"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    top = ET.fromstring(proc.stdout)
    memory = {
        int(o.get("os_index", "")): int(o.get("local_memory", ""))
        for o in top.iter("object")
        if o.get("type") == "NUMANode" and o.get("local_memory") is not None
    }
    matrix = None
    for d in top.findall("distances2"):
        if d.get("type") == "NUMANode" and d.get("name") == "NUMALatency":
            assert d.get("indexing") == "os"
            ids = [int(w) for e in d.findall("indexes") for w in (e.text or "").split()]
            values = [int(w) for e in d.findall("u64values") for w in (e.text or "").split()]
            assert len(values) == len(ids) ** 2
            matrix = {a: {b: values[i * len(ids) + j] for j, b in enumerate(ids)} for i, a in enumerate(ids)}
    return memory, matrix
