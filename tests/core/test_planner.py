"""The core-set planner on every recorded topology (properties), on the machines whose
layouts are documented (exact plans), and ``suggest`` against other tenants.

The property checker ``plan_problems`` is written from the rules, not from the planner's
code: it derives each GPU's region from the Topology itself, and a test feeds it broken
plans to show it would catch them.
"""

from __future__ import annotations

import itertools
import math
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from affmon.collect.hwloc_xml import read_hwloc_xml
from affmon.collect.sysfs_topology import read_topology
from affmon.core.model.cpuset import CpuSet
from affmon.core.model.topology import Gpu, Topology
from affmon.core.plan.l3_shares import rank_shares
from affmon.core.plan.planner import DEMAND_HEADROOM, MachinePlan, RankPlan, plan_machine, suggest
from tests.helpers.planning import G4, IDLE_PEERS, NODE0_GPUS, XML_DIR, cpus, hog, peer, small_machine, suggest_g4, xml
from tests.helpers.topology_trees import TREES, extract_tree

XML_FILES = sorted(p.name for p in XML_DIR.glob("*.xml"))
ALL_TOPOLOGIES = [f"xml:{name}" for name in XML_FILES] + [f"sysfs:{name}" for name in TREES]


@pytest.fixture(scope="module")
def load(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Topology]:
    """Each topology read once: the sysfs trees are extracted once per session (shared
    with the sysfs reader's tests), which is most of this module's time when run alone."""
    read: dict[str, Topology] = {}

    def get(key: str) -> Topology:
        if key not in read:
            kind, _, name = key.partition(":")
            if kind == "xml":
                read[key] = read_hwloc_xml(str(XML_DIR / name))
            else:
                read[key] = read_topology(str(extract_tree(tmp_path_factory, name)))
        return read[key]

    return get


def by_gpu(plan: MachinePlan) -> dict[tuple[str | None, int], RankPlan]:
    return {(p.pci_bus_id, p.rank): p for p in plan.plans}


# --------------------------------------------------------------------------------------
# The property checker


def plan_problems(topology: Topology, machine: MachinePlan, ranks_per_gpu: int) -> list[str]:
    """Everything wrong with a machine plan, judged from the topology alone."""
    problems: list[str] = []
    online = topology.online_cpus
    allowed = (topology.allowed_cpus & online) or online
    keys = [(p.pci_bus_id, p.rank) for p in machine.plans]
    expected_keys = [(g.pci_bus_id, r) for g in topology.gpus for r in range(ranks_per_gpu)]
    if sorted(keys, key=str) != sorted(expected_keys, key=str):
        problems.append(f"ranks {keys} != {expected_keys}")
    order = {g.pci_bus_id: i for i, g in enumerate(topology.gpus)}

    def core_count(region: CpuSet) -> int:
        return sum(1 for c in topology.cores if c.cpus <= region)

    for p in machine.plans:
        gpu = topology.gpu(p.pci_bus_id or "")
        assert gpu is not None
        tag = f"{p.pci_bus_id}#{p.rank}"
        same_vendor = [g for g in topology.gpus if g.vendor == gpu.vendor]
        if p.gpu_index != same_vendor.index(gpu):
            problems.append(f"{tag}: gpu_index {p.gpu_index}")
        if not p.cpus or not p.cpus <= allowed:
            problems.append(f"{tag}: {sorted(p.cpus)} empty or not allowed")
        if not p.cpus <= p.domain_cpus:
            problems.append(f"{tag}: outside its own domain")
        node = topology.node(gpu.numa_node) if gpu.numa_node is not None else None
        node_cpus = node.cpus & online if node is not None else frozenset()
        local = gpu.local_cpus & online if gpu.local_cpus is not None else None
        region = allowed
        known = False
        if node_cpus:
            region, known = region & node_cpus, True
        if local and local != online and (not node_cpus or local & node_cpus):
            region, known = region & local, True
        said = " ".join(p.warnings)
        if known and region:
            if not p.cpus <= region:
                problems.append(f"{tag}: {sorted(p.cpus)} outside its local allowed CPUs {sorted(region)}")
        elif known:
            if gpu.pci_bus_id not in said or "allowed" not in said:
                problems.append(f"{tag}: nothing local is allowed, and no warning says so")
        elif len(topology.cpu_numa_nodes) == 1:  # one node: a reason says it, no warning
            if not any(gpu.pci_bus_id in r and "unknown" in r for r in p.reasons):
                problems.append(f"{tag}: locality unknown on a one-node machine, and no reason says so")
        elif gpu.pci_bus_id not in said or "unknown" not in said:
            problems.append(f"{tag}: locality unknown, and no warning says so")
        if not known and not p.cpus <= allowed:
            problems.append(f"{tag}: fallback outside the allowed CPUs")
        pool = region if known and region else allowed
        whole = frozenset().union(*(c.cpus for c in topology.cores if c.cpus <= pool))
        if whole and p.domain_cpus != whole:
            problems.append(f"{tag}: domain {sorted(p.domain_cpus)} is not the whole cores of {sorted(pool)}")
        for core in topology.cores:
            part = core.cpus & p.cpus
            if part and part != core.cpus and "partly allowed" not in said:
                problems.append(f"{tag}: splits core {sorted(core.cpus)}")
        if p.numa_node is not None and topology.nodes_of(p.cpus) != (p.numa_node,):
            problems.append(f"{tag}: numa_node {p.numa_node} but CPUs on {topology.nodes_of(p.cpus)}")

    groups: dict[CpuSet, list[RankPlan]] = {}
    for p in machine.plans:
        groups.setdefault(p.domain_cpus, []).append(p)
    for domain, plans in groups.items():
        n_cores = core_count(domain)
        plans.sort(key=lambda p: (order[p.pci_bus_id or ""], p.rank))
        oversubscribed = n_cores < len(plans)
        for p in plans:
            if oversubscribed != ("oversubscribed" in " ".join(p.warnings)):
                problems.append(f"{p.pci_bus_id}#{p.rank}: {n_cores} cores, {len(plans)} ranks, warning mismatch")
        if oversubscribed:
            continue
        sizes = [core_count(p.cpus) for p in plans]
        if max(sizes) - min(sizes) > 1:  # the slowest rank sets every rank's pace
            problems.append(f"domain {sorted(domain)[:4]}...: unbalanced sizes {sizes}")
        caches = [g.cpus & domain for g in topology.l3_groups if g.cpus & domain]
        if len(caches) <= 1:
            if sizes != sorted(sizes, reverse=True):
                problems.append(f"domain {sorted(domain)[:4]}...: the cores left over not to the lowest ranks {sizes}")
        else:
            problems += l3_problems(caches, plans, core_count)
        if sum(sizes) != n_cores:
            problems.append(f"domain {sorted(domain)[:4]}...: {sum(sizes)} of its {n_cores} cores given out")
    for i, p in enumerate(machine.plans):
        for q in machine.plans[i + 1 :]:
            if p.cpus & q.cpus and not (
                p.domain_cpus == q.domain_cpus and core_count(p.domain_cpus) < len(groups[p.domain_cpus])
            ):
                problems.append(f"{p.pci_bus_id}#{p.rank} and {q.pci_bus_id}#{q.rank} overlap")
    return problems


def l3_problems(caches: list[CpuSet], plans: list[RankPlan], core_count: Callable[[CpuSet], int]) -> list[str]:
    """A domain holding several L3 caches: its ranks (in rank order) split no more caches
    between two neighbours than the best of every balanced division of the caches' cores
    in that order would; so with caches that divide evenly, no cache is shared, and each
    rank keeps to one cache where the ranks outnumber them evenly."""
    cache_cores = [core_count(c) for c in caches]
    n_cores, n_ranks = sum(cache_cores), len(plans)
    ends = set(itertools.accumulate(cache_cores))
    base, extra = divmod(n_cores, n_ranks)
    fewest = n_ranks
    for larger in itertools.combinations(range(n_ranks), extra):
        sizes = [base + (rank in larger) for rank in range(n_ranks)]
        cuts = list(itertools.accumulate(sizes))[:-1]
        fewest = min(fewest, sum(1 for cut in cuts if cut not in ends))
    shared = sum(1 for p, q in itertools.pairwise(plans) if any(c & p.cpus and c & q.cpus for c in caches))
    if shared > fewest:
        return [f"ranks {[p.pci_bus_id for p in plans]} split {shared} L3s between them where {fewest} would do"]
    return []


@pytest.mark.parametrize("ranks_per_gpu", [1, 2])
@pytest.mark.parametrize("key", ALL_TOPOLOGIES)
def test_every_topology_gets_a_sound_plan(load: Callable[[str], Topology], key: str, ranks_per_gpu: int) -> None:
    topology = load(key)
    machine = plan_machine(topology, ranks_per_gpu)
    assert plan_problems(topology, machine, ranks_per_gpu) == []
    if not topology.gpus:
        assert machine.plans == () and machine.warnings
    # Deterministic: the same machine with its lists handed over reversed, planned again.
    shuffled = Topology.build(
        source=topology.source,
        online_cpus=sorted(topology.online_cpus, reverse=True),
        allowed_cpus=topology.allowed_cpus,
        numa_nodes=reversed(topology.numa_nodes),
        packages=reversed(topology.packages),
        cores=reversed(topology.cores),
        l3_groups=reversed(topology.l3_groups),
        gpus=reversed(topology.gpus),
        node_distances=topology.node_distances,
    )
    assert plan_machine(shuffled, ranks_per_gpu) == machine == plan_machine(topology, ranks_per_gpu)


def test_the_checker_catches_broken_plans() -> None:
    topology = xml("mpibind-xml__g4dnmetal.xml")
    good = plan_machine(topology)
    assert plan_problems(topology, good, 1) == []
    first, second = good.plans[0], good.plans[1]
    broken = {
        "small domain": replace(first, domain_cpus=first.cpus),
        "remote CPUs": replace(first, cpus=cpus("24-29,72-77"), domain_cpus=first.domain_cpus | cpus("24-29,72-77")),
        "split core": replace(first, cpus=cpus("0-5")),
        "overlap": replace(second, cpus=first.cpus),
        "unbalanced": replace(second, cpus=cpus("6-10,54-58")),
        "wrong index": replace(first, gpu_index=3),
    }
    for what, bad in broken.items():
        plans = tuple(bad if (p.pci_bus_id, p.rank) == (bad.pci_bus_id, bad.rank) else p for p in good.plans)
        assert plan_problems(topology, replace(good, plans=plans), 1), what
    # A fallback without its warning.
    irregular = xml("hwloc-xml__64intel64-3g2n+2n-irregulargroups+pci.xml")
    machine = plan_machine(irregular)
    silent = tuple(replace(p, warnings=()) for p in machine.plans)
    assert plan_problems(irregular, replace(machine, plans=silent), 1)


def test_ranks_per_gpu_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="ranks_per_gpu"):
        plan_machine(xml("mpibind-xml__g4dnmetal.xml"), 0)


# --------------------------------------------------------------------------------------
# Machines whose layout is documented


def test_g4dnmetal_gives_each_of_four_gpus_per_node_six_cores() -> None:
    machine = plan_machine(xml("mpibind-xml__g4dnmetal.xml"))
    got = {p.pci_bus_id: p.cpus for p in machine.plans}
    assert got == {
        "0000:18:00.0": cpus("0-5,48-53"),
        "0000:19:00.0": cpus("6-11,54-59"),
        "0000:35:00.0": cpus("12-17,60-65"),
        "0000:36:00.0": cpus("18-23,66-71"),
        "0000:e7:00.0": cpus("24-29,72-77"),
        "0000:e8:00.0": cpus("30-35,78-83"),
        "0000:f4:00.0": cpus("36-41,84-89"),
        "0000:f5:00.0": cpus("42-47,90-95"),
    }
    assert [p.numa_node for p in machine.plans] == [0] * 4 + [1] * 4
    assert machine.warnings == ()
    assert any(
        "6 whole cores, 12 CPUs: an even share of the 24 cores of NUMA node 0 among 4 GPUs" in r
        for r in machine.plans[0].reasons
    )


def test_nvidia_dgx2_trimmed_to_two_cores_per_node_is_oversubscribed() -> None:
    topology = xml("hwloc-xml__nvidiaDGX2.xml")
    machine = plan_machine(topology)
    assert len(machine.plans) == 16
    for p in machine.plans:
        gpu = topology.gpu(p.pci_bus_id or "")
        assert gpu is not None
        assert p.cpus == (cpus("0-1") if gpu.numa_node == 0 else cpus("24-25"))
    assert sum("oversubscribed" in w for w in machine.warnings) == 2  # one per node


def test_eas_tioga_keeps_each_gcd_inside_its_own_l3() -> None:
    topology = xml("mpibind-xml__eas-tioga.xml")
    l3 = {g.cpus for g in topology.l3_groups}
    for ranks_per_gpu in (1, 2):
        machine = plan_machine(topology, ranks_per_gpu)
        for p in machine.plans:
            gpu = topology.gpu(p.pci_bus_id or "")
            assert gpu is not None and gpu.local_cpus in l3
            assert p.cpus <= gpu.local_cpus and p.domain_cpus == gpu.local_cpus
            assert len(p.cpus) == 16 // ranks_per_gpu
        assert machine.warnings == ()
    assert plan_machine(topology, 2).plans[0].cpus == cpus("48-51,112-115")
    # A GCD alone on its node still keeps to its own L3 group, not the whole node.
    s = suggest(
        topology, gpu_bus_ids=("0000:c6:00.0",), allowed_cpus=None, current_cpus=frozenset(), demand_cpus=2.0, others=[]
    )
    assert s.cpus == cpus("56-63,120-127") and s.numa_node == 3


def test_epyc_corona_p2_slices_are_whole_ccxs() -> None:
    topology = xml("mpibind-xml__epyc-corona-p2.xml")
    machine = plan_machine(topology)
    assert [p.cpus for p in machine.plans[:4]] == [
        cpus("0-5,48-53"),
        cpus("6-11,54-59"),
        cpus("12-17,60-65"),
        cpus("18-23,66-71"),
    ]
    for p in machine.plans:  # two whole three-core L3 groups each, never a straddle
        touched = [g.cpus for g in topology.l3_groups if g.cpus & p.cpus]
        assert len(touched) == 2 and frozenset().union(*touched) == p.cpus


def test_cts1_pascal_puts_both_gpus_on_node_0_and_says_node_1_is_unused() -> None:
    machine = plan_machine(xml("mpibind-xml__cts1-pascal.xml"))
    assert [p.cpus for p in machine.plans] == [cpus("0-8,36-44"), cpus("9-17,45-53")]
    assert not any(p.cpus & cpus("18-35,54-71") for p in machine.plans)
    assert any("NUMA node 1" in n and "18-35,54-71" in n for n in machine.notes)


def test_coral_lassen_uses_sparse_node_8_and_never_the_reserved_cpus() -> None:
    topology = xml("mpibind-xml__coral-lassen.xml")
    machine = plan_machine(topology)
    assert [p.numa_node for p in machine.plans] == [0, 0, 8, 8]
    assert [p.cpus for p in machine.plans] == [cpus("8-47"), cpus("48-87"), cpus("96-135"), cpus("136-175")]
    assert not any(p.cpus & cpus("0-7,88-95") for p in machine.plans)


def test_uneven_split_gives_the_extra_cores_to_the_lowest_gpus() -> None:
    # Node 1 of this file: 8 cores for three GPUs (two NVIDIA, one AMD): 3, 3, 2 in bus order.
    machine = plan_machine(xml("hwloc-xml__32em64t-2n8c2t-pci-wholeio.xml"))
    node1 = [p for p in machine.plans if p.numa_node == 1]
    assert [(p.pci_bus_id, p.gpu_index, len(p.cpus)) for p in node1] == [
        ("0000:83:00.0", 1, 6),
        ("0000:84:00.0", 2, 6),
        ("0000:84:00.1", 0, 4),
    ]


def test_gpus_whose_nodes_are_not_allowed_plan_within_the_allowed_cpus_and_say_so() -> None:
    machine = plan_machine(xml("hwloc-xml__64intel64-3g2n+2n-irregulargroups+pci.xml"))
    assert [p.cpus for p in machine.plans] == [cpus("0-7"), cpus("8-15")]
    for p in machine.plans:
        assert any(str(p.pci_bus_id) in w and "allowed" in w for w in p.warnings)


def test_gpu_numa_nodes_tree_with_unknown_node_but_known_local_cpus(load: Callable[[str], Topology]) -> None:
    topology = load("sysfs:gpunuma")
    machine = plan_machine(topology)
    plans = {p.pci_bus_id: p for p in machine.plans}
    for bus in ("0004:05:00.0", "0004:06:00.0", "0006:00:00.0"):  # local 0-15: allowed, no guess needed
        assert not any("unknown" in w or "allowed here" in w for w in plans[bus].warnings)
    for bus in ("0007:00:00.0", "0035:04:00.0", "0035:05:00.0"):  # local 88-103: outside the cgroup
        assert any(bus in w and "allowed" in w for w in plans[bus].warnings)
    assert all(p.cpus == cpus("0-15") for p in machine.plans)  # 6 ranks, 4 cores: shared


@pytest.mark.parametrize("local", [None, "0-15"])
def test_unknown_locality_is_warned_and_never_guessed_as_node_0(local: str | None) -> None:
    # Like the 4-socket R910 tree: numa_node -1, local_cpulist the whole machine.
    gpu = Gpu("0000:3b:00.0", "nvidia", None, None if local is None else cpus(local))
    topology = small_machine(nodes={0: "0-3,8-11", 1: "4-7,12-15"}, smt=2, gpus=[gpu])
    machine = plan_machine(topology)
    (plan,) = machine.plans
    assert plan.cpus == cpus("0-15")  # both nodes: no guess
    assert plan.numa_node is None
    assert plan_problems(topology, machine, 1) == []
    assert any("0000:3b:00.0" in w and "unknown" in w and "node 0" in w for w in machine.warnings)


def test_cores_partly_outside_the_allowed_set_are_dropped_unless_nothing_is_left() -> None:
    gpu = Gpu("0000:3b:00.0", "nvidia", 0, cpus("0-7"))
    # Cores are {0,4} {1,5} {2,6} {3,7}; only CPU 2 of core {2,6} is allowed.
    some = small_machine(nodes={0: "0-7"}, smt=2, gpus=[gpu], allowed="0-2,4-5")
    assert plan_machine(some).plans[0].cpus == cpus("0-1,4-5")
    assert any("left out" in r.lower() for r in plan_machine(some).plans[0].reasons)
    only_halves = small_machine(nodes={0: "0-7"}, smt=2, gpus=[gpu], allowed="0-3")
    machine = plan_machine(only_halves)
    assert machine.plans[0].cpus == cpus("0-3")
    assert any("partly allowed" in w for w in machine.warnings)


def test_shares_follow_l3_groups_not_cpu_numbers() -> None:
    # One node whose two L3 groups interleave (even and odd CPUs): each of its two GPUs
    # gets one whole L3 group, not CPUs 0-3 and 4-7 across both.
    gpus = [Gpu("0000:3b:00.0", "nvidia", 0, cpus("0-7")), Gpu("0000:5e:00.0", "nvidia", 0, cpus("0-7"))]
    topology = small_machine(nodes={0: "0-7"}, smt=1, gpus=gpus, l3=["0,2,4,6", "1,3,5,7"])
    assert [p.cpus for p in plan_machine(topology).plans] == [cpus("0,2,4,6"), cpus("1,3,5,7")]
    # A hog on CPU 0 spoils the first group for the rank of GPU 0: its 4 cores come whole
    # from the other group rather than from the three free cores left in its own slice.
    s = suggest(
        topology,
        gpu_bus_ids=("0000:3b:00.0",),
        allowed_cpus=None,
        current_cpus=frozenset(),
        demand_cpus=3.0,
        others=[hog(900, "0"), peer(101, "0000:5e:00.0")],
    )
    assert s.cpus == cpus("1,3,5,7") and s.move_off == ()


def test_shares_stay_balanced_where_l3_groups_do_not_divide_among_the_ranks() -> None:
    # 12 cores in two L3 groups of 6, three GPUs: whole groups would give 3, 3 and 6 cores,
    # and the rank of 3 would set the pace of all. Balance is the rule: 4 cores each, the
    # middle slice straddling both groups; a suggestion for that rank keeps to its slice.
    gpus = [Gpu(f"0000:{b}:00.0", "nvidia", 0, cpus("0-11")) for b in ("3b", "5e", "86")]
    topology = small_machine(nodes={0: "0-11"}, smt=1, gpus=gpus, l3=["0-5", "6-11"])
    assert [p.cpus for p in plan_machine(topology).plans] == [cpus("0-3"), cpus("4-7"), cpus("8-11")]
    s = suggest(
        topology,
        gpu_bus_ids=("0000:5e:00.0",),
        allowed_cpus=None,
        current_cpus=frozenset(),
        demand_cpus=3.0,
        others=[peer(101, "0000:3b:00.0"), peer(103, "0000:86:00.0")],
    )
    assert s.cpus == cpus("4-7")


def three_l3_groups_two_gpus() -> Topology:
    """A node of 24 cores in three 8-core L3 groups, with two GPUs local to it: whole groups
    cannot be shared evenly between the two ranks (16 and 8 cores)."""
    gpus = [Gpu("0000:3b:00.0", "nvidia", 0, cpus("0-47")), Gpu("0000:5e:00.0", "nvidia", 0, cpus("0-47"))]
    return small_machine(nodes={0: "0-47"}, smt=2, gpus=gpus, l3=["0-7,24-31", "8-15,32-39", "16-23,40-47"])


def test_two_gpus_on_three_l3_groups_get_twelve_cores_each_not_sixteen_and_eight() -> None:
    topology = three_l3_groups_two_gpus()
    machine = plan_machine(topology)
    assert plan_problems(topology, machine, 1) == []
    assert [p.cpus for p in machine.plans] == [cpus("0-11,24-35"), cpus("12-23,36-47")]
    assert all("12 whole cores, 24 CPUs: an even share" in " ".join(p.reasons) for p in machine.plans)
    assert all("span 2 L3 caches" in " ".join(p.reasons) for p in machine.plans)
    # Two ranks per GPU: four ranks of 6 cores, two of them splitting the middle group.
    four = plan_machine(topology, 2)
    assert plan_problems(topology, four, 2) == []
    assert sorted(len(p.cpus) for p in four.plans) == [12] * 4
    # Each rank's suggestion, beside the other rank, is its own slice: they still tile the node.
    for mine, other in (("0000:3b:00.0", "0000:5e:00.0"), ("0000:5e:00.0", "0000:3b:00.0")):
        s = suggest(
            topology,
            gpu_bus_ids=(mine,),
            allowed_cpus=None,
            current_cpus=frozenset(),
            demand_cpus=8.0,
            others=[peer(101, other)],
        )
        assert s.cpus == next(p.cpus for p in machine.plans if p.pci_bus_id == mine)


def test_whole_l3_groups_are_kept_where_the_balanced_shares_allow() -> None:
    # 16 cores in groups of 5, 5 and 6, three ranks: shares of 6, 5, 5 (the extra core to
    # the lowest rank) would split two groups; 5, 5, 6 splits none and is as balanced.
    gpus = [Gpu(f"0000:{b}:00.0", "nvidia", 0, cpus("0-15")) for b in ("3b", "5e", "86")]
    topology = small_machine(nodes={0: "0-15"}, smt=1, gpus=gpus, l3=["0-4", "5-9", "10-15"])
    machine = plan_machine(topology)
    assert [p.cpus for p in machine.plans] == [cpus("0-4"), cpus("5-9"), cpus("10-15")]
    assert any("divided whole among 3 ranks" in r for r in machine.plans[0].reasons)
    assert any("placed where they split the fewest L3 caches" in r for r in machine.plans[2].reasons)


def test_no_gpu_means_no_plan_and_a_warning() -> None:
    machine = plan_machine(xml("hwloc-xml__192em64t-24n8c2t.xml"))
    assert machine.plans == () and any("No GPU" in w for w in machine.warnings)


# --------------------------------------------------------------------------------------
# suggest


def test_a_lone_rank_gets_its_whole_node() -> None:
    s = suggest_g4()
    assert s.cpus == cpus("0-23,48-71") and s.numa_node == 0
    assert s.move_off == () and s.warnings == ()


def test_peers_share_the_node_and_the_rank_takes_its_even_slice() -> None:
    s = suggest_g4(others=IDLE_PEERS)
    assert s.cpus == cpus("12-17,60-65")  # GPU 2 of node 0's four: the third slice, as plan_machine gives
    assert s.cpus == by_gpu(plan_machine(xml(G4)))[(NODE0_GPUS[2], 0)].cpus


def test_current_cpus_are_preferred_among_equal_windows() -> None:
    s = suggest_g4(others=IDLE_PEERS, current_cpus=cpus("7-9"))
    assert s.cpus == cpus("6-11,54-59")
    assert any("keeps 3" in r for r in s.reasons)


def test_another_training_process_pinned_cores_are_avoided() -> None:
    pinned = [peer(101, NODE0_GPUS[0], pinned="12-19,60-67"), *IDLE_PEERS[1:]]
    s = suggest_g4(others=pinned)
    assert len(s.cpus) == 12 and not s.cpus & cpus("12-19,60-67")
    assert s.move_off == ()
    assert any("101" in r and "training" in r for r in s.reasons)


def test_another_training_process_busy_cpus_are_avoided() -> None:
    busy = [peer(101, NODE0_GPUS[0], busy="12,14,16", percent=300.0), *IDLE_PEERS[1:]]
    s = suggest_g4(others=busy)
    assert not s.cpus & cpus("12,14,16") and len(s.cpus) == 12


def test_a_hog_is_avoided_when_free_cores_suffice() -> None:
    s = suggest_g4(others=[*IDLE_PEERS, hog(900, "12-15,60-63")])
    assert not s.cpus & cpus("12-15,60-63") and len(s.cpus) == 12
    assert s.move_off == ()


def test_a_hog_is_in_move_off_when_it_cannot_be_avoided() -> None:
    # Hogs on every core of node 0 except 4: a demand of 6 CPUs (4 cores with the headroom)
    # fits in the free ones...
    hogs = [hog(900 + c, str(c)) for c in range(4, 24)]
    s = suggest_g4(others=hogs, demand_cpus=6.0)
    assert s.cpus == cpus("0-3,48-51") and s.move_off == ()
    # ...but a demand of 12 CPUs (6 cores, 8 with the headroom) cannot fit in 4 free cores:
    # the hogs on the rest must go.
    s = suggest_g4(others=hogs, demand_cpus=12.0)
    assert s.cpus == cpus("0-7,48-55")  # the window with the fewest hogs: 4 to 7
    assert s.move_off == (904, 905, 906, 907)
    assert s.move_off and any("pin --isolate" in w and str(s.move_off[0]) in w for w in s.warnings)


def test_a_quiet_process_is_neither_avoided_nor_moved() -> None:
    # Under findings' neighbour floor (5% of a CPU) a process is noise.
    s = suggest_g4(others=[*IDLE_PEERS, hog(900, "12-17,60-65", percent=4.0)])
    assert s.cpus == cpus("12-17,60-65") and s.move_off == ()


def test_demand_larger_than_the_share_is_warned() -> None:
    s = suggest_g4(others=IDLE_PEERS, demand_cpus=17.5)
    assert len(s.cpus) == 12
    assert any("17.5" in w and "12" in w for w in s.warnings)
    assert not any("want" in w for w in suggest_g4(others=IDLE_PEERS, demand_cpus=12.0).warnings)


def test_no_gpu_plans_within_the_allowed_cpus_and_says_so() -> None:
    s = suggest_g4(gpu_bus_ids=(), allowed_cpus=cpus("24-35,72-83"))
    assert s.cpus == cpus("24-35,72-83")
    assert any("no GPU" in r for r in s.reasons)


def test_the_cgroup_cpuset_is_respected() -> None:
    s = suggest_g4(allowed_cpus=cpus("6-11,54-59,30-40"))
    assert s.cpus == cpus("6-11,54-59")  # the node's allowed part; node 1 CPUs are not local
    halves = suggest_g4(allowed_cpus=cpus("0-11"))  # no sibling allowed: no whole core
    assert halves.cpus <= cpus("0-11") and halves.cpus
    assert any("partly allowed" in w for w in halves.warnings)


def test_gpus_on_two_nodes_are_cross_numa_by_design() -> None:
    s = suggest_g4(gpu_bus_ids=("0000:18:00.0", "0000:e7:00.0"))
    assert s.cpus == cpus("0-95")
    assert any("cross-NUMA by design" in w for w in s.warnings)


def test_nvml_bus_id_spelling_is_understood() -> None:
    s = suggest_g4(gpu_bus_ids=("00000000:E7:00.0",))
    assert s.cpus == cpus("24-47,72-95") and s.numa_node == 1


def test_notes_scenario_sixteen_hogs_on_a_sixteen_core_vm() -> None:
    # The H200 VM measured by hand: one node, GPU numa_node -1 with local_cpulist 0-15, and
    # 16 busy hogs of another tenant. Narrowing the job alone made it slower; the
    # suggestion must name the hogs to move and say it only helps if they do.
    gpu = Gpu("0000:00:06.0", "nvidia", None, cpus("0-15"))
    topology = small_machine(nodes={0: "0-15"}, smt=1, gpus=[gpu], l3=["0-15"])
    hogs = [hog(2000 + c, str(c)) for c in range(16)]
    s = suggest(
        topology,
        gpu_bus_ids=("00000000:00:06.0",),
        allowed_cpus=None,
        current_cpus=cpus("0-15"),
        demand_cpus=5.2,
        others=hogs,
    )
    assert len(s.cpus) == math.ceil(5.2 * DEMAND_HEADROOM)  # sized to the demand: the fewest hogs to move
    assert s.move_off == tuple(2000 + c for c in sorted(s.cpus))
    assert any("pin --isolate" in w for w in s.warnings)
    # One NUMA node: the unknown locality is said as a reason, not raised as a warning.
    assert any("unknown" in r and "single NUMA node" in r for r in s.reasons)
    assert not any("unknown" in w for w in s.warnings)


def test_oversubscribed_domain_is_shared_and_warned() -> None:
    topology = xml("hwloc-xml__nvidiaDGX2.xml")
    peers = [peer(100 + i, g.pci_bus_id) for i, g in enumerate(topology.gpus[1:8])]
    s = suggest(
        topology,
        gpu_bus_ids=("0000:34:00.0",),
        allowed_cpus=None,
        current_cpus=frozenset(),
        demand_cpus=1.0,
        others=peers,
    )
    assert s.cpus == cpus("0-1")
    assert any("oversubscribed" in w for w in s.warnings)


def test_suggest_is_deterministic() -> None:
    others = [*IDLE_PEERS, hog(900, "0-3"), hog(901, "20,21")]
    first = suggest_g4(others=others, current_cpus=cpus("5-9"))
    assert all(suggest_g4(others=list(reversed(others)), current_cpus=cpus("5-9")) == first for _ in range(3))


# --------------------------------------------------------------------------------------
# Several L3 caches in one NUMA node (AMD EPYC NPS1: one L3 per CCX)


def lstopo_l3_cpusets(path: Path) -> set[CpuSet]:
    """The L3 caches' CPU sets as hwloc itself reads the file (``lstopo --only L3Cache -c``)."""
    out = subprocess.run(
        ["lstopo-no-graphics", "--input", str(path), "--only", "L3Cache", "-c"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    found = set()
    for line in out.splitlines():
        words = line.split("cpuset=")[1].split()[0].split(",")  # 32-bit words, most significant first
        mask = int("".join(w.removeprefix("0x").zfill(8) for w in words), 16)
        found.add(frozenset(i for i in range(mask.bit_length()) if mask >> i & 1))
    return found


def test_epyc_corona_p2_l3_caches_read_as_hwloc_reads_them() -> None:
    path = XML_DIR / "mpibind-xml__epyc-corona-p2.xml"
    topology = read_hwloc_xml(str(path))
    assert {g.cpus for g in topology.l3_groups} == lstopo_l3_cpusets(path)
    assert len(topology.l3_groups) == 16 and {len(g.cpus) for g in topology.l3_groups} == {6}  # 3 cores + SMT


def test_epyc_three_gpus_of_a_node_get_balanced_shares_splitting_the_fewest_caches() -> None:
    # Node 0: 8 L3 caches of 3 cores, 24 cores. Whole caches would give 9, 9 and 6 cores
    # (3, 3 and 2 caches): the rank of 6 would set the pace. Balanced: 8 each, which must
    # split two caches (cuts at cores 8 and 16 of 24, neither on a cache's edge).
    topology = xml("mpibind-xml__epyc-corona-p2.xml")
    node0 = [g.pci_bus_id for g in topology.gpus if g.numa_node == 0][:3]
    machine = plan_machine(topology, 1, node0)
    assert [p.cpus for p in machine.plans] == [cpus("0-7,48-55"), cpus("8-15,56-63"), cpus("16-23,64-71")]
    assert any("span 4 L3 caches" in r for r in machine.plans[1].reasons)  # the middle rank: 1 + 3 + 3 + 1 cores


def test_epyc_more_ranks_than_l3_caches_get_balanced_shares() -> None:
    # 4 GPUs x 3 ranks = 12 ranks on a node of 8 three-core L3 caches: 2 cores each (the
    # old whole-cache rule gave 1, 2 or 3), every CPU of the node given out.
    topology = xml("mpibind-xml__epyc-corona-p2.xml")
    machine = plan_machine(topology, 3)
    node0 = [p for p in machine.plans if p.numa_node == 0 or p.domain_cpus == machine.plans[0].domain_cpus]
    assert sorted(len(p.cpus) // 2 for p in node0) == [2] * 12
    assert sum(len(p.cpus) for p in node0) == 48


@settings(deadline=None)  # the check below tries every balanced division: C(14, 7) at most
@given(
    st.lists(st.integers(1, 8), min_size=1, max_size=10),
    st.integers(1, 14),
)
def test_rank_shares_are_balanced_and_keep_to_l3_caches_where_balance_allows(
    group_sizes: list[int], n_ranks: int
) -> None:
    units = [frozenset({i}) for i in range(sum(group_sizes))]
    l3_of = {}
    start = 0
    for g, size in enumerate(group_sizes):
        l3_of.update({cpu: g for cpu in range(start, start + size)})
        start += size
    got = rank_shares(units, n_ranks, l3_of)
    if len(units) < n_ranks:
        assert got is None
        return
    assert got is not None
    shares = got[0]
    assert len(shares) == n_ranks and all(shares)
    assert [u for s in shares for u in s] == units  # contiguous, in order, every core once
    sizes = [len(s) for s in shares]
    assert max(sizes) - min(sizes) <= 1  # balance is the rule
    # Whole caches are the preference: no division of the same balance splits fewer.
    ends = set(itertools.accumulate(group_sizes))
    base, extra = divmod(len(units), n_ranks)

    def split(sizes: Sequence[int]) -> int:
        return sum(1 for cut in list(itertools.accumulate(sizes))[:-1] if cut not in ends)

    fewest = min(
        split([base + (r in larger) for r in range(n_ranks)])
        for larger in itertools.combinations(range(n_ranks), extra)
    )
    assert split(sizes) == fewest
    if len(group_sizes) == 1:
        assert got[1] is None and sizes == sorted(sizes, reverse=True)
