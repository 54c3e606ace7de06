"""The lent multi-GPU machines as recorded: their topology as hwloc gathered it,
affmon's plan for them against the masks ``affmon exec --from-env`` gave the live ranks,
and a real two-rank DDP job on two H200s with both ranks forced onto CPUs 0-7
(fixtures/recordings/SOURCES.md, fixtures/sysfs/SOURCES.md)."""

from __future__ import annotations

import gzip
import itertools
from pathlib import Path

import pytest

from affmon.collect.hwloc_xml import read_hwloc_xml
from affmon.collect.sysfs_topology import read_topology
from affmon.core.model.cpuset import parse_cpulist
from affmon.core.model.jobs import find_jobs
from affmon.core.model.rates import Snapshot, make_snapshot
from affmon.core.model.topology import Topology
from affmon.core.plan.advice import suggest_for_job
from affmon.core.plan.planner import plan_machine
from affmon.core.recording.format import read_recording
from affmon.core.rules.base import RuleInputs, Severity
from affmon.core.rules.evaluate import FindingTracker, evaluate
from tests.helpers.topology_trees import (
    FIXTURES,
    TREES,
    HwlocView,
    compare_cpu_side,
    extract_tree,
    lstopo_view,
    parse_hwloc_xml,
)

RECORDINGS = Path(__file__).parent.parent / "fixtures" / "recordings"
MACHINES = {
    # name: (CPUs, GPU bus ids, the masks the live ranks got from `affmon exec --from-env`, by local rank)
    "h200x2": ("0-31", ["0000:00:06.0", "0000:00:07.0"], ["0-15", "16-31"]),
    "h200x4": (
        "0-63",
        ["0000:00:06.0", "0000:00:07.0", "0000:00:08.0", "0000:00:09.0"],
        ["0-15", "16-31", "32-47", "48-63"],
    ),
}
RANK_PIDS = {0: 904, 1: 905}  # the two ranks in the DDP recordings (READY lines of the run)


def _stem(name: str) -> str:
    return TREES[name]


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_cpu_side_matches_hwloc_on_the_machine_and_on_the_tree(name, tmp_path_factory):
    cpus, _, _ = MACHINES[name]
    root = extract_tree(tmp_path_factory, name)
    topo = read_topology(str(root))
    assert topo.online_cpus == topo.allowed_cpus == parse_cpulist(cpus)
    assert [(n.id, n.cpus) for n in topo.numa_nodes] == [(0, parse_cpulist(cpus))]  # one node: the VM shows one
    on_machine = HwlocView.of(parse_hwloc_xml((FIXTURES / f"{_stem(name)}.expected-lstopo.xml").read_text()))
    compare_cpu_side(topo, on_machine, topo.online_cpus)
    compare_cpu_side(topo, lstopo_view(root), topo.online_cpus)


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_gpus_and_plan_from_hwloc_xml_match_the_live_ranks(name):
    cpus, bus_ids, masks = MACHINES[name]
    topo = read_hwloc_xml(str(FIXTURES / f"{_stem(name)}.expected-lstopo.xml"))
    assert [g.pci_bus_id for g in topo.gpus] == bus_ids
    assert all(g.vendor == "nvidia" and g.local_cpus == parse_cpulist(cpus) for g in topo.gpus)
    plan = plan_machine(topo)
    assert [(p.pci_bus_id, p.gpu_index, p.cpus) for p in plan.plans] == [
        (b, i, parse_cpulist(m)) for i, (b, m) in enumerate(zip(bus_ids, masks, strict=True))
    ]


def _load(name: str) -> tuple[Topology, list[Snapshot]]:
    with gzip.open(RECORDINGS / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        header, samples = read_recording(f, name)
        return header.topology, [make_snapshot(a, b, header.topology) for a, b in itertools.pairwise(samples)]


def _active(topology: Topology, snaps: list[Snapshot]):
    tracker = FindingTracker()
    for snap in snaps:
        tracker = tracker.update(evaluate(snap, RuleInputs(topology)))
    return tracker.active


def test_overlapping_ranks_are_named_contended_and_starved():
    topology, snaps = _load("ddp2_overlap")
    jobs = find_jobs(snaps[-1])
    assert {j.pid for j in jobs} == set(RANK_PIDS.values())  # each rank is a job, with its workers
    found = _active(topology, snaps)
    for code in ("CONTENDED", "STARVED"):
        assert {f.pid for f in found if f.code == code and f.severity >= Severity.WARN} == set(RANK_PIDS.values())
    contended = {f.pid: f for f in found if f.code == "CONTENDED"}
    for me, other in ((904, 905), (905, 904)):
        assert str(other) in contended[me].message  # each names the other rank
        assert "0-7" in contended[me].message


def test_suggestion_for_a_rank_leaves_the_other_ranks_cores():
    _, snaps = _load("ddp2_overlap")
    snap = snaps[-1]
    jobs = {j.pid: j for j in find_jobs(snap)}
    other_mask = parse_cpulist("0-7")
    s = suggest_for_job(jobs[RANK_PIDS[0]], snap)
    # as the live `pin --suggest` gave rank 0: its 16-core share, off the CPUs rank 1 holds
    assert s.cpus == parse_cpulist("16-31")
    assert not s.cpus & other_mask
    assert not set(s.move_off) & jobs[RANK_PIDS[1]].pids  # a training peer is shared with, not moved


def test_after_affmons_fix_nothing_is_raised():
    topology, snaps = _load("ddp2_fixed")
    masks = {
        p.sample.pid: p.sample.threads[0].allowed_cpus
        for p in snaps[-1].processes
        if p.sample.pid in RANK_PIDS.values()
    }
    assert masks == {904: parse_cpulist("16-31"), 905: parse_cpulist("0-15")}
    assert not [f for f in _active(topology, snaps) if f.severity >= Severity.WARN]
