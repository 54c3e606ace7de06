"""NUMA node memory, the node distance matrix and "GPUs unknown", from sysfs trees and
hwloc XML, in ``affmon topology`` (text and ``--json``) and in recordings.

Every recorded sysfs tree is compared with hwloc 2.9's own reading of it
(``lstopo-no-graphics --if fsroot -i TREE --of xml``: each NUMANode's ``local_memory``
and the ``<distances2 name="NUMALatency">`` matrix), parsed here with the standard
library, independently of affmon's hwloc reader. The hwloc XML fixtures are compared
with hwloc's tools in ``tests/collect/test_topology_hwloc_xml.py`` (whole-topology equality
covers memory and distances). Hand-made trees cover malformed and absurd input: the
value is unknown and the command says why in one ``warning:`` line.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from affmon.collect.hwloc_xml import read_hwloc_xml
from affmon.collect.sysfs_topology import read_topology
from affmon.core.errors import ParseError
from affmon.core.model.topology import NumaNode, Topology, distance_problem, format_gib
from affmon.core.recording.format import (
    FORMAT_VERSION,
    header_line,
    read_recording,
    topology_from_json,
    topology_to_json,
)
from tests.helpers.topology_trees import TREES, extract_tree, lstopo_memory_and_distances

XML_FIXTURES = Path(__file__).parent.parent / "fixtures" / "hwloc_xml"
NODE = "sys/devices/system/node"


@pytest.fixture(scope="session")
def tree(tmp_path_factory: pytest.TempPathFactory):
    return lambda name: extract_tree(tmp_path_factory, name)


def affmon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "affmon", *args], capture_output=True, text=True, timeout=120)


# ----------------------------------------------------------------- hwloc's own reading


@pytest.mark.parametrize("name", sorted(TREES))
def test_sysfs_memory_and_distances_match_lstopo(name: str, tree) -> None:
    root = tree(name)
    topo = read_topology(str(root))
    memory, matrix = lstopo_memory_and_distances(root)
    assert topo.notes == ()
    for node in topo.numa_nodes:
        # hwloc writes no local_memory for a node of 0 bytes (the MIG nodes of gh200x2).
        assert node.memory_bytes == memory.get(node.id, 0), f"node {node.id}"
    ids = [n.id for n in topo.numa_nodes]
    if matrix is None:  # hwloc keeps no matrix for a single node; the kernel's is [[10]]
        assert ids == [0] and topo.node_distances == ((10,),)
    else:
        assert sorted(matrix) == ids
        assert topo.node_distances == tuple(tuple(matrix[a][b] for b in ids) for a in ids)
        assert all(topo.distance(a, b) == matrix[a][b] for a in ids for b in ids)


def test_trees_cover_sparse_ids_memory_only_and_memory_less_nodes(tree) -> None:
    """The comparison above is not only of plain square machines."""
    sparse = read_topology(str(tree("sparse")))
    assert [n.id for n in sparse.numa_nodes] == [0, 1, 2, 33, 34, 45, 72, 73]
    assert sparse.distance(33, 0) == 22 and sparse.distance(0, 33) == 22 and sparse.distance(2, 33) == 16
    gpunuma = read_topology(str(tree("gpunuma")))
    assert gpunuma.distance(0, 8) == 40 and gpunuma.distance(0, 250) == 80
    assert gpunuma.node(250) == NumaNode(250, frozenset(), memory_only=True, memory_bytes=15 << 30)
    gh = read_topology(str(tree("gh200x2")))
    assert gh.node(3) is not None and gh.node(3).memory_bytes == 0  # type: ignore[union-attr]
    assert gh.nodes_by_distance(0) == (0, *range(2, 10), 1, *range(10, 18))


def test_hwloc_xml_memory_distances_and_refused_matrix() -> None:
    topo = read_hwloc_xml(str(XML_FIXTURES / "hwloc-xml__24em64t-2n6c2t-pci.xml"))
    assert [n.memory_bytes for n in topo.numa_nodes] == [19316633600, 19327348736]
    assert topo.node_distances == ((10, 20), (20, 10)) and topo.gpus_known
    # Sparse OS indexes (0, 8), the matrix mapped by them.
    lassen = read_hwloc_xml(str(XML_FIXTURES / "mpibind-xml__coral-lassen.xml"))
    assert lassen.distance(0, 8) == 40 and lassen.distance(8, 8) == 10 and lassen.distance(0, 1) is None
    # No I/O objects at all: nothing is known of GPUs.
    assert not read_hwloc_xml(str(XML_FIXTURES / "hwloc-xml__16amd64-8n2c-cpusets.xml")).gpus_known
    # A matrix hwloc loads but Linux would not have written (node 2 farther from itself
    # than from node 16): unknown, with one note naming the file.
    path = str(XML_FIXTURES / "hwloc-xml__8ia64-2n2s2c+1n.v1tov2.xml")
    odd = read_hwloc_xml(path)
    assert odd.node_distances is None
    assert odd.notes == (
        f"{path}: node distances unknown: node 2 is not nearer to itself (17) than to every other node",
    )


# ------------------------------------------------------------- hand-made sysfs trees


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return root


def two_nodes(**extra: str) -> dict[str, str]:
    """CPUs 0-3 on nodes 0 and 2 (sparse ids), each with meminfo and distance files."""
    files = {
        "sys/devices/system/cpu/online": "0-3",
        f"{NODE}/online": "0,2",
        f"{NODE}/node0/cpulist": "0-1",
        f"{NODE}/node2/cpulist": "2-3",
        f"{NODE}/node0/meminfo": "Node 0 MemTotal:       65794764 kB\nNode 0 MemFree:        1 kB",
        f"{NODE}/node2/meminfo": "Node 2 MemTotal:       1048576 kB",
        f"{NODE}/node0/distance": "10 21",
        f"{NODE}/node2/distance": "21 10",
        "sys/bus/pci/devices/.keep": "",
    }
    files.update({k.replace("__", "/"): v for k, v in extra.items()})
    return files


def test_hand_made_tree_reads_memory_and_distances(tmp_path: Path) -> None:
    topo = read_topology(str(write(tmp_path, two_nodes())))
    assert [(n.id, n.memory_bytes) for n in topo.numa_nodes] == [(0, 65794764 * 1024), (2, 1 << 30)]
    assert topo.node_distances == ((10, 21), (21, 10))
    assert topo.distance(2, 0) == 21 and topo.distance(0, 1) is None
    assert topo.gpus_known and topo.gpus == () and topo.notes == ()
    # The bus is there and holds no GPU: that is a fact, said as before.
    assert "GPUs: none found on the PCI bus" in affmon("topology", "--root", str(tmp_path)).stdout.splitlines()


@pytest.mark.parametrize(
    ("rel", "text", "note"),
    [
        (f"{NODE}/node2/distance", "21 10 30", f"/{NODE}/node2/distance holds 3 numbers for 2 online nodes"),
        (f"{NODE}/node2/distance", "21", f"/{NODE}/node2/distance holds 1 numbers for 2 online nodes"),
        (f"{NODE}/node2/distance", "21 ten", "not a list of distances: '21 ten'"),
        (f"{NODE}/node2/distance", "21 -10", "not a list of distances"),
        (f"{NODE}/node2/distance", "256 10", "node 2 has distance 256, outside 1-255"),
        (f"{NODE}/node2/distance", "0 10", "node 2 has distance 0, outside 1-255"),
        (f"{NODE}/node2/distance", f"{'9' * 20} 10", "outside 1-255"),
        (f"{NODE}/node2/distance", "21 30", "node 2 is not nearer to itself (30) than to every other node"),
        (f"{NODE}/node2/distance", "10 10", "node 2 is not nearer to itself (10)"),
        (f"{NODE}/online", "0-1", f"node 2 is not in /{NODE}/online"),
        (f"{NODE}/online", "0,2-", f"/{NODE}/online"),
    ],
)
def test_bad_distances_are_unknown_with_one_note(tmp_path: Path, rel: str, text: str, note: str) -> None:
    files = two_nodes()
    files[rel] = text
    topo = read_topology(str(write(tmp_path, files)))
    assert topo.node_distances is None and topo.distance(0, 2) is None
    assert len(topo.notes) == 1 and "\n" not in topo.notes[0]
    assert topo.notes[0].startswith("node distances unknown") and note in topo.notes[0], topo.notes
    assert [n.memory_bytes for n in topo.numa_nodes] == [65794764 * 1024, 1 << 30]  # memory is unaffected


def test_missing_distance_file_or_online_list(tmp_path: Path) -> None:
    root = write(tmp_path, two_nodes())
    (root / NODE / "online").unlink()  # then the node directories give the order
    assert read_topology(str(root)).node_distances == ((10, 21), (21, 10))
    (root / NODE / "node2" / "distance").unlink()  # a tree without it says nothing
    topo = read_topology(str(root))
    assert topo.node_distances is None and topo.notes == ()


def test_columns_follow_the_online_order_not_the_file_count(tmp_path: Path) -> None:
    """Node 1 is online but its directory is missing from the tree: its column is skipped."""
    files = two_nodes()
    files.update({f"{NODE}/online": "0-2", f"{NODE}/node0/distance": "10 15 21", f"{NODE}/node2/distance": "21 16 10"})
    assert read_topology(str(write(tmp_path, files))).node_distances == ((10, 21), (21, 10))


@pytest.mark.parametrize(
    ("text", "note"),
    [
        ("Node 2 MemFree: 5 kB", "has no MemTotal line in kB"),
        ("Node 2 MemTotal: 5 MB", "has no MemTotal line in kB"),
        ("Node 2 MemTotal: lots kB", "has no MemTotal line in kB"),
        ("Node 7 MemTotal: 5 kB", "is for node 7"),
        (f"Node 2 MemTotal: {1 << 43} kB", "is more than any machine addresses"),
        (f"Node 2 MemTotal: {'9' * 30} kB", "has no MemTotal line in kB"),
    ],
)
def test_bad_meminfo_is_unknown_with_one_note(tmp_path: Path, text: str, note: str) -> None:
    files = two_nodes()
    files[f"{NODE}/node2/meminfo"] = text
    topo = read_topology(str(write(tmp_path, files)))
    assert [n.memory_bytes for n in topo.numa_nodes] == [65794764 * 1024, None]
    assert len(topo.notes) == 1 and topo.notes[0].startswith("memory of node 2 unknown: ") and note in topo.notes[0]
    assert topo.node_distances == ((10, 21), (21, 10))


def test_many_bad_meminfo_files_make_one_note(tmp_path: Path) -> None:
    files = two_nodes()
    files[f"{NODE}/node0/meminfo"] = files[f"{NODE}/node2/meminfo"] = "garbage"
    topo = read_topology(str(write(tmp_path, files)))
    assert topo.notes == (
        f"memory of node 0 unknown (and 1 more nodes): /{NODE}/node0/meminfo has no MemTotal line in kB",
    )


def test_kernel_without_numa_reads_proc_meminfo(tmp_path: Path) -> None:
    root = write(tmp_path, {"sys/devices/system/cpu/online": "0-1", "proc/meminfo": "MemTotal:        2048 kB\n"})
    topo = read_topology(str(root))
    assert topo.numa_nodes == (NumaNode(0, frozenset({0, 1}), memory_bytes=2 << 20),)
    assert topo.node_distances is None
    assert not topo.gpus_known  # and no sys/bus/pci either


# ------------------------------------------------------------ the command's output


def test_text_shows_memory_and_a_numactl_style_matrix(tree) -> None:
    out = affmon("topology", "--root", str(tree("gpunuma")))
    assert out.returncode == 0 and out.stderr == "", out.stderr
    lines = out.stdout.splitlines()
    assert "  node 0: CPUs 0-15, memory 123.8 GiB" in lines
    assert "  node 250: CPUs (none: memory only), memory 15.0 GiB" in lines
    at = lines.index("node distances:")
    assert lines[at + 1 : at + 4] == [
        "node   0   8 250 251 252 253 254 255",
        "  0:  10  40  80  80  80  80  80  80",
        "  8:  40  10  80  80  80  80  80  80",
    ]


def test_single_node_text_has_no_matrix_and_wide_ids_widen_columns(tmp_path: Path, tree) -> None:
    out = affmon("topology", "--root", str(tree("gb10")))
    assert out.returncode == 0 and "node distances" not in out.stdout
    assert "  node 0: CPUs 0-19, memory 119.7 GiB" in out.stdout.splitlines()
    files = two_nodes()
    files = {k.replace("node2", "node1000"): v.replace("Node 2", "Node 1000") for k, v in files.items()}
    files[f"{NODE}/online"] = "0,1000"
    out = affmon("topology", "--root", str(write(tmp_path, files)))
    lines = out.stdout.splitlines()
    at = lines.index("node distances:")
    assert lines[at + 1 : at + 4] == ["node     0 1000", "   0:   10   21", "1000:   21   10"]


def test_unknown_distances_said_once_on_stderr(tmp_path: Path) -> None:
    files = two_nodes()
    files[f"{NODE}/node0/distance"] = "10 21 99"
    root = write(tmp_path, files)
    for extra in ((), ("--json",)):
        out = affmon("topology", "--root", str(root), *extra)
        assert out.returncode == 0
        assert (
            out.stderr
            == f"warning: node distances unknown: /{NODE}/node0/distance holds 3 numbers for 2 online nodes\n"
        )
    assert "node distances: unknown" in affmon("topology", "--root", str(root)).stdout.splitlines()
    assert json.loads(out.stdout)["node_distances"] is None


def test_tree_without_pci_bus_says_gpus_unknown(tree) -> None:
    """The h200x2 tree was gathered without --io: two H200s, no sys/bus/pci."""
    root = tree("h200x2")
    text = affmon("topology", "--root", str(root))
    assert text.returncode == 0
    assert "this tree has no PCI bus: GPUs unknown" in text.stdout.splitlines()
    assert "none found" not in text.stdout
    data = json.loads(affmon("topology", "--root", str(root), "--json").stdout)
    assert data["gpus_known"] is False and data["gpus"] == []
    xml = affmon("topology", "--hwloc-xml", str(XML_FIXTURES / "hwloc-xml__16amd64-8n2c-cpusets.xml"))
    assert "this file has no PCI devices: GPUs unknown" in xml.stdout.splitlines()


def test_json_adds_keys_and_keeps_the_old_ones(tree) -> None:
    data = json.loads(affmon("topology", "--root", str(tree("corona")), "--json").stdout)
    assert list(data)[:8] == [
        "source",
        "online_cpus",
        "allowed_cpus",
        "numa_nodes",
        "packages",
        "cores",
        "l3_groups",
        "gpus",
    ]
    assert list(data)[8:] == ["node_distances", "gpus_known"]
    assert data["numa_nodes"][0] == {"id": 0, "cpus": "0-5,48-53", "memory_bytes": 33440596 * 1024}
    assert data["node_distances"][0] == [10, 16, 16, 16, 32, 32, 32, 32]
    assert data["gpus_known"] is True


# ---------------------------------------------------------------------- recordings


def test_recording_header_carries_memory_distances_and_gpus_known(tree) -> None:
    topo = read_topology(str(tree("h200x2")))
    back = topology_from_json(json.loads(json.dumps(topology_to_json(topo))))
    assert back == topo and back.node(0).memory_bytes == 6135726080  # type: ignore[union-attr]
    assert back.node_distances == ((10,),) and back.gpus_known is False
    corona = read_topology(str(tree("corona")))
    assert topology_from_json(json.loads(json.dumps(topology_to_json(corona)))) == corona


def test_old_recording_header_reads_as_unknown_and_writes_back_unchanged() -> None:
    old = {
        "source": "sysfs",
        "online_cpus": "0-3",
        "allowed_cpus": "0-3",
        "numa_nodes": [{"id": 0, "cpus": "0-1"}, {"id": 1, "cpus": "2-3"}],
        "packages": [],
        "cores": [],
        "l3_groups": [],
        "gpus": [],
    }
    topo = topology_from_json(old)
    assert [n.memory_bytes for n in topo.numa_nodes] == [None, None]
    assert topo.node_distances is None and topo.gpus_known
    assert topology_to_json(topo) == old
    header = header_line(topo, None, None, 1.0)
    assert read_recording([header], "r.jsonl")[0].topology == topo


def test_recording_distances_are_reordered_by_node_id() -> None:
    data = {
        "source": "sysfs",
        "online_cpus": "0-1",
        "allowed_cpus": "0-1",
        "numa_nodes": [{"id": 5, "cpus": "1"}, {"id": 0, "cpus": "0"}],
        "packages": [],
        "cores": [],
        "l3_groups": [],
        "gpus": [],
        "node_distances": [[10, 31], [30, 10]],  # as written: 5->0 is 31, 0->5 is 30
    }
    topo = topology_from_json(data)
    assert topo.distance(5, 0) == 31 and topo.distance(0, 5) == 30


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"node_distances": [[10, 20]]}, "node_distances: 1 rows of distances for 2 nodes"),
        ({"node_distances": [[10, 20], [20, 300]]}, "outside 1-255"),
        ({"node_distances": [[10, 20], [20, "10"]]}, "node distance: expected a whole number"),
        ({"node_distances": "10 20"}, "node_distances: expected a list"),
        ({"gpus_known": "no"}, "gpus_known: expected true or false"),
        ({"numa_nodes": [{"id": 0, "cpus": "0-1", "memory_bytes": -1}, {"id": 1, "cpus": "2-3"}]}, "memory_bytes -1"),
        ({"numa_nodes": [{"id": 0, "cpus": "0-1", "memory_bytes": 1.5}, {"id": 1, "cpus": "2-3"}]}, "memory_bytes"),
    ],
)
def test_bad_recorded_topology_is_one_parse_error(change: dict[str, object], message: str) -> None:
    data: dict[str, object] = {
        "source": "sysfs",
        "online_cpus": "0-3",
        "allowed_cpus": "0-3",
        "numa_nodes": [{"id": 0, "cpus": "0-1"}, {"id": 1, "cpus": "2-3"}],
        "packages": [],
        "cores": [],
        "l3_groups": [],
        "gpus": [],
        **change,
    }
    header = json.dumps({"affmon_recording": FORMAT_VERSION, "topology": data})
    with pytest.raises(ParseError) as info:
        read_recording([header], "r.jsonl")
    assert "\n" not in str(info.value) and message in str(info.value), str(info.value)


# -------------------------------------------------------------------- the pure core


def build(distances: list[list[int]] | None) -> Topology:
    return Topology.build(
        source="sysfs",
        online_cpus=[0, 1, 2],
        allowed_cpus=[0, 1, 2],
        numa_nodes=[NumaNode(4, frozenset({2})), NumaNode(0, frozenset({0})), NumaNode(1, frozenset({1}))],
        packages=[],
        cores=[],
        l3_groups=[],
        gpus=[],
        node_distances=distances,
    )


def test_distance_lookup_and_nearest_order() -> None:
    topo = build([[10, 20, 12], [20, 10, 20], [12, 20, 10]])  # nodes 0, 1, 4
    assert topo.distance(0, 4) == 12 and topo.distance(4, 1) == 20 and topo.distance(0, 3) is None
    assert topo.nodes_by_distance(0) == (0, 4, 1)
    assert topo.nodes_by_distance(1) == (1, 0, 4)  # a tie goes to the lower id
    assert topo.nodes_by_distance(9) is None
    unknown = build(None)
    assert unknown.distance(0, 0) is None and unknown.nodes_by_distance(0) is None


@pytest.mark.parametrize(
    ("rows", "problem"),
    [
        ([[10, 20, 20], [20, 10, 20], [20, 20, 10]], None),
        ([[10, 20, 20], [20, 10, 20]], "2 rows of distances for 3 nodes"),
        ([[10, 20], [20, 10, 20], [20, 20, 10]], "node 0 has 2 distances for 3 nodes"),
        ([[10, 20, 20], [20, 10, 20], [20, 20, 256]], "node 4 has distance 256, outside 1-255"),
        ([[10, 20, 20], [20, 10, True], [20, 20, 10]], "node 1 has distance True"),
        ([[10, 20, 20], [20, 20, 20], [20, 20, 10]], "node 1 is not nearer to itself (20)"),
    ],
)
def test_distance_problem(rows: list[list[int]], problem: str | None) -> None:
    found = distance_problem([0, 1, 4], rows)
    assert found == problem if problem is None else (found is not None and found.startswith(problem))
    if problem is not None:
        with pytest.raises(ValueError):
            build(rows)


def test_too_many_nodes_for_a_matrix() -> None:
    assert distance_problem(list(range(1025)), []) == "1,025 nodes, more than Linux numbers (1,024)"


def test_format_gib() -> None:
    assert [format_gib(v) for v in (None, 0, 1 << 30, 65794764 * 1024)] == ["unknown", "0 GiB", "1.0 GiB", "62.7 GiB"]


def test_node_memory_bounds() -> None:
    with pytest.raises(ValueError):
        NumaNode(0, frozenset(), memory_bytes=-1)
    with pytest.raises(ValueError):
        NumaNode(0, frozenset(), memory_bytes=(1 << 52) + 1)


# ------------------------------------------------------- hand-edited hwloc XML files

PCI_XML = XML_FIXTURES / "hwloc-xml__24em64t-2n6c2t-pci.xml"
LATENCY = '<distances2 type="NUMANode" nbobjs="2" kind="5" name="NUMALatency" indexing="os">'


def edited_xml(tmp_path: Path, old: str, new: str) -> str:
    """The 24em64t file (nodes 0 and 1 of 18 GiB, distances 10/20) with one change."""
    text = PCI_XML.read_text()
    assert text.count(old) == 1, old
    path = tmp_path / "edited.xml"
    path.write_text(text.replace(old, new))
    return str(path)


@pytest.mark.parametrize(
    ("old", "new", "distances"),
    [
        # Another name, still a latency kind (4): hwloc's tools show it as the latency matrix.
        ('name="NUMALatency"', 'name="Custom"', ((10, 20), (20, 10))),
        # A bandwidth matrix (kind 8 | from OS 1) is not distances.
        ('kind="5" name="NUMALatency"', 'kind="9" name="Custom"', None),
        # A matrix over other nodes (node 1 absent): unknown, and nothing wrong with it.
        (">0 1 </indexes>", ">0 5 </indexes>", None),
        # The whole element gone: a file exported without distances.
        (LATENCY, '<distances2 type="PU" nbobjs="2" kind="5" name="NUMALatency" indexing="os">', None),
    ],
)
def test_hwloc_xml_matrix_choice_without_notes(tmp_path: Path, old: str, new: str, distances: object) -> None:
    topo = read_hwloc_xml(edited_xml(tmp_path, old, new))
    assert topo.node_distances == distances and topo.notes == ()
    assert [n.memory_bytes for n in topo.numa_nodes] == [19316633600, 19327348736]


@pytest.mark.parametrize(
    ("old", "new", "note"),
    [
        (">10 20 20 10 </u64values>", ">10 20 20 </u64values>", "3 <u64values> numbers for 4"),
        (">10 20 20 10 </u64values>", ">10 20 20 ten </u64values>", "<u64values> holds 'ten', not a number"),
        (">10 20 20 10 </u64values>", ">10 20 20 300 </u64values>", "node 1 has distance 300, outside 1-255"),
        (">10 20 20 10 </u64values>", ">10 20 20 20 </u64values>", "node 1 is not nearer to itself (20)"),
        (">0 1 </indexes>", ">0 0 </indexes>", "a node appears twice in the matrix"),
        ('indexing="os"', 'indexing="gp"', "nodes not given by OS index"),
        ('nbobjs="2" kind="5"', 'nbobjs="two" kind="5"', "bad nbobjs 'two'"),
        ('nbobjs="2" kind="5"', 'nbobjs="5000" kind="5"', "a matrix of 5,000 nodes, more than Linux numbers"),
    ],
)
def test_hwloc_xml_bad_matrix_is_unknown_with_one_note(tmp_path: Path, old: str, new: str, note: str) -> None:
    path = edited_xml(tmp_path, old, new)
    topo = read_hwloc_xml(path)
    assert topo.node_distances is None
    assert len(topo.notes) == 1, topo.notes
    assert topo.notes[0].startswith(f"{path}: node distances unknown: {note}"), topo.notes
    out = affmon("topology", "--hwloc-xml", path)
    assert out.returncode == 0 and out.stderr.count("\n") == 1 and out.stderr.startswith("warning: "), out.stderr
    assert "node distances: unknown" in out.stdout.splitlines()


@pytest.mark.parametrize(
    ("value", "note"),
    [
        ("lots", "local_memory 'lots' is not a number of bytes"),
        ("-5", "local_memory '-5' is not a number of bytes"),
        (str(1 << 60), f"local_memory of {1 << 60:,} bytes is more than any machine addresses"),
    ],
)
def test_hwloc_xml_bad_local_memory_is_unknown_with_one_note(tmp_path: Path, value: str, note: str) -> None:
    path = edited_xml(tmp_path, 'local_memory="19316633600"', f'local_memory="{value}"')
    topo = read_hwloc_xml(path)
    assert [n.memory_bytes for n in topo.numa_nodes] == [None, 19327348736]
    assert topo.notes == (f"{path}: memory of node 0 unknown: {note}",)
    assert topo.node_distances == ((10, 20), (20, 10))
    out = affmon("topology", "--hwloc-xml", path, "--json")
    assert out.returncode == 0 and out.stderr == f"warning: {path}: memory of node 0 unknown: {note}\n"
    assert [n["memory_bytes"] for n in json.loads(out.stdout)["numa_nodes"]] == [None, 19327348736]


# ------------------------------------------------------------- this machine, live


def test_live_machine_matches_numactl() -> None:
    """``affmon topology`` on this machine against ``numactl -H`` (libnuma reads the same
    sysfs files: its sizes are ``MemTotal`` in MiB, its matrix ``nodeN/distance``)."""
    numactl = shutil.which("numactl")
    if numactl is None:
        pytest.skip("numactl is not installed")
    proc = subprocess.run([numactl, "-H"], capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0 or "No NUMA available" in proc.stdout + proc.stderr:
        pytest.skip(f"numactl -H cannot run here: {(proc.stderr or proc.stdout).strip()[:80]}")
    sizes_mib: dict[int, int] = {}
    lines = proc.stdout.splitlines()
    for line in lines:
        words = line.split()
        if len(words) == 5 and words[0] == "node" and words[2] == "size:" and words[4] == "MB":
            sizes_mib[int(words[1])] = int(words[3])
    at = lines.index("node distances:")
    columns = [int(w) for w in lines[at + 1].split()[1:]]
    matrix = [[int(w) for w in line.split()[1:]] for line in lines[at + 2 : at + 2 + len(columns)]]
    out = affmon("topology", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    ids = [n["id"] for n in data["numa_nodes"]]
    assert ids == columns == sorted(sizes_mib)
    assert [n["memory_bytes"] >> 20 for n in data["numa_nodes"]] == [sizes_mib[i] for i in ids]
    assert data["node_distances"] == matrix
