"""affmon against real multi-node kernels: QEMU guests booted by the NUMA lab
(``bench/numa/vm.py``), one boot per shape, each running ``bench/numa/lab_checks.py`` once.

The guests' nodes, masks, pages, ``numa_maps``, ``migrate_pages`` and cpusets are their
kernel's; only GPU locality is injected (``bench/numa/lab_gpus.py``: a PCI function per
node on the guest's bus, and NVML's process list). What is asserted is what the guest's
kernel measured, never a time: the guest runs on emulated CPUs beside whatever else the
host runs.

* two nodes of 2 CPUs: the topology against lstopo; four jobs (memory remote, threads
  spread, all local, a rank on the wrong node) through snapshot, diagnose, pin and undo;
  two migrations the kernel does not make in full;
  the monitor in tmux on a job whose memory is remote;
* four nodes of 1 CPU: the topology against lstopo; ``plan`` (live, ``--root``, ``--gpus``)
  with one GPU per node, each rank launched by the plan's numactl line and by ``exec``,
  ``audit`` of ranks started with ``numactl --cpunodebind``, on plan and with one moved;
* two nodes plus a memory-only node: the topology against lstopo; a job whose memory is
  on the memory-only node, and the plan for a GPU whose node is that one.

The first boot installs the lab's Debian packages (root, apt-get) and builds its
initramfs into ``.cache/numa-lab/``. ``python -m bench.numa.lab_scenarios`` prints the same
runs as tables, and the bandwidth the tests do not measure (docs/numa-lab.md).
"""

from __future__ import annotations

import json
import os
import platform
import re
from typing import Any

import pytest

from affmon.core.model.cpuset import parse_cpulist
from affmon.core.recording.format import topology_from_json
from bench.numa import vm
from bench.numa.lab_host import LabError, missing_packages
from tests.helpers.topology_trees import HwlocView, compare_cpu_side, parse_hwloc_xml

MIB = 1 << 20
# Bytes a live process's resident set may move by between two reads (its interpreter's
# heap; the kernel's NUMA balancing moves a few pages of it meanwhile).
SLACK = 2 * MIB

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.machine() != "x86_64", reason="the lab boots x86-64 Linux guests"
)


def boot(shape: str, parts: str, timeout_s: float) -> dict[str, Any]:
    """One boot of ``shape`` running ``affmon topology --json`` (the installed command) and
    ``lab_checks PARTS``; their JSON, with the lab's timings."""
    if os.geteuid() != 0 and missing_packages():
        pytest.skip(f"the NUMA lab needs root to install {', '.join(missing_packages())} (or install them)")
    command = f'affmon topology --json >"$LAB_OUT/topology.json" && python -m bench.numa.lab_checks {parts}'
    try:
        result = vm.run(shape, command, timeout_s=timeout_s)
    except LabError as exc:
        pytest.fail(str(exc))
    if result.returncode != 0 or "checks.json" not in result.files:
        pytest.fail(
            f"{shape}: exit {result.returncode} after {result.wall_s:.0f} s (timed out: {result.timed_out})\n"
            f"stderr: {result.stderr[-3000:]}\nconsole: {result.console[-3000:]}"
        )
    data: dict[str, Any] = json.loads(result.files["checks.json"])
    data["command_topology"] = json.loads(result.files["topology.json"])
    data["lab"] = {"boot_s": result.boot_s, "command_s": result.command_s, "wall_s": result.wall_s}
    return data


@pytest.fixture(scope="module")
def two_nodes() -> dict[str, Any]:
    return boot("two-nodes", "placement tui", timeout_s=1500)


@pytest.fixture(scope="module")
def four_nodes() -> dict[str, Any]:
    return boot("four-nodes", "topology ranks", timeout_s=1200)


@pytest.fixture(scope="module")
def memory_only() -> dict[str, Any]:
    return boot("memory-only", "memory-only", timeout_s=900)


# -- topology -------------------------------------------------------------------------


def check_topology(data: dict[str, Any], cpu_nodes: int, memory_only_nodes: set[int]) -> None:
    top = data["topology"]
    assert top["lstopo_xml"], top["lstopo_error"]
    ours = top["affmon"]["json"]
    assert ours == data["command_topology"], "affmon in the lab's process and the affmon command disagree"
    topo = topology_from_json(ours)
    hw = HwlocView.of(parse_hwloc_xml(top["lstopo_xml"]))
    compare_cpu_side(topo, hw, topo.online_cpus)
    sysfs = top["sysfs"]
    assert len(topo.cpu_numa_nodes) == cpu_nodes
    assert {n.id for n in topo.numa_nodes} == set(hw.numa) == {int(n) for n in sysfs["nodes"]}
    for node in topo.numa_nodes:
        assert node.cpus == parse_cpulist(sysfs["nodes"][str(node.id)]["cpulist"]), f"node {node.id}"
        assert node.memory_only == (node.id in memory_only_nodes), f"node {node.id}"
    assert {n.id for n in topo.memory_only_nodes} == memory_only_nodes
    assert parse_cpulist(sysfs["has_cpu"]) == {n.id for n in topo.cpu_numa_nodes}
    assert parse_cpulist(sysfs["has_memory"]) == {n.id for n in topo.numa_nodes}
    # Memory sizes and distances, where this affmon reports them: hwloc's and the kernel's.
    for node in ours["numa_nodes"]:
        if "memory_bytes" in node:
            assert node["memory_bytes"] == int(hw.numa[node["id"]].attrs["local_memory"])
            assert node["memory_bytes"] == sysfs["nodes"][str(node["id"])]["mem_total_bytes"]
    if "node_distances" in ours:
        ids = sorted(int(n) for n in sysfs["nodes"])
        assert ours["node_distances"] == [[int(d) for d in sysfs["nodes"][str(i)]["distance"]] for i in ids]


def test_two_nodes_topology_is_lstopos(two_nodes):
    check_topology(two_nodes, cpu_nodes=2, memory_only_nodes=set())


def test_four_nodes_topology_is_lstopos(four_nodes):
    check_topology(four_nodes, cpu_nodes=4, memory_only_nodes=set())


def test_memory_only_topology_is_lstopos(memory_only):
    """The memory-only node: no CPUs in sysfs or in affmon; hwloc hangs it from the
    machine, so it is compared as a node, not by CPUs."""
    check_topology(memory_only, cpu_nodes=2, memory_only_nodes={2})
    hw = HwlocView.of(parse_hwloc_xml(memory_only["topology"]["lstopo_xml"]))
    assert hw.numa[2].ancestor_of_type("Package") is None


# -- where the memory is, and what affmon makes of it ---------------------------------


def placement(two_nodes: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = two_nodes["placement"]
    return result


def codes(two_nodes: dict[str, Any], job: str) -> set[str]:
    return {f["code"] for f in placement(two_nodes)["findings"][job]}


def share_on(numa_maps: dict[str, int], node: int) -> float:
    return numa_maps.get(str(node), 0) / sum(numa_maps.values())


def test_snapshot_memory_by_node_is_numa_maps(two_nodes):
    """``snapshot --json``'s memory_by_node against numa_maps read just before and after it."""
    for name, m in placement(two_nodes)["memory"].items():
        ours = {int(k): v for k, v in (m["affmon"] or {}).items()}
        before = {int(k): v for k, v in m["numa_maps_before"].items()}
        after = {int(k): v for k, v in m["numa_maps_after"].items()}
        assert ours, f"{name}: affmon read no memory"
        for node in set(ours) | set(before) | set(after):
            low = min(before.get(node, 0), after.get(node, 0)) - SLACK
            high = max(before.get(node, 0), after.get(node, 0)) + SLACK
            assert low <= ours.get(node, 0) <= high, f"{name} node {node}: {ours} vs {before} / {after}"
        assert abs(sum(ours.values()) - sum(after.values())) <= SLACK, name


def test_where_the_jobs_were_placed(two_nodes):
    """The jobs are where the lab put them (the premise of the findings below)."""
    memory = placement(two_nodes)["memory"]
    assert share_on(memory["lab-remote"]["numa_maps_before"], 0) > 0.8
    assert share_on(memory["lab-local"]["numa_maps_before"], 0) > 0.8
    assert share_on(memory["lab-wrong"]["numa_maps_before"], 1) > 0.8


def test_remote_memory_is_raised_for_the_remote_job(two_nodes):
    found = {f["code"]: f for f in placement(two_nodes)["findings"]["lab-remote"]}
    assert "REMOTE_MEMORY" in found and "CROSS_NUMA" not in found
    (process,) = found["REMOTE_MEMORY"]["evidence"]["processes"]
    assert process["home_node"] == 1
    assert process["remote_bytes_by_node"]["0"] >= 96 * MIB


def test_cross_numa_is_raised_for_threads_on_both_nodes(two_nodes):
    assert "CROSS_NUMA" in codes(two_nodes, "lab-spread")
    assert "REMOTE_MEMORY" not in codes(two_nodes, "lab-spread")  # no home node: it runs on both


def test_neither_for_a_job_on_one_node_with_its_memory(two_nodes):
    assert not {"CROSS_NUMA", "REMOTE_MEMORY"} & codes(two_nodes, "lab-local")


def test_a_rank_on_the_wrong_node_is_cross_numa_not_remote_memory(two_nodes):
    """Threads and memory together on node 1, its GPU on node 0."""
    assert "CROSS_NUMA" in codes(two_nodes, "lab-wrong")
    assert "REMOTE_MEMORY" not in codes(two_nodes, "lab-wrong")


# -- moving it ------------------------------------------------------------------------


def test_the_remote_memory_findings_pin_moves_the_pages(two_nodes):
    """The command REMOTE_MEMORY names (its home node's CPUs, --migrate-memory)."""
    remote = placement(two_nodes)["remote"]
    assert remote["finding_command"][2:] == ["--cpus", "2-3", "--migrate-memory"]
    pin = remote["pin"]
    assert pin["rc"] == 0, pin["stderr"]
    assert pin["json"]["memory"]["to_node"] == 1 and pin["json"]["memory"]["ok"]
    assert share_on(remote["before"]["numa_maps"], 0) > 0.8
    assert share_on(remote["after"]["numa_maps"], 1) >= 0.95
    (entry,) = remote["journal"]
    assert entry["memory"]["state"] == "moved" and entry["memory"]["to_node"] == 1


def test_suggest_migrate_memory_brings_a_wrong_node_rank_home_and_undo_keeps_the_pages(two_nodes):
    wrong = placement(two_nodes)["wrong"]
    pin = wrong["pin"]
    assert pin["rc"] == 0, pin["stderr"]
    assert pin["json"]["suggestion"]["cpus"] == "0-1"  # its GPU's node
    assert set(wrong["before"]["masks"].values()) == {"2-3"}
    assert set(wrong["after"]["masks"].values()) == {"0-1"}
    assert share_on(wrong["before"]["numa_maps"], 1) > 0.9
    assert share_on(wrong["after"]["numa_maps"], 0) >= 0.95
    (entry,) = wrong["journal"]
    assert entry["id"] == pin["json"]["journal_id"]
    assert entry["memory"]["state"] == "moved" and entry["memory"]["to_node"] == 0
    assert entry["memory"]["from_nodes"] == [1]
    undo = wrong["undo"]
    assert undo["rc"] == 0, undo["stderr"]
    assert set(wrong["after_undo"]["masks"].values()) == {"2-3"}
    assert any("stays" in note for note in undo["json"]["notes"]), undo["json"]["notes"]
    assert share_on(wrong["after_undo"]["numa_maps"], 0) >= 0.95


def test_suggest_migrate_memory_moves_a_remote_jobs_pages(two_nodes):
    """Its threads on their node already, its memory not: the pin's work is the migration."""
    remote = placement(two_nodes)["remote"]
    assert share_on(remote["before_suggest"]["numa_maps"], 0) > 0.8
    suggest = remote["suggest"]
    assert suggest["rc"] == 0, suggest["stderr"]
    assert "no_change" not in suggest["json"], suggest["json"].get("no_change")
    assert suggest["json"]["memory"]["to_node"] == 1 and suggest["json"]["memory"]["ok"]
    assert share_on(remote["after_suggest"]["numa_maps"], 1) >= 0.95


def test_a_migration_the_cpuset_forbids_is_said_and_moves_nothing(two_nodes):
    """The pin is made from a cpuset that allows node 0 only: every thread is pinned,
    the kernel moves no page, the pin says so (exit 1) and the journal records it."""
    fenced = placement(two_nodes)["failed"]["fenced"]
    pin = fenced["pin"]
    assert pin["rc"] == 1
    assert "threads pinned, but memory not moved" in pin["stderr"]
    assert set(fenced["after"]["masks"].values()) == {"2-3"}
    # Nothing went to node 1 (the kernel's NUMA balancing may bring a few MiB the other way
    # meanwhile: the job ran on node 0 until the pin).
    before, after = fenced["before"]["numa_maps"], fenced["after"]["numa_maps"]
    assert after.get("1", 0) <= before.get("1", 0) + SLACK
    assert after.get("0", 0) >= before.get("0", 0) - SLACK
    (entry,) = fenced["journal"]
    assert entry["memory"]["state"] == "failed" and entry["memory"]["error"]


def test_a_migration_to_a_full_node_leaves_every_thread_pinned_and_is_journaled(two_nodes):
    """Node 1 nearly filled by another job: the kernel moves part of the pages, then runs
    out of room. The pin is said to have failed (exit 1), every thread stays pinned."""
    full = placement(two_nodes)["failed"]["full"]
    before, after = full["before"]["numa_maps"], full["after"]["numa_maps"]
    assert before.get("0", 0) - after.get("0", 0) > 16 * MIB  # part of it moved...
    assert after.get("0", 0) > 16 * MIB  # ...and part of it did not
    pin = full["pin"]
    assert pin["rc"] == 1, pin["stderr"]
    assert set(full["after"]["masks"].values()) == {"2-3"}
    (entry,) = full["journal"]
    assert entry["memory"]["state"] == "failed"


def test_a_migration_to_a_full_node_says_what_moved(two_nodes):
    full = placement(two_nodes)["failed"]["full"]
    memory = full["pin"]["json"]["memory"]
    assert memory["bytes_after"] is not None
    assert abs(memory["bytes_after"].get("1", 0) - full["after"]["numa_maps"].get("1", 0)) <= SLACK


# -- the memory-only node -------------------------------------------------------------


def test_memory_on_the_memory_only_node_is_read_not_judged_and_never_moved(memory_only):
    m = memory_only["memory_only"]
    on_node2 = m["numa_maps"].get("2", 0)
    assert on_node2 >= 96 * MIB
    assert abs(m["affmon_memory"].get("2", 0) - on_node2) <= SLACK
    assert "REMOTE_MEMORY" not in {f["code"] for f in m["findings"]}
    pin = m["pin"]
    assert pin["rc"] == 0, pin["stderr"]
    assert 2 not in pin["json"]["memory"]["from_nodes"]
    assert abs(m["after"]["numa_maps"].get("2", 0) - on_node2) <= SLACK


def test_a_gpu_on_the_memory_only_node_is_planned_on_its_cpus_node(memory_only):
    """Like Grace Hopper's GPU memory node: the rank goes to the node of the GPU's local
    CPUs (1), never to the memory-only node (2)."""
    plan = memory_only["memory_only"]["plan"]
    assert plan["rc"] == 0, plan["stderr"]
    (rank,) = plan["json"]["plans"]
    assert rank["numa_node"] == 1
    assert parse_cpulist(rank["cpus"]) <= {2, 3}
    assert rank["launch"]["numactl"].endswith("--membind=1")


# -- ranks on four nodes: plan, exec, audit -------------------------------------------


def ranks(four_nodes: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = four_nodes["ranks"]
    return result


def node_cpus(four_nodes: dict[str, Any]) -> dict[int, frozenset[int]]:
    nodes = four_nodes["topology"]["sysfs"]["nodes"]
    return {int(n): frozenset(parse_cpulist(v["cpulist"])) for n, v in nodes.items() if v["cpulist"]}


def test_plan_gives_each_rank_whole_cores_of_its_gpus_node_with_membind(four_nodes):
    """One GPU per node: each rank's CPUs are whole cores of its GPU's node, disjoint from
    every other rank's, and its numactl line binds memory to that node."""
    r = ranks(four_nodes)
    plan = r["plan_live"]
    assert plan["rc"] == 0, plan["stderr"]
    nodes = node_cpus(four_nodes)
    cores = [c.cpus for c in topology_from_json(four_nodes["command_topology"]).cores]
    plans = plan["json"]["plans"]
    assert [p["numa_node"] for p in plans] == sorted(r["gpus"].values()) == sorted(nodes)
    seen: set[int] = set()
    for p in plans:
        cpus = parse_cpulist(p["cpus"])
        assert cpus and cpus <= nodes[p["numa_node"]], p
        assert all(core <= cpus or not core & cpus for core in cores), f"a core split: {p}"
        assert not cpus & seen, f"CPUs of two ranks: {p}"
        seen |= cpus
        assert p["launch"]["numactl"].endswith(f"--membind={p['numa_node']}"), p["launch"]


def test_plan_from_a_recorded_tree_is_the_live_plan_and_gpus_picks_ranks(four_nodes):
    r = ranks(four_nodes)
    assert r["plan_root"]["rc"] == 0, r["plan_root"]["stderr"]
    assert r["plan_root"]["json"]["plans"] == r["plan_live"]["json"]["plans"]
    share = r["plan_root_share"]["json"]["plans"]
    assert [(p["gpu_index"], p["numa_node"]) for p in share] == [(1, 1), (3, 3)]


@pytest.mark.parametrize("how", ["numactl", "exec"])
def test_each_rank_launched_runs_on_its_plan_with_its_memory_there(four_nodes, how):
    """Launched by the plan's own numactl line, and by ``affmon exec --from-env``: the
    rank's mask is its plan and the 32 MiB it writes sit on its node."""
    r = ranks(four_nodes)
    for p, rank in zip(r["plan_live"]["json"]["plans"], r["launch"][how], strict=True):
        assert rank["rc"] == 0, rank["stderr"]
        assert set(rank["mask"]) == parse_cpulist(p["cpus"]), rank
        on_node = rank["numa_maps"].get(str(p["numa_node"]), 0)
        assert on_node >= 32 * MIB, rank
        assert on_node / sum(rank["numa_maps"].values()) >= 0.95, rank


def test_audit_of_ranks_on_their_nodes_then_of_one_moved(four_nodes):
    """Ranks started with ``numactl --cpunodebind=N --membind=N`` on their GPU's node are on
    plan (exit 0); rank 1 moved to another node's CPU is off plan and FAR (exit 1)."""
    audit = ranks(four_nodes)["audit"]
    on_plan = audit["on_plan"]
    assert on_plan["rc"] == 0, on_plan["stderr"] or on_plan["json"]
    assert [x["verdict"] for x in on_plan["json"]["ranks"]] == ["on plan"] * 4
    off_plan = audit["off_plan"]
    assert off_plan["rc"] == 1, off_plan["stderr"]
    moved = audit["moved"]
    by_rank = {x["local_rank"]: x for x in off_plan["json"]["ranks"]}
    rank = by_rank[moved["rank"]]
    assert rank["verdict"] == "off plan"
    assert parse_cpulist(rank["mask"]) == parse_cpulist(moved["cpus"])
    assert "FAR" in {problem["code"] for problem in rank["problems"]}
    for other, x in by_rank.items():
        if other != moved["rank"]:
            assert "FAR" not in {problem["code"] for problem in x["problems"]}, x


# -- the monitor in the guest ---------------------------------------------------------


def test_the_monitor_shows_two_nodes_and_the_jobs_memory_per_node(two_nodes):
    """``affmon --pid JOB`` in tmux: the core map has both nodes, the selected job's memory
    line gives what numa_maps holds per node, and REMOTE_MEMORY is shown."""
    tui = two_nodes["tui"]
    screen = tui["screen"]
    for mark in ("job_row_s", "both_nodes_s", "memory_line_s", "remote_memory_s"):
        assert mark in tui, f"never seen: {mark}\n{screen}"
    # (the header's "2 NUMA nodes" gives way to a "falling behind" warning when the guest is slow)
    assert re.search(r"node 0 · .*CPUs 0-1", screen) and re.search(r"node 1 · .*CPUs 2-3", screen), screen
    line = re.search(r"memory node 0 ([\d.]+) GiB · node 1 ([\d.]+) GiB", screen)
    assert line, screen
    for node, shown in enumerate(line.groups()):
        # One decimal of GiB; the job's resident set moves by its interpreter's heap meanwhile.
        assert abs(float(shown) - tui["numa_maps"].get(str(node), 0) / (1 << 30)) <= 0.05 + SLACK / (1 << 30)
    assert "REMOTE_MEMORY" in screen
