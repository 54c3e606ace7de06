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
import re
import shutil
from pathlib import Path

import pytest

import affmon.collect.sysfs_topology as sysfs_topology
from affmon.collect.sysfs_topology import read_topology
from affmon.core.errors import ParseError, SourceError
from affmon.core.model.cpuset import parse_cpulist
from tests.helpers.topology_trees import (
    FIXTURES,
    TREES,
    HwlocView,
    Obj,
    compare_cpu_side,
    compare_gpus,
    extract_tree,
    lstopo_view,
    parse_hwloc_xml,
)


def cpus(text: str) -> frozenset[int]:
    return parse_cpulist(text)


@pytest.fixture(scope="session")
def tree(tmp_path_factory):
    return lambda name: extract_tree(tmp_path_factory, name)


# --------------------------------------------------------------------------------------
# The expected output shipped with each tree, parsed here.


def hwloc_mask(text: str) -> frozenset[int]:
    """hwloc's bitmap spelling: 32-bit words, most significant first, ``0x`` on each,
    an empty word meaning 0 (``0xfc000000,,,,,,,0x00000101``)."""
    value = 0
    for word in text.split(","):
        value = (value << 32) | (int(word, 16) if word else 0)
    return frozenset(bit for bit in range(value.bit_length()) if value >> bit & 1)


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
    mems = cpus("0-5")  # the step's cpuset.mems.effective, as the tree recorded it
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
