"""Where the advice chooses between NUMA nodes, the distance matrix chooses: a GPU whose
own node cannot be used (no CPU of the job's allowed ones on it; a GPU reported on a
memory-only node with no known local CPUs) is planned on the nearest node that can be,
and no guess is made between two equally near ones or without distances. On constructed
four-node trees."""

from __future__ import annotations

from affmon.core.model.domains import gpu_domain
from affmon.core.model.topology import CacheGroup, Core, Gpu, NumaNode, Package, Topology

# Four nodes of four CPUs; from node 0, node 3 is nearer (20) than nodes 1 and 2 (30).
DISTANCES = [[10, 30, 30, 20], [30, 10, 20, 30], [30, 20, 10, 30], [20, 30, 30, 10]]
BUS = "0000:3b:00.0"


def tree(
    distances: list[list[int]] | None,
    *,
    gpu_node: int = 0,
    local: frozenset[int] | None = None,
    memory_node: bool = False,
) -> Topology:
    cpus = frozenset(range(16))
    nodes = [NumaNode(i, frozenset(range(4 * i, 4 * i + 4))) for i in range(4)]
    if memory_node:
        nodes.append(NumaNode(4, frozenset(), memory_only=True))
        if distances is not None:
            distances = [[*row, 40 if i != 1 else 15] for i, row in enumerate(distances)] + [[40, 15, 40, 40, 10]]
    return Topology.build(
        source="constructed",
        online_cpus=cpus,
        allowed_cpus=cpus,
        numa_nodes=nodes,
        packages=[Package(0, cpus)],
        cores=[Core(0, frozenset({c})) for c in cpus],
        l3_groups=[CacheGroup(3, n.cpus) for n in nodes[:4]],
        gpus=[
            Gpu(BUS, "nvidia", gpu_node, frozenset(range(4 * gpu_node, 4 * gpu_node + 4)) if local is None else local)
        ],
        node_distances=distances,
    )


def test_a_cpuset_without_the_gpus_node_plans_on_the_nearest_node_it_may_use():
    allowed = frozenset(range(4, 16))  # nodes 1, 2 and 3: not the GPU's node 0
    d = gpu_domain(tree(DISTANCES), BUS, allowed)
    assert d.cpus == frozenset(range(12, 16)) and d.numa_node == 3
    assert not d.local
    assert "planning on NUMA node 3 (CPUs 12-15), the nearest to its node 0" in d.warnings[0]
    assert "distance 20 against 10" in d.warnings[0]


def test_without_distances_or_between_equal_ones_there_is_no_guess():
    allowed = frozenset(range(4, 12))  # nodes 1 and 2: both at 30 from node 0
    for topology in (tree(DISTANCES), tree(None)):
        d = gpu_domain(topology, BUS, allowed)
        assert d.cpus == allowed and "planning within the allowed CPUs 4-11" in d.warnings[0]


def test_a_gpu_reported_on_a_memory_only_node_is_homed_on_the_nearest_node_with_cpus():
    # NVML names the GPU's own memory node; its local CPUs are unknown: node 1 is at 15.
    topology = tree(DISTANCES, gpu_node=4, local=None, memory_node=True)
    assert topology.gpus[0].numa_node == 1
    d = gpu_domain(topology, BUS, topology.online_cpus)
    assert d.cpus == frozenset(range(4, 8)) and d.local
    # Without distances it stays unknown: never a guess, never node 0.
    assert tree(None, gpu_node=4, local=None, memory_node=True).gpus[0].numa_node is None
