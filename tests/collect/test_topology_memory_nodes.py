"""Memory-only NUMA nodes read the same from sysfs and from hwloc XML, and are never a home.

Linux gives a node without CPUs of its own (a GPU's memory on POWER9 and Grace Hopper,
KNL's MCDRAM, HBM, CXL) an empty ``cpulist``; hwloc hangs it beside or above the DRAM node
of its locality and gives it that node's cpuset. Both readers must say the same: no CPUs,
``memory_only`` set, and no CPU in two nodes.

Every recorded tree is read twice here: by ``read_topology`` and by ``read_hwloc_xml`` on
the XML that hwloc 2.9 (``lstopo-no-graphics --if fsroot``) writes for the same tree, with
the NVIDIA GPU memory nodes kept (``HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES=1``). The two made-up
trees (``tests/fixtures/sysfs/make_trees.py``) are also checked against hwloc's own
reading of them, parsed independently of affmon (``tests/collect/test_topology_sysfs.py``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from affmon.collect.hwloc_xml import read_hwloc_xml
from affmon.collect.sysfs_topology import read_topology
from affmon.core.model.cpuset import parse_cpulist
from affmon.core.model.topology import Gpu, NumaNode, Topology
from tests.helpers.topology_trees import (
    FIXTURES,
    TREES,
    compare_cpu_side,
    compare_gpus,
    extract_tree,
    lstopo_view,
)

XML_FIXTURES = Path(__file__).parent.parent / "fixtures" / "hwloc_xml"


def cpus(text: str) -> frozenset[int]:
    return parse_cpulist(text)


@pytest.fixture(scope="session")
def tree(tmp_path_factory: pytest.TempPathFactory):
    return lambda name: extract_tree(tmp_path_factory, name)


_XML_OF_TREE: dict[str, Topology] = {}


def hwloc_xml_of(root: Path, tmp_path_factory: pytest.TempPathFactory) -> Topology:
    """``read_hwloc_xml`` of the XML hwloc 2.9 exports for the tree at ``root``."""
    key = str(root)
    if key not in _XML_OF_TREE:
        lstopo = shutil.which("lstopo-no-graphics")
        if lstopo is None:
            pytest.fail("lstopo-no-graphics is missing: install Debian's hwloc (tests/run does)")
        out = tmp_path_factory.mktemp("lstopo-xml") / "topology.xml"
        env = {k: v for k, v in os.environ.items() if not k.startswith("HWLOC_")}
        env["HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES"] = "1"
        argv = [lstopo, "--if", "fsroot", "-i", key, "--disallowed", "--whole-io", "--of", "xml", str(out)]
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        _XML_OF_TREE[key] = read_hwloc_xml(str(out))
    return _XML_OF_TREE[key]


def nodes_of(topo: Topology) -> list[tuple[int, frozenset[int], bool]]:
    return [(n.id, n.cpus, n.memory_only) for n in topo.numa_nodes]


def assert_one_node_per_cpu(topo: Topology) -> None:
    placed = [cpu for node in topo.numa_nodes for cpu in node.cpus]
    assert len(placed) == len(set(placed)), "a CPU is in two NUMA nodes"
    assert all(not node.cpus for node in topo.memory_only_nodes)


# ---------------------------------------------------------------- both readers agree


@pytest.mark.parametrize("name", sorted(TREES))
def test_sysfs_and_hwloc_xml_readings_agree_on_nodes(name: str, tree, tmp_path_factory) -> None:
    root = tree(name)
    from_sysfs = read_topology(str(root))
    from_xml = hwloc_xml_of(root, tmp_path_factory)
    assert_one_node_per_cpu(from_sysfs)
    assert_one_node_per_cpu(from_xml)
    assert nodes_of(from_xml) == nodes_of(from_sysfs)
    assert from_xml.online_cpus == from_sysfs.online_cpus
    assert from_xml.cores == from_sysfs.cores
    assert from_xml.l3_groups == from_sysfs.l3_groups
    # GPUs where hwloc could tell the vendor (nvidiagpunumanodes lost its vendor files).
    known = {g.pci_bus_id for g in from_xml.gpus}
    assert [g for g in from_sysfs.gpus if g.pci_bus_id in known] == list(from_xml.gpus)


def test_trees_with_memory_only_nodes_are_among_them() -> None:
    """The agreement above covers real and made-up CPU-less nodes, not only plain machines."""
    with_memory_only = {"gpunuma": list(range(250, 256)), "gh200x2": [*range(2, 18)]}
    for name, ids in with_memory_only.items():
        with tarfile.open(FIXTURES / f"{TREES[name]}.tar.bz2") as tar:
            cpulists = {
                m.name.split("/")[-2]: tar.extractfile(m).read().strip()  # type: ignore[union-attr]
                for m in tar.getmembers()
                if m.name.endswith("/cpulist") and "/system/node/node" in m.name
            }
        assert sorted(int(k[4:]) for k, v in cpulists.items() if not v) == ids


# ------------------------------------------------------ the Grace-Hopper-like machine


def test_gh200x2_like(tree) -> None:
    root = tree("gh200x2")
    topo = read_topology(str(root))
    # The machine (make_trees.py): two Grace CPUs of 72 cores, nodes 0 and 1; GPU memory
    # nodes 2 and 10; CPU-less, memory-less MIG nodes 3-9 and 11-17.
    assert [(n.id, n.cpus) for n in topo.cpu_numa_nodes] == [(0, cpus("0-71")), (1, cpus("72-143"))]
    assert [n.id for n in topo.memory_only_nodes] == list(range(2, 18))
    assert [(g.level, g.cpus) for g in topo.l3_groups] == [(3, cpus("0-71")), (3, cpus("72-143"))]
    assert [(g.pci_bus_id, g.numa_node, g.local_cpus) for g in topo.gpus] == [
        ("0009:01:00.0", 0, cpus("0-71")),
        ("0019:01:00.0", 1, cpus("72-143")),
    ]
    assert topo.home_node_of(cpus("0-71")) == 0 and topo.home_node_of(cpus("70-73")) is None
    hw = lstopo_view(root)
    compare_cpu_side(topo, hw, topo.online_cpus)
    compare_gpus(topo, hw)
    # hwloc names each GPU memory node after its GPU and hangs it from the GPU's Grace,
    # giving it that Grace's CPUs; Linux (and affmon) gives it none.
    for bus, node_id in (("0009:01:00.0", 2), ("0019:01:00.0", 10)):
        node = hw.numa[node_id]
        assert node.subtype == "GPUMemory" and node.attrs["PCIBusID"] == bus
        assert hw.node_cpus(node_id) == topo.gpu(bus).local_cpus  # type: ignore[union-attr]
        memory = int(node.attrs["local_memory"])  # bytes, from the node's MemTotal
        assert topo.node(node_id) == NumaNode(node_id, frozenset(), memory_only=True, memory_bytes=memory)
    assert set(hw.numa) == {n.id for n in topo.numa_nodes}


# --------------------------------------------------------------- the EPYC NPS4 machine


def test_epyc_corona_nps4_tree_reads_as_its_hwloc_xml(tree) -> None:
    """The tree written from corona's hwloc XML reads, through sysfs, as the XML does:
    eight nodes of six cores (SMT +48), two L3 (CCX) per node, four AMD GPUs."""
    root = tree("corona")
    topo = read_topology(str(root))
    source = read_hwloc_xml(str(XML_FIXTURES / "mpibind-xml__epyc-corona.xml"))
    assert {**topo.to_json(), "source": None} == {**source.to_json(), "source": None}
    assert topo.l3_groups == source.l3_groups and topo.numa_nodes == source.numa_nodes
    assert len(topo.cpu_numa_nodes) == 8 and len(topo.l3_groups) == 16
    for node in topo.numa_nodes:
        inside = [g.cpus for g in topo.l3_groups if g.cpus <= node.cpus]
        assert len(inside) == 2 and frozenset().union(*inside) == node.cpus
    assert {g.pci_bus_id: g.numa_node for g in topo.gpus} == {
        "0000:13:00.0": 1,
        "0000:23:00.0": 2,
        "0000:53:00.0": 5,
        "0000:73:00.0": 7,
    }
    hw = lstopo_view(root)
    compare_cpu_side(topo, hw, topo.online_cpus)
    compare_gpus(topo, hw)
    assert set(hw.numa) == {n.id for n in topo.numa_nodes}


# --------------------------------------------- a GPU whose reported node is memory-only


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")


def two_node_tree(root: Path, gpu_node: str, gpu_local: str) -> None:
    """CPUs 0-3: node 0 = 0-1, node 1 = 2-3, node 2 memory-only; one NVIDIA GPU."""
    files = {
        "sys/devices/system/cpu/online": "0-3",
        "sys/devices/system/node/node0/cpulist": "0-1",
        "sys/devices/system/node/node1/cpulist": "2-3",
        "sys/devices/system/node/node2/cpulist": "",
        "sys/bus/pci/devices/0009:01:00.0/class": "0x030200",
        "sys/bus/pci/devices/0009:01:00.0/vendor": "0x10de",
        "sys/bus/pci/devices/0009:01:00.0/numa_node": gpu_node,
        "sys/bus/pci/devices/0009:01:00.0/local_cpulist": gpu_local,
    }
    write(root, files)


@pytest.mark.parametrize(
    ("gpu_node", "gpu_local", "expected"),
    [
        ("2", "2-3", 1),  # memory-only node named: the node of the GPU's CPUs
        ("2", "1-2", None),  # ... whose CPUs span two nodes: unknown, not a guess
        ("1", "2-3", 1),  # a CPU node is kept
        ("-1", "2-3", None),  # the firmware did not say: unknown, as before
    ],
)
def test_gpu_on_a_memory_only_node_is_homed_by_its_cpus(
    tmp_path: Path, gpu_node: str, gpu_local: str, expected: int | None
) -> None:
    two_node_tree(tmp_path, gpu_node, gpu_local)
    topo = read_topology(str(tmp_path))
    assert topo.node(2) == NumaNode(2, frozenset(), memory_only=True)
    assert [g.numa_node for g in topo.gpus] == [expected]


def test_offline_cpus_do_not_make_a_node_memory_only(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "sys/devices/system/cpu/online": "0-1",
            "sys/devices/system/node/node0/cpulist": "0-1",
            "sys/devices/system/node/node1/cpulist": "2-3",  # all offline
        },
    )
    topo = read_topology(str(tmp_path))
    assert nodes_of(topo) == [(0, cpus("0-1"), False), (1, frozenset(), False)]


# ------------------------------------------------------------------- the core's rules


def gh_like() -> Topology:
    return Topology.build(
        source="test",
        online_cpus=cpus("0-7"),
        allowed_cpus=cpus("0-7"),
        numa_nodes=[
            NumaNode(0, cpus("0-3")),
            NumaNode(1, cpus("4-7")),
            NumaNode(2, frozenset(), memory_only=True),
            NumaNode(3, frozenset(), memory_only=True),
        ],
        packages=[],
        cores=[],
        l3_groups=[],
        gpus=[Gpu("0009:01:00.0", "nvidia", 2, cpus("0-3")), Gpu("0019:01:00.0", "nvidia", 3, cpus("3-4"))],
    )


def test_build_never_leaves_a_gpu_on_a_memory_only_node() -> None:
    topo = gh_like()
    assert [(g.pci_bus_id, g.numa_node) for g in topo.gpus] == [("0009:01:00.0", 0), ("0019:01:00.0", None)]
    assert [n.id for n in topo.cpu_numa_nodes] == [0, 1]
    assert topo.nodes_of(cpus("0-7")) == (0, 1)


@pytest.mark.parametrize(("cpu_list", "expected"), [("0-3", 0), ("5", 1), ("3-4", None), ("", None), ("0,9", None)])
def test_home_node_of(cpu_list: str, expected: int | None) -> None:
    assert gh_like().home_node_of(cpus(cpu_list)) == expected


def test_gpu_home_node() -> None:
    topo = gh_like()
    assert topo.gpu_home_node(2, cpus("4-7")) == 1
    assert topo.gpu_home_node(2, None) is None
    assert topo.gpu_home_node(0, cpus("4-7")) == 0  # a CPU node is what the source said
    assert topo.gpu_home_node(None, cpus("0-3")) is None  # unknown is never guessed
    assert topo.gpu_home_node(9, cpus("0-3")) == 9  # a node the topology lacks: kept


def test_memory_only_node_cannot_hold_cpus() -> None:
    with pytest.raises(ValueError, match="memory-only NUMA node 2"):
        NumaNode(2, cpus("0"), memory_only=True)


def test_json_marks_only_memory_only_nodes() -> None:
    assert gh_like().to_json()["numa_nodes"] == [
        {"id": 0, "cpus": "0-3", "memory_bytes": None},
        {"id": 1, "cpus": "4-7", "memory_bytes": None},
        {"id": 2, "cpus": "", "memory_only": True, "memory_bytes": None},
        {"id": 3, "cpus": "", "memory_only": True, "memory_bytes": None},
    ]
