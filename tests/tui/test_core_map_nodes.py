"""The core map's NUMA nodes carry their memory and their distances, as ``affmon
topology`` and ``numactl -H`` give them, on the recorded multi-node machines: a line
under each node's first title ("mem 128.0 GiB · dist 20/10/20/20", its row of the
distance matrix read across the nodes with CPUs, which the legend names), then the nodes
without CPUs, alike ones in one line. A one-node machine's map grows by no line, and a machine
whose memory and distances are unknown keeps the map it had.

Expected figures come from the topology the readers made (``format_gib``,
``Topology.distance``), which ``tests/collect/test_topology_numa_distances.py`` holds against
hwloc's own reading of the same trees."""

from __future__ import annotations

import types
from dataclasses import replace
from pathlib import Path

import pytest

from affmon.collect.hwloc_xml import read_hwloc_xml
from affmon.collect.sysfs_topology import read_topology
from affmon.core.model.cpuset import format_cpulist, parse_cpulist
from affmon.core.model.topology import Topology, format_gib
from affmon.tui.app import AffmonApp
from affmon.tui.model.views import core_groups
from affmon.tui.palette import Palette
from affmon.tui.widgets.cores import CoreMap, core_map_text, node_summary
from tests.helpers.recordings import load
from tests.helpers.topology_trees import extract_tree
from tests.tui.helpers import FakePinner, ListSource, play

PALETTE = Palette("red", "yellow", "green", "cyan", "grey", "dim", "white", ("blue",))
XML = Path(__file__).parents[1] / "fixtures" / "hwloc_xml"
WIDTH = 34  # what the map is laid out at in its 40-column pane


def topology_of(tmp_path_factory: pytest.TempPathFactory, name: str) -> Topology:
    if name.endswith(".xml"):
        return read_hwloc_xml(str(XML / name))
    return read_topology(str(extract_tree(tmp_path_factory, name)))


def map_lines(t: Topology, with_nodes: bool = True) -> list[str]:
    groups = core_groups(types.SimpleNamespace(topology=t, processes=(), gpus=()), [])  # type: ignore[arg-type]
    nodes = node_summary(t) if with_nodes else None
    return core_map_text(groups, PALETTE, {}, None, WIDTH, nodes=nodes).plain.split("\n")


def told_of(lines: list[str], node: int) -> str:
    """The line(s) under a node's first title, joined: "mem 128.0 GiB · dist 10/20"."""
    i = next(i for i, line in enumerate(lines) if line.startswith(f"node {node} · "))
    told = []
    for line in lines[i + 1 :]:
        if not line.startswith(("mem ", "dist ")):
            break
        told.append(line)
    return " · ".join(told)


@pytest.mark.parametrize(
    "name",
    [
        "pcilocality",  # 4 nodes, 20 between them
        "cgroup2",  # 8 nodes, 16 and 22
        "corona",  # 8 nodes of 2 packages, 16 and 32, two L3 per node
        "gh200x2",  # 2 nodes with CPUs, 16 memory-only (GPU memory, MIG's empty ones)
        "gpunuma",  # sparse ids 0 and 8, memory-only 250-255
        "hwloc-xml__24em64t-2n6c2t-pci.xml",
        "hwloc-xml__power8gpudistances.xml",
    ],
)
def test_each_node_has_its_memory_and_distances(tmp_path_factory, name):
    t = topology_of(tmp_path_factory, name)
    assert len(t.numa_nodes) > 1 and t.node_distances is not None
    lines = map_lines(t)
    columns = [n.id for n in t.cpu_numa_nodes]
    for n in t.cpu_numa_nodes:
        row = "/".join(str(t.distance(n.id, c)) for c in columns)
        assert told_of(lines, n.id) == f"mem {format_gib(n.memory_bytes)} · dist {row}", lines
    legend = "\n".join(lines[-4:])
    assert "dist to node" in legend
    without = [n for n in t.numa_nodes if not n.cpus]
    if without:
        block = lines[lines.index("memory only (no CPUs)") + 1 :]
        for n in without:
            row = "/".join(str(t.distance(n.id, c)) for c in columns)
            facts = f" · {format_gib(n.memory_bytes)} · dist {row}"
            assert any(line.endswith(facts) and n.id in _ids(line) for line in block), (
                f"node {n.id}{facts} missing from {block}"
            )


def _ids(line: str) -> set[int]:
    """The node ids a "nodes 3-9 · ..." line names."""
    return set(parse_cpulist(line.split(" · ")[0].split(" ", 1)[1]))


def test_one_node_grows_by_no_line(tmp_path_factory):
    t = topology_of(tmp_path_factory, "h200x2")  # one node, its memory known
    assert len(t.numa_nodes) == 1 and t.numa_nodes[0].memory_bytes is not None
    assert len(map_lines(t)) == len(map_lines(t, with_nodes=False))
    assert map_lines(t)[0].startswith(f"node 0 · {format_gib(t.numa_nodes[0].memory_bytes)} · L3")


def test_nothing_known_keeps_the_map_it_had(tmp_path_factory):
    t = topology_of(tmp_path_factory, "pcilocality")
    unknown = replace(t, numa_nodes=tuple(replace(n, memory_bytes=None) for n in t.numa_nodes), node_distances=None)
    assert node_summary(unknown) is None
    assert map_lines(unknown) == map_lines(t, with_nodes=False)


async def test_the_monitor_shows_them(tmp_path_factory):
    """The app on a 4-node machine at 140x40: the core map pane's own lines."""
    t = topology_of(tmp_path_factory, "pcilocality")
    _, samples = load("hogs")  # its threads ran on CPUs 0-15, all of them on this machine

    app = AffmonApp(ListSource(t, samples), FakePinner(), autostart=False)
    async with app.run_test(size=(140, 40)) as pilot:
        await play(pilot)
        cores = app.query_one(CoreMap)
        drawn = [cores.render_line(y).text.rstrip() for y in range(cores.size.height)]
    title = f"node 1 · L3 · CPUs {format_cpulist(t.cpu_numa_nodes[1].cpus)}"
    i = next(i for i, line in enumerate(drawn) if line and title.startswith(line.rstrip("…")))  # cut to the pane
    assert drawn[i + 1] == f"mem {format_gib(t.cpu_numa_nodes[1].memory_bytes)} · dist 20/10/20/20"
    assert "dist to node 0/1/2/3" in drawn[-3:]
