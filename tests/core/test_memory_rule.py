"""``REMOTE_MEMORY``: most of a rank's anonymous memory on a node other than its CPUs'.
Memory from real numa_maps text (tests/fixtures/proc/SOURCES.md) and generated; memory-only
nodes (GPU memory on Grace Hopper) never count as remote."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from affmon.collect.numa_maps import parse_numa_maps
from affmon.core.model.cpuset import CpuSet
from affmon.core.model.jobs import Job
from affmon.core.model.rates import ProcessRates, ThreadRates
from affmon.core.model.samples import NodeMemory, ProcessSample, ThreadSample
from affmon.core.model.topology import NumaNode, Topology
from affmon.core.rules.base import Severity
from affmon.core.rules.memory import MemoryThresholds, home_node, rule_remote_memory

FIXTURES = Path(__file__).parent.parent / "fixtures" / "proc"
GIB = 1 << 30
MIB = 1 << 20


def topology(*nodes: NumaNode) -> Topology:
    cpus = frozenset(c for n in nodes for c in n.cpus)
    return Topology.build(
        source="test",
        online_cpus=cpus,
        allowed_cpus=cpus,
        numa_nodes=nodes,
        packages=(),
        cores=(),
        l3_groups=(),
        gpus=(),
    )


# The machine of the 2-node fixture (`numactl -H`: node 0 CPUs 0,2; node 1 CPUs 1,3).
TWO = topology(NumaNode(0, frozenset({0, 2})), NumaNode(1, frozenset({1, 3})))
# Grace Hopper-like: two Grace nodes and each GPU's memory as a memory-only node.
GH = topology(
    NumaNode(0, frozenset(range(0, 4))),
    NumaNode(1, frozenset(range(4, 8))),
    NumaNode(2, frozenset(), memory_only=True),
    NumaNode(10, frozenset(), memory_only=True),
)
ONE = topology(NumaNode(0, frozenset({0, 1})))


def process(pid: int, mask: CpuSet | None, ran_on: CpuSet = frozenset(), ppid: int = 1) -> ProcessRates:
    main = ThreadSample(pid, 100, "python", "R", None, 0, 0, 0, 0, 0, 0, 0, mask)
    sample = ProcessSample(pid, 100, ppid, "python", 0, "root", "python train.py", None, None, (main,), training=True)
    thread = ThreadRates(main, None, None, None, None, None, None, None)
    return ProcessRates(sample, (thread,), None, None, None, None, None, ran_on, ())


def job(*members: ProcessRates) -> Job:
    return Job(root=members[0], members=members)


def anon(**by_node: int) -> NodeMemory:
    nodes = {int(k[1:]): v for k, v in by_node.items()}
    return NodeMemory(resident_bytes_by_node=nodes, anon_bytes_by_node=nodes, mappings=len(nodes))


def judge(j: Job, memory: dict[int, NodeMemory], topo: Topology, **thresholds: float) -> list:  # type: ignore[type-arg]
    return rule_remote_memory(j, topo, lambda p: memory.get(p.sample.pid), MemoryThresholds(**thresholds))  # type: ignore[arg-type]


def test_a_rank_pinned_to_node_0_with_most_of_its_memory_on_node_1_is_bad() -> None:
    rank = process(10, frozenset({0, 2}))
    [found] = judge(job(rank), {10: anon(n0=1 * GIB, n1=15 * GIB)}, TWO)
    assert (found.code, found.severity, found.pid) == ("REMOTE_MEMORY", Severity.BAD, 10)
    assert found.message.startswith("94% of its memory (15.0 GiB of 16.0 GiB anonymous) sits on node 1")
    assert "CPUs are on node 0" in found.message and "--migrate-memory" in found.message
    [evidence] = found.evidence["processes"]
    assert evidence["home_node"] == 0 and evidence["remote_bytes_by_node"] == {"1": 15 * GIB}


def test_memory_on_its_own_node_or_only_a_minority_away_is_no_finding() -> None:
    rank = process(10, frozenset({0, 2}))
    assert judge(job(rank), {10: anon(n0=16 * GIB)}, TWO) == []
    assert judge(job(rank), {10: anon(n0=9 * GIB, n1=7 * GIB)}, TWO) == []  # 44%: not "most"


def test_the_recorded_partial_migration_judged_from_each_side() -> None:
    after = parse_numa_maps((FIXTURES / "numa_maps__lkml-thp-migration-2node.after.txt").read_text())
    # 18602 pages on node 0, 6998 on node 1 (27%): fine for a rank on node 0, and for a
    # rank on node 1 most of it (73%) is remote.
    assert judge(job(process(10, frozenset({0, 2}))), {10: after}, TWO) == []
    [found] = judge(job(process(10, frozenset({1, 3}))), {10: after}, TWO)
    assert found.severity == Severity.WARN and found.message.startswith("73% of its memory (73 MiB of 100 MiB")


def test_file_pages_are_not_judged() -> None:
    # The 2 GiB /dev/shm mapping of the LKML reproducer: shared file pages, not the
    # process's own memory, whatever node they are on.
    shared = parse_numa_maps((FIXTURES / "numa_maps__lkml-mbind-thp-2node.txt").read_text())
    assert judge(job(process(10, frozenset({1, 3}))), {10: shared}, TWO) == []


def test_memory_only_nodes_never_count_as_remote() -> None:
    rank = process(10, frozenset({0, 1}))
    # 90 GiB in its GPU's memory node, 1 GiB on its own Grace: nothing remote.
    assert judge(job(rank), {10: anon(n2=90 * GIB, n0=1 * GIB)}, GH) == []
    # 1 GiB on the other Grace and 1 GiB at home: half, not most; the GPU memory does not dilute it.
    assert judge(job(rank), {10: anon(n10=90 * GIB, n1=1 * GIB, n0=1 * GIB)}, GH) == []
    [found] = judge(job(rank), {10: anon(n2=90 * GIB, n1=3 * GIB, n0=1 * GIB)}, GH)
    assert found.evidence["remote_nodes"] == [1]
    assert found.evidence["processes"][0]["memory_only_bytes"] == 90 * GIB


def test_the_home_is_the_mask_s_node_else_where_the_threads_ran_else_none() -> None:
    assert home_node(TWO, frozenset({1, 3})) == 1
    assert home_node(TWO, frozenset({0, 1, 2, 3}), ran_on=frozenset({3})) == 1  # unpinned, ran on node 1
    assert home_node(TWO, frozenset({0, 1, 2, 3}), ran_on=frozenset({0, 1})) is None  # ran on both: no home
    unpinned = process(10, frozenset({0, 1, 2, 3}), ran_on=frozenset({0, 1}))
    assert judge(job(unpinned), {10: anon(n1=16 * GIB)}, TWO) == []


def test_small_processes_and_one_node_machines_and_unknown_memory_are_not_judged() -> None:
    rank = process(10, frozenset({0, 2}))
    assert judge(job(rank), {10: anon(n1=32 * MIB)}, TWO) == []  # under 64 MiB
    assert judge(job(process(10, frozenset({0}))), {10: anon(n1=16 * GIB)}, ONE) == []
    assert judge(job(rank), {}, TWO) == []


def test_one_finding_names_every_member_whose_memory_is_remote() -> None:
    rank = process(10, frozenset({0, 2}))
    worker = process(11, frozenset({0, 2}), ppid=10)
    ok_worker = process(12, frozenset({0, 2}), ppid=10)
    memory = {10: anon(n1=2 * GIB), 11: anon(n0=GIB // 4, n1=GIB * 3 // 4), 12: anon(n0=GIB)}
    [found] = judge(job(rank, worker, ok_worker), memory, TWO)
    assert found.pid == 10 and [p["pid"] for p in found.evidence["processes"]] == [10, 11]
    assert found.message.startswith("most of the memory of 2 of its processes (10, 11; worst 100%")


@settings(max_examples=300, deadline=None)
@given(
    home=st.sampled_from([0, 1]),
    cpu_bytes=st.dictionaries(st.sampled_from([0, 1]), st.integers(0, 64 * GIB)),
    gpu_bytes=st.dictionaries(st.sampled_from([2, 10]), st.integers(0, 512 * GIB)),
)
def test_a_finding_exactly_when_more_than_half_of_the_cpu_nodes_memory_is_away(
    home: int, cpu_bytes: dict[int, int], gpu_bytes: dict[int, int]
) -> None:
    rank = process(10, frozenset(GH.node(home).cpus))  # type: ignore[union-attr]
    nodes = {**cpu_bytes, **gpu_bytes}
    memory = NodeMemory(nodes, nodes)
    found = judge(job(rank), {10: memory}, GH)
    total = sum(cpu_bytes.values())
    away = total - cpu_bytes.get(home, 0)
    expected = total >= 64 * MIB and away * 2 > total
    assert bool(found) == expected
    if found:
        assert found[0].severity == (Severity.BAD if away / total >= 0.9 else Severity.WARN)
        assert set(found[0].evidence["remote_nodes"]) == {n for n, b in cpu_bytes.items() if n != home and b}
