"""Each diagnosis rule, raised and not raised, on recordings of a real training job on an
H200 (tests/fixtures/recordings/SOURCES.md). Rules that one machine with one NUMA node and
a full-speed link cannot show (CROSS_NUMA, PCIE_DEGRADED, AFFINITY_DRIFT) run on those
recordings set against another topology or with the one field changed, as each test says."""

from __future__ import annotations

import dataclasses
import gzip
import itertools
from pathlib import Path

import pytest

from affmon.core.model.cpuset import parse_cpulist
from affmon.core.model.jobs import find_jobs
from affmon.core.model.rates import Snapshot, make_snapshot
from affmon.core.model.samples import PcieLink, Sample
from affmon.core.model.topology import Gpu, NumaNode, Topology
from affmon.core.recording.format import read_recording
from affmon.core.rules.base import Finding, RuleInputs, Severity, Thresholds
from affmon.core.rules.evaluate import FindingTracker, evaluate, exit_status

RECORDINGS = Path(__file__).parent.parent / "fixtures" / "recordings"


def load(name: str) -> tuple[Topology, list[Sample]]:
    with gzip.open(RECORDINGS / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        header, samples = read_recording(f, name)
        return header.topology, list(samples)


def snapshots(topology: Topology, samples: list[Sample]) -> list[Snapshot]:
    return [make_snapshot(a, b, topology) for a, b in itertools.pairwise(samples)]


def debounced(topology: Topology, samples: list[Sample], **context) -> list[Finding]:
    tracker = FindingTracker()
    for snap in snapshots(topology, samples):
        tracker = tracker.update(evaluate(snap, RuleInputs(topology, **context)))
    return tracker.active


def codes(findings: list[Finding]) -> dict[str, Severity]:
    return {f.code: f.severity for f in findings}


@pytest.fixture(scope="module")
def rec():
    cache: dict[str, tuple[Topology, list[Sample]]] = {}

    def get(name: str) -> tuple[Topology, list[Sample]]:
        if name not in cache:
            cache[name] = load(name)
        return cache[name]

    return get


def job_pid(topology: Topology, samples: list[Sample]) -> int:
    (job,) = find_jobs(snapshots(topology, samples)[-1])
    return job.pid


# -- jobs ------------------------------------------------------------------------


def test_a_job_is_the_gpu_process_and_its_dataloader_workers(rec):
    topology, samples = rec("clean")
    (job,) = find_jobs(snapshots(topology, samples)[-1])
    assert job.root.sample.gpu_indices == (0,)
    assert len(job.members) == 5  # main process + 4 workers
    assert all(m.sample.ppid == job.pid for m in job.members[1:])
    assert {m.sample.name for m in job.members[1:]} == {"pt_data_worker"}


def test_python_hogs_on_a_gpu_machine_are_tenants_not_jobs(rec):
    topology, samples = rec("hogs")
    jobs = find_jobs(snapshots(topology, samples)[-1])
    assert len(jobs) == 1 and jobs[0].root.sample.gpu_indices == (0,)


# -- healthy runs: nothing ----------------------------------------------------------


@pytest.mark.parametrize("name", ["clean", "pinned"])
def test_healthy_runs_raise_nothing(rec, name):
    topology, samples = rec(name)
    assert debounced(topology, samples) == []


def test_healthy_pinned_job_migrates_and_switches_yet_is_not_flagged(rec):
    # Migrations and involuntary switches alone are not a finding: a healthy job pinned to CPUs 0-5
    # on the H200 had 201 migrations/s and 247 involuntary switches/s.
    topology, samples = rec("pinned")
    snap = snapshots(topology, samples)[-1]
    (job,) = find_jobs(snap)
    switches = sum(th.involuntary_switches_per_s or 0 for m in job.members for th in m.threads)
    assert switches > 10
    assert evaluate(snap, RuleInputs(topology)) == []


# -- STARVED --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "low", "high"), [("hogs", 0.25, 0.8), ("narrow", 0.4, 0.9), ("single_core", 0.6, 1.0)]
)
def test_starved(rec, name, low, high):
    topology, samples = rec(name)
    found = {f.code: f for f in debounced(topology, samples)}
    starved = found["STARVED"]
    assert starved.severity == Severity.BAD
    assert starved.pid == job_pid(topology, samples)
    assert low < starved.evidence["wait_ratio"] < high
    assert starved.tids and starved.evidence["busy_threads"] >= 5


def test_starved_threshold_comes_from_the_table(rec):
    topology, samples = rec("hogs")
    lenient = Thresholds(starved_warn=0.9, starved_bad=0.95)
    assert "STARVED" not in codes(debounced(topology, samples, thresholds=lenient))


# -- MASK_TOO_NARROW ----------------------------------------------------------------


@pytest.mark.parametrize(("name", "mask"), [("narrow", "0-1"), ("single_core", "3")])
def test_mask_too_narrow(rec, name, mask):
    topology, samples = rec(name)
    found = {f.code: f for f in debounced(topology, samples)}["MASK_TOO_NARROW"]
    assert found.evidence["mask"] == mask
    assert found.evidence["demand_cpus"] > found.evidence["cpus_in_mask"]
    assert found.severity == Severity.BAD
    assert len(found.evidence["processes"]) == 5  # the main process and all 4 workers


@pytest.mark.parametrize("name", ["hogs", "pinned", "clean"])
def test_mask_not_too_narrow(rec, name):
    topology, samples = rec(name)
    assert "MASK_TOO_NARROW" not in codes(debounced(topology, samples))


# -- CONTENDED -------------------------------------------------------------------------


def test_contended_names_the_hogs(rec):
    topology, samples = rec("hogs")
    found = {f.code: f for f in debounced(topology, samples)}["CONTENDED"]
    others = found.evidence["others"]
    hogs = {p.pid for p in samples[-1].processes if p.cmdline and "while True" in p.cmdline}
    assert len(hogs) == 16
    assert {o["pid"] for o in others} <= hogs | {p.pid for p in samples[-1].processes if p.kernel}
    assert len({o["pid"] for o in others} & hogs) >= 5
    assert str(others[0]["pid"]) in found.message


def test_contended_overlapping_training_jobs_name_each_other(rec):
    topology, samples = rec("overlap")
    found = [f for f in debounced(topology, samples) if f.code == "CONTENDED"]
    assert {f.pid for f in found} == {j.pid for j in find_jobs(snapshots(topology, samples)[-1])}
    a, b = sorted(found, key=lambda f: f.pid or 0)
    text_a, text_b = repr(dict(a.evidence)), repr(dict(b.evidence))
    assert str(b.pid) in a.message + text_a and str(a.pid) in b.message + text_b
    masks = {f.evidence.get("mask") or f.evidence["also"][0].get("mask") for f in found}
    assert masks == {"0-5", "2-7"}


@pytest.mark.parametrize("name", ["clean", "pinned", "narrow"])
def test_not_contended(rec, name):
    topology, samples = rec(name)
    assert "CONTENDED" not in codes(debounced(topology, samples))


# -- GPU_STARVED -------------------------------------------------------------------------


def test_gpu_starved_when_the_cpu_side_starves(rec):
    topology, samples = rec("narrow")
    found = {f.code: f for f in debounced(topology, samples)}["GPU_STARVED"]
    assert found.evidence["util_percent"] < 50 and found.evidence["wait_ratio"] > 0.4


def test_gpu_not_starved_when_the_cpu_side_is_fine(rec):
    topology, samples = rec("clean")
    assert all(g.util_percent is not None and g.util_percent < 50 for s in samples for g in s.gpus)
    assert "GPU_STARVED" not in codes(debounced(topology, samples))  # low util alone is not it


# -- CROSS_NUMA (the recorded job set against a two-node topology) -----------------------


def two_nodes(gpu_node: int | None) -> Topology:
    """The H200 machine's 16 CPUs split into two NUMA nodes of 8, the GPU on ``gpu_node``
    (None: the firmware does not say, and the GPU is local to every CPU)."""
    nodes = [NumaNode(0, frozenset(range(8))), NumaNode(1, frozenset(range(8, 16)))]
    local = frozenset(range(16)) if gpu_node is None else nodes[gpu_node].cpus
    return Topology.build(
        source="sysfs",
        online_cpus=range(16),
        allowed_cpus=range(16),
        numa_nodes=nodes,
        packages=[],
        cores=[],
        l3_groups=[],
        gpus=[Gpu("0000:00:06.0", "nvidia", gpu_node, local)],
    )


def test_cross_numa_mask_excludes_the_gpu_node(rec):
    _, samples = rec("pinned")  # the job is pinned to CPUs 0-5, all on node 0
    found = {f.code: f for f in debounced(two_nodes(1), samples)}["CROSS_NUMA"]
    assert found.severity == Severity.BAD and found.evidence["gpu_node"] == 1
    assert parse_cpulist(found.evidence["mask"]) == frozenset(range(6))


def test_cross_numa_threads_off_the_gpu_node(rec):
    _, samples = rec("clean")  # unpinned: its threads ran on CPUs of both halves
    found = {f.code: f for f in debounced(two_nodes(0), samples)}["CROSS_NUMA"]
    assert found.severity == Severity.WARN and found.evidence["off_node_threads"] > 0


def test_no_cross_numa_when_the_job_stays_on_the_gpu_node(rec):
    _, samples = rec("pinned")
    assert "CROSS_NUMA" not in codes(debounced(two_nodes(0), samples))


def test_no_cross_numa_when_gpu_locality_is_unknown(rec):
    topology, samples = rec("clean")
    assert topology.gpus[0].numa_node is None  # the real machine: numa_node -1 in sysfs
    assert "CROSS_NUMA" not in codes(debounced(two_nodes(None), samples))


# -- PCIE_DEGRADED (the recorded GPU with its link read as gen 4) -------------------------


def with_link(samples: list[Sample], link: PcieLink) -> list[Sample]:
    return [dataclasses.replace(s, gpus=tuple(dataclasses.replace(g, pcie_link=link) for g in s.gpus)) for s in samples]


def test_pcie_degraded_while_traffic_flows(rec):
    topology, samples = rec("clean")
    found = {f.code: f for f in debounced(topology, with_link(samples, PcieLink(4, 16, 5, 16)))}["PCIE_DEGRADED"]
    assert found.evidence["gen"] == 4 and found.evidence["max_gen"] == 5
    assert found.evidence["traffic_bytes_per_s"] > 100e6
    assert found.pid == job_pid(topology, samples)


def test_pcie_at_full_speed_is_fine(rec):
    topology, samples = rec("clean")
    assert samples[-1].gpus[0].pcie_link == PcieLink(5, 16, 5, 16)  # as recorded
    assert "PCIE_DEGRADED" not in codes(debounced(topology, samples))


def test_pcie_slow_but_idle_is_fine(rec):
    topology, samples = rec("clean")
    idle = [
        dataclasses.replace(
            s,
            gpus=tuple(
                dataclasses.replace(
                    g, pcie_link=PcieLink(1, 16, 5, 16), pcie_rx_window_bytes_per_s=0.0, pcie_tx_window_bytes_per_s=0.0
                )
                for g in s.gpus
            ),
        )
        for s in samples
    ]
    assert "PCIE_DEGRADED" not in codes(debounced(topology, idle))


# -- AFFINITY_DRIFT (what affmon set, against what the recording shows) -------------------


def test_affinity_drift(rec):
    topology, samples = rec("pinned")
    pid = job_pid(topology, samples)
    start = samples[-1].processes[[p.pid for p in samples[-1].processes].index(pid)].start_ticks
    found = {f.code: f for f in debounced(topology, samples, expected_masks={(pid, start): frozenset(range(4))})}
    drift = found["AFFINITY_DRIFT"]
    assert drift.evidence["expected"] == "0-3" and drift.evidence["now"] == ["0-5"]
    assert drift.suggestion == {"cpus": "0-3", "move_off": []}


def test_no_drift_when_masks_hold(rec):
    topology, samples = rec("pinned")
    pid = job_pid(topology, samples)
    start = samples[-1].processes[[p.pid for p in samples[-1].processes].index(pid)].start_ticks
    assert "AFFINITY_DRIFT" not in codes(
        debounced(topology, samples, expected_masks={(pid, start): frozenset(range(6))})
    )


def test_no_drift_for_a_new_process_that_reused_a_pinned_pid(rec):
    """The journal names the pinned process by PID and start time: a process that got the
    PID later (another start time) is not it, whatever its mask."""
    topology, samples = rec("pinned")
    pid = job_pid(topology, samples)
    start = samples[-1].processes[[p.pid for p in samples[-1].processes].index(pid)].start_ticks
    assert "AFFINITY_DRIFT" in codes(debounced(topology, samples, expected_masks={(pid, start): frozenset(range(4))}))
    reused = {(pid, start - 1): frozenset(range(4))}  # an earlier process with the same PID was pinned
    assert "AFFINITY_DRIFT" not in codes(debounced(topology, samples, expected_masks=reused))


def with_cpuset(samples: list[Sample], pid: int, cpus: str) -> list[Sample]:
    """The recording with ``pid``'s cgroup cpuset made ``cpus``."""
    allowed = parse_cpulist(cpus)
    return [
        dataclasses.replace(
            s,
            processes=tuple(dataclasses.replace(p, cgroup_cpus=allowed) if p.pid == pid else p for p in s.processes),
        )
        for s in samples
    ]


@pytest.mark.parametrize(
    ("pinned", "cpuset", "drift"),
    [
        ("0-7", "0-5", False),  # a pin partly outside its cpuset runs on the part inside: the kernel's doing
        ("6-7", "0-5", False),  # the cpuset shrank away from the pin: the whole cpuset, the kernel's doing
        ("0-7", None, True),  # no cpuset said why: another program
        ("0-3", "0-5", True),  # inside the cpuset, yet the threads run on all of it: another program
    ],
)
def test_drift_tells_a_cpuset_change_from_another_program(rec, pinned: str, cpuset: str | None, drift: bool) -> None:
    topology, samples = rec("pinned")  # its threads run on 0-5
    pid = job_pid(topology, samples)
    start = samples[-1].processes[[p.pid for p in samples[-1].processes].index(pid)].start_ticks
    if cpuset is not None:
        samples = with_cpuset(samples, pid, cpuset)
    found = codes(debounced(topology, samples, expected_masks={(pid, start): parse_cpulist(pinned)}))
    assert ("AFFINITY_DRIFT" in found) == drift


# -- debouncing -----------------------------------------------------------------------------


def finding(code: str = "STARVED", pid: int = 1) -> Finding:
    return Finding(code, Severity.WARN, pid, (), "x")


def test_raised_after_two_intervals_and_cleared_after_three():
    t = FindingTracker()
    t = t.update([finding()])
    assert t.active == []  # one interval is a blip
    t = t.update([finding()])
    assert [f.code for f in t.active] == ["STARVED"]
    for _ in range(2):
        t = t.update([])
        assert [f.code for f in t.active] == ["STARVED"]  # still clearing
    t = t.update([])
    assert t.active == []


def test_a_blip_never_raises():
    t = FindingTracker()
    for _ in range(5):
        t = t.update([finding()]).update([])
    assert t.active == []


def test_exit_status():
    assert exit_status([]) == 0
    assert exit_status([dataclasses.replace(finding(), severity=Severity.INFO)]) == 0
    assert exit_status([finding()]) == 1
