"""``affmon audit``: each rank of a multi-rank job against the plan for its GPU.

On the two-GPU DDP recordings (both ranks forced onto CPUs 0-7, then each moved to half
the machine), on recorded multi-node trees with made-up masks, and live on this machine
with a pretend job whose ranks carry LOCAL_RANK in their environment (no GPU here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from affmon.collect.hwloc_xml import read_hwloc_xml
from affmon.commands.audit import audit_text, read_environments
from affmon.core.model.cpuset import CpuSet, format_cpulist, parse_cpulist
from affmon.core.model.domains import allowed_pool, gpu_domain
from affmon.core.model.samples import GpuProcess, GpuSample, PcieLink, ProcessSample, Sample, ThreadSample
from affmon.core.model.topology import Topology
from affmon.core.plan.audit import EQUIVALENT, NO_PLAN, OFF_PLAN, ON_PLAN, Audit, RankAudit, audit
from affmon.core.plan.audit_ranks import RankEnv, parse_environ
from affmon.core.plan.planner import plan_machine
from tests.helpers.recordings import RECORDINGS, load

HERE = Path(__file__).parent.parent
XML = HERE / "fixtures" / "hwloc_xml"
JOB = HERE / "helpers" / "audit_job.py"
# Recorded machines with GPUs on two or more NUMA nodes, their locality known.
MULTI_NODE = [
    "mpibind-xml__g4dnmetal.xml",  # 8 GPUs, 4 on each of 2 nodes
    "mpibind-xml__coral-lassen.xml",  # 4 GPUs, 2 on each of nodes 0 and 8
    "mpibind-xml__eas-tioga.xml",  # 8 GCDs, 2 per node, each local to one L3
    "hwloc-xml__power8gpudistances.xml",  # 4 GPUs, 2 per node
    "hwloc-xml__24em64t-2n6c2t-pci.xml",  # 3 GPUs: 1 on node 0, 2 on node 1
]


@cache
def xml(name: str) -> Topology:
    return read_hwloc_xml(str(XML / name))


def cpus(text: str) -> CpuSet:
    return parse_cpulist(text)


# -- synthetic samples ----------------------------------------------------------------


def thread(tid: int, mask: CpuSet | None) -> ThreadSample:
    return ThreadSample(tid, 1, "t", "S", None, None, None, None, None, None, None, None, mask)


def proc(
    pid: int, mask: CpuSet | None, *, ppid: int = 1, gpus: tuple[int, ...] = (), name: str = "python", threads: int = 1
) -> ProcessSample:
    tasks = tuple(thread(pid + i, mask) for i in range(threads))
    return ProcessSample(
        pid=pid,
        start_ticks=1000 + pid,
        ppid=ppid,
        name=name,
        uid=0,
        user="root",
        cmdline="python train.py",
        mems_allowed=None,
        cgroup_cpus=None,
        threads=tasks,
        gpu_indices=gpus,
        training=True,
    )


def gpu(index: int, bus_id: str, pids: dict[int, int] | None = None, uuid: str | None = None) -> GpuSample:
    return GpuSample(
        index, "GPU", bus_id, uuid, None, None, None, None, None, None, None, None,
        PcieLink(None, None, None, None), None, None, None,
        tuple(GpuProcess(pid, used) for pid, used in (pids or {}).items()),
    )  # fmt: skip


def sample(processes: list[ProcessSample], gpus: list[GpuSample] | None = None) -> Sample:
    return Sample(1.0, 1.7e9, 0.01, tuple(processes), tuple(gpus or ()))


def job(topology: Topology, masks: list[CpuSet], *, rpg: int = 1, workers: dict[int, CpuSet] | None = None) -> Sample:
    """A launcher (pid 100) and one rank per mask, rank i on GPU i // rpg (NVML order),
    pids 200, 210, ...; ``workers``: rank index -> the mask of one worker it forked."""
    processes = [proc(100, topology.online_cpus, name="torchrun")]
    for i, mask in enumerate(masks):
        processes.append(proc(200 + 10 * i, mask, ppid=100, gpus=(i // rpg,), threads=3))
        if workers and i in workers:
            processes.append(proc(201 + 10 * i, workers[i], ppid=200 + 10 * i, name="pt_data_worker"))
    return sample(processes)


def by_pid(result: Audit) -> dict[int, RankAudit]:
    return {r.pid: r for r in result.ranks}


def codes(r: RankAudit) -> set[str]:
    return {p.code for p in r.problems}


# -- the environment --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "local_rank", "visible", "entry"),
    [
        (b"PATH=/bin\0LOCAL_RANK=1\0", 1, None, "1"),
        (b"LOCAL_RANK=1\0CUDA_VISIBLE_DEVICES=3,2\0", 1, ("3", "2"), "2"),
        (b"LOCAL_RANK=0\0CUDA_VISIBLE_DEVICES=GPU-8a1b, GPU-77\0", 0, ("GPU-8a1b", "GPU-77"), "GPU-8a1b"),
        (b"LOCAL_RANK=2\0CUDA_VISIBLE_DEVICES=0,1\0", 2, ("0", "1"), None),  # more ranks than GPUs
        (b"LOCAL_RANK=0\0CUDA_VISIBLE_DEVICES=\0", 0, (), None),  # no GPU visible
        (b"LOCAL_RANK=0\0LOCAL_RANK=5\0", 0, None, "0"),  # getenv finds the first
        (b"LOCAL_RANK=-1\0", None, None, None),
        (b"LOCAL_RANK=99999999999\0", None, None, None),
        (b"LOCAL_RANK=\xd9\xa3\0", None, None, None),  # an Arabic-Indic digit is no rank
        (b"XLOCAL_RANK=1\0RANK=4\0", None, None, None),
        (b"", None, None, None),
    ],
)
def test_environment_gives_the_local_rank_and_its_gpu_entry(environ, local_rank, visible, entry):
    env = parse_environ(environ)
    assert (env.local_rank, env.visible_devices, env.gpu_entry) == (local_rank, visible, entry)


@given(st.binary(max_size=400))
def test_any_environment_bytes_parse_without_raising(data: bytes) -> None:
    env = parse_environ(data)
    assert env.local_rank is None or 0 <= env.local_rank <= 99999
    assert env.visible_devices is None or all(e and len(e) <= 64 for e in env.visible_devices)


def stat_line(pid: int, start_ticks: int) -> str:
    fields = ["S", "1"] + ["0"] * 17 + [str(start_ticks)] + ["0"] * 20
    return f"{pid} (python) {' '.join(fields)}\n"


def test_environment_of_a_pid_reused_since_the_sample_is_not_read(tmp_path):
    """Identity is (pid, start time): the environ of whatever holds the PID now is not the rank's."""
    rank = proc(4242, cpus("0-1"))
    for name, start in (("same", rank.start_ticks), ("reused", rank.start_ticks + 1)):
        root = tmp_path / name
        (root / "proc" / "4242").mkdir(parents=True)
        (root / "proc" / "4242" / "environ").write_bytes(b"LOCAL_RANK=3\0")
        (root / "proc" / "4242" / "stat").write_text(stat_line(4242, start))
        envs = read_environments(sample([rank]), str(root))
        assert envs == ({rank.key: RankEnv(3, None)} if name == "same" else {})


# -- the two-GPU recordings -----------------------------------------------------------


def test_ddp2_overlap_both_ranks_on_cpus_0_7_are_off_plan():
    header, samples = load("ddp2_overlap")
    result = audit(samples[-1], header.topology)
    ranks = by_pid(result)
    assert sorted(ranks) == [904, 905]  # the ranks, not the agent (885) nor the 8 DataLoader workers
    assert [(r.gpu_index, r.pci_bus_id, r.matched_by) for r in result.ranks] == [
        (0, "0000:00:06.0", "nvml"),
        (1, "0000:00:07.0", "nvml"),
    ]
    assert len(ranks[904].workers) == 4 and len(ranks[905].workers) == 4
    for pid, other, plan in ((904, 905, "0-15"), (905, 904, "16-31")):
        r = ranks[pid]
        assert (format_cpulist(r.mask or ()), format_cpulist(r.plan.cpus if r.plan else ())) == ("0-7", plan)
        assert r.verdict == OFF_PLAN and codes(r) == {"OVERLAP", "NARROW"}
        overlap = next(p for p in r.problems if p.code == "OVERLAP")
        assert (overlap.cpus, overlap.pids) == (cpus("0-7"), (other,))
    assert result.exit_status() == 1


def test_ddp2_fixed_halves_are_swapped_against_the_plan_but_equivalent():
    """After ``pin --suggest``, rank 0 (GPU 0) has 16-31 and rank 1 has 0-15: the plan's
    halves swapped, on a one-node machine whose GPUs' locality is unknown. No overlap, no
    lost CPU: exit 0; ``--strict`` asks for the plan exactly: exit 1."""
    header, samples = load("ddp2_fixed")
    result = audit(samples[-1], header.topology)
    ranks = by_pid(result)
    assert format_cpulist(ranks[904].mask or ()) == "16-31" and format_cpulist(ranks[905].mask or ()) == "0-15"
    assert [r.verdict for r in result.ranks] == [EQUIVALENT, EQUIVALENT]
    # said as what it is, not as a failure
    assert ranks[904].differences == ("Another slice than its plan, as good: CPUs 16-31 instead of 0-15.",)
    assert ranks[905].differences == ("Another slice than its plan, as good: CPUs 0-15 instead of 16-31.",)
    assert all(not r.problems for r in result.ranks)
    assert (result.exit_status(), result.exit_status(strict=True)) == (0, 1)


def affmon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "affmon", *args], capture_output=True, text=True, timeout=120)


def test_cli_replay_prints_one_line_per_rank_and_exits_1_when_off_plan():
    out = affmon("audit", "--replay", str(RECORDINGS / "ddp2_overlap.jsonl.gz"))
    assert out.returncode == 1, out.stderr
    rows = [line for line in out.stdout.splitlines() if line.split()[1:2] in (["904"], ["905"])]
    assert len(rows) == 2
    assert all("off plan" in row and "OVERLAP" in row and " 0-7 " in row for row in rows)
    assert out.stdout.splitlines()[-1] == "2 of 2 ranks off plan"


def test_cli_replay_json_and_exit_0_when_no_rank_is_off_plan():
    out = affmon("audit", "--replay", str(RECORDINGS / "ddp2_fixed.jsonl.gz"), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [(r["pid"], r["gpu_index"], r["mask"], r["plan"]["cpus"], r["verdict"]) for r in data["ranks"]] == [
        (904, 0, "16-31", "0-15", "equivalent"),
        (905, 1, "0-15", "16-31", "equivalent"),
    ]
    assert data["off_plan"] == 0 and data["ranks_per_gpu"] == 1
    strict = affmon("audit", "--replay", str(RECORDINGS / "ddp2_fixed.jsonl.gz"), "--strict")
    assert strict.returncode == 1, strict.stderr


def test_cli_replay_pid_restricts_to_that_tree():
    out = affmon("audit", "--replay", str(RECORDINGS / "ddp2_overlap.jsonl.gz"), "--pid", "905", "--json")
    assert out.returncode == 1, out.stderr
    ranks = json.loads(out.stdout)["ranks"]
    # Only the job under 905 is audited: 904 is another tree, so no overlap with it is said;
    # 905 still has 8 of the 16 CPUs its plan gives.
    assert [r["pid"] for r in ranks] == [905] and [p["code"] for p in ranks[0]["problems"]] == ["NARROW"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--replay", "{missing}"], "no such file"),
        (["--replay", "{header_only}"], "no sample after the header"),
        (["--replay", "{ddp2}", "--pid", "4194304"], "--pid 4194304: not in the last sample"),
        (["--replay", "{ddp2}", "--ranks-per-gpu", "0"], "from 1 to 64"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    header, samples = load("ddp2_overlap")
    from affmon.core.recording.format import header_line, sample_line

    head = header_line(header.topology, None, None, 1.0)
    (tmp_path / "header_only.jsonl").write_text(head + "\n")
    quiet = replace(samples[-1], processes=tuple(replace(p, gpu_indices=()) for p in samples[-1].processes))
    (tmp_path / "no_ranks.jsonl").write_text(head + "\n" + sample_line(quiet) + "\n")
    files = {
        "missing": str(tmp_path / "nope.jsonl"),
        "header_only": str(tmp_path / "header_only.jsonl"),
        "no_ranks": str(tmp_path / "no_ranks.jsonl"),
        "ddp2": str(RECORDINGS / "ddp2_overlap.jsonl.gz"),
    }
    out = affmon("audit", *[a.format(**files) for a in args])
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("affmon: ") and message in lines[0], out.stderr


def test_nothing_to_audit_is_said_and_exits_0_as_plan_does_with_nothing_to_plan(tmp_path):
    header, samples = load("ddp2_overlap")
    from affmon.core.recording.format import header_line, sample_line

    head = header_line(header.topology, None, None, 1.0)
    quiet = replace(samples[-1], processes=tuple(replace(p, gpu_indices=()) for p in samples[-1].processes))
    (tmp_path / "no_ranks.jsonl").write_text(head + "\n" + sample_line(quiet) + "\n")
    out = affmon("audit", "--replay", str(tmp_path / "no_ranks.jsonl"))
    assert out.returncode == 0 and out.stderr == ""
    assert out.stdout.startswith("nothing to audit: no rank found among the watched processes"), out.stdout
    out = affmon("audit", "--replay", str(tmp_path / "no_ranks.jsonl"), "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["ranks"] == []


# -- recorded multi-node trees, made-up masks --------------------------------------------


def test_g4dnmetal_block_placement_is_on_plan():
    topology = xml("mpibind-xml__g4dnmetal.xml")
    plans = [p.cpus for p in plan_machine(topology).plans]
    result = audit(job(topology, plans), topology)
    assert [r.verdict for r in result.ranks] == [ON_PLAN] * 8 and result.exit_status(strict=True) == 0


def test_g4dnmetal_cyclic_distribution_puts_four_ranks_on_the_far_socket():
    """Rank i on socket i % 2 (Slurm's cyclic distribution): GPUs 0-3 are on node 0 and
    4-7 on node 1, so ranks 1 and 3 run on node 1 and ranks 4 and 6 on node 0."""
    topology = xml("mpibind-xml__g4dnmetal.xml")
    plans = [p.cpus for p in plan_machine(topology).plans]
    masks = [plans[(i % 2) * 4 + i // 2] for i in range(8)]
    result = audit(job(topology, masks), topology)
    verdicts = [r.verdict for r in result.ranks]
    assert [i for i, v in enumerate(verdicts) if v == OFF_PLAN] == [1, 3, 4, 6]
    assert all(codes(result.ranks[i]) == {"FAR"} for i in (1, 3, 4, 6))
    assert [verdicts[i] for i in (0, 2, 5, 7)] == [ON_PLAN, EQUIVALENT, EQUIVALENT, ON_PLAN]
    far = result.ranks[1].problems[0]
    assert far.cpus == masks[1] and "NUMA node 1" in far.message and "NUMA node 0" in far.message


def test_coral_lassen_two_ranks_on_one_slice_overlap():
    topology = xml("mpibind-xml__coral-lassen.xml")
    plans = [p.cpus for p in plan_machine(topology).plans]
    masks = [plans[0], plans[0], plans[2], plans[3]]  # rank 1 launched with rank 0's mask
    result = audit(job(topology, masks), topology)
    assert [codes(r) for r in result.ranks] == [{"OVERLAP"}, {"OVERLAP"}, set(), set()]
    assert result.ranks[0].problems[0].pids == (210,) and result.ranks[1].problems[0].pids == (200,)


def test_workers_collapsed_to_one_core_after_fork_are_off_plan():
    topology = xml("mpibind-xml__eas-tioga.xml")
    plans = [p.cpus for p in plan_machine(topology).plans]
    one_core = frozenset({min(plans[2])})
    result = audit(job(topology, plans, workers={2: one_core, 3: plans[3]}), topology)
    assert [codes(r) for r in result.ranks] == [set()] * 2 + [{"COLLAPSED"}] + [set()] * 5
    collapsed = result.ranks[2].problems[0]
    assert (collapsed.cpus, collapsed.pids) == (one_core, (221,)) and "pid 221 (pt_data_worker)" in collapsed.message
    assert result.ranks[3].verdict == ON_PLAN  # its worker kept the rank's mask


def test_a_rank_whose_own_mask_collapsed_is_not_also_called_narrow():
    topology = xml("hwloc-xml__power8gpudistances.xml")
    plans = [p.cpus for p in plan_machine(topology).plans]
    core = next(c.cpus for c in topology.cores if c.cpus <= plans[1])
    result = audit(job(topology, [plans[0], core, plans[2], plans[3]]), topology)
    assert codes(result.ranks[1]) == {"COLLAPSED"} and "one core" in result.ranks[1].problems[0].message


def test_narrower_than_the_plan_is_off_plan_and_wider_without_overlap_is_not():
    topology = xml("hwloc-xml__24em64t-2n6c2t-pci.xml")  # GPU 0 on node 0 alone, GPUs 1 and 2 share node 1
    plans = [p.cpus for p in plan_machine(topology).plans]
    node0 = topology.cpu_numa_nodes[0].cpus
    assert plans[0] == node0
    half = frozenset(sorted(plans[1])[:3])
    result = audit(job(topology, [node0, half, plans[2]]), topology)
    assert [codes(r) for r in result.ranks] == [set(), {"NARROW"}, set()]
    # GPU 2's rank absent: GPU 1's rank may take all of node 1 without overlapping anyone.
    wide = audit(job(topology, [node0, plans[1] | plans[2]]), topology)
    assert [r.verdict for r in wide.ranks] == [ON_PLAN, EQUIVALENT]


def test_ranks_per_gpu_is_the_most_found_on_one_gpu_and_slots_follow_the_masks():
    topology = xml("mpibind-xml__g4dnmetal.xml")
    plans = plan_machine(topology, 2).plans
    gpu0 = [p.cpus for p in plans if p.gpu_index == 0]
    result = audit(job(topology, [gpu0[1], gpu0[0]], rpg=2), topology)  # launched in the other order
    assert result.ranks_per_gpu == 2 and result.ranks_per_gpu_inferred
    assert [r.verdict for r in result.ranks] == [ON_PLAN, ON_PLAN]
    given_one = audit(job(topology, [gpu0[1], gpu0[0]], rpg=2), topology, ranks_per_gpu=1)
    assert sorted(codes(r) == {"NO_SLOT"} for r in given_one.ranks) == [False, True]


def test_oversubscribed_domain_shares_its_cores_as_planned():
    """DGX-2 as recorded has 2 cores per node for 8 GPUs: the plan gives every rank of a
    node the same cores, so sharing them is the plan, not an overlap."""
    topology = xml("hwloc-xml__nvidiaDGX2.xml")
    plans = [p.cpus for p in plan_machine(topology).plans]
    result = audit(job(topology, plans), topology)
    assert all(r.verdict == ON_PLAN for r in result.ranks) and len(result.ranks) == 16


def test_a_stray_context_and_a_gpu_using_worker_do_not_make_ranks():
    topology = xml("mpibind-xml__coral-lassen.xml")
    plans = [p.cpus for p in plan_machine(topology).plans]
    bus = [g.pci_bus_id for g in topology.gpus]
    processes = [
        proc(100, topology.online_cpus, name="torchrun"),
        proc(200, plans[0], ppid=100, gpus=(0,)),
        proc(210, plans[1], ppid=100, gpus=(0, 1)),  # a stray context on GPU 0
        proc(211, plans[1], ppid=210, gpus=(1,), name="pt_data_worker"),  # a worker that opened CUDA
    ]
    gpus = [gpu(0, bus[0], {200: 70 << 30, 210: 500 << 20}), gpu(1, bus[1], {210: 60 << 30, 211: 300 << 20})]
    result = audit(sample(processes, gpus), topology)
    assert [(r.pid, r.gpu_index, r.verdict) for r in result.ranks] == [(200, 0, ON_PLAN), (210, 1, ON_PLAN)]
    assert result.ranks[1].workers == (211,) and "most memory" in result.ranks[1].notes[0]
    # Its environment says which GPU is its own, whatever the memory says.
    envs = {(210, 1210): RankEnv(1, ("1", "0"))}
    flipped = audit(sample(processes, [gpu(0, bus[0], {210: 90 << 30}), gpu(1, bus[1], {210: 1})]), topology, envs)
    assert by_pid(flipped)[210].gpu_index == 0 and "environment names" in by_pid(flipped)[210].notes[0]


def test_gpus_from_the_environment_alone_count_nvidia_gpus_in_bus_order():
    topology = xml("hwloc-xml__32em64t-2n8c2t-pci-wholeio.xml")  # NVIDIA 0000:03, 0000:83, 0000:84; AMD 0000:84:00.1
    nvidia = [g.pci_bus_id for g in topology.gpus if g.vendor == "nvidia"]
    plans = {p.pci_bus_id: p.cpus for p in plan_machine(topology).plans}
    processes = [proc(100, topology.online_cpus, name="torchrun")]
    processes += [proc(200 + 10 * i, plans[nvidia[2 - i]], ppid=100) for i in range(3)]
    envs = {(200 + 10 * i, 1200 + 10 * i): RankEnv(i, ("2", "1", "0")) for i in range(3)}
    result = audit(sample(processes), topology, envs)
    assert [(r.local_rank, r.gpu_entry, r.pci_bus_id, r.matched_by, r.verdict) for r in result.ranks] == [
        (2, "0", nvidia[0], "environment", ON_PLAN),
        (1, "1", nvidia[1], "environment", ON_PLAN),
        (0, "2", nvidia[2], "environment", ON_PLAN),
    ]


def test_a_ppid_loop_in_a_recording_ends():
    topology = xml("mpibind-xml__coral-lassen.xml")
    a = proc(300, topology.online_cpus, ppid=301, gpus=(0,))
    b = proc(301, topology.online_cpus, ppid=300, gpus=(1,))
    assert audit(sample([a, b]), topology).ranks == ()  # each descends from the other: neither is topmost


def test_names_are_escaped_in_the_text():
    topology = xml("mpibind-xml__coral-lassen.xml")
    plans = [p.cpus for p in plan_machine(topology).plans]
    s = job(topology, [plans[0], plans[0]])
    s = replace(s, processes=tuple(replace(p, name="x\x1b[2J\ny") if p.pid == 210 else p for p in s.processes))
    text = audit_text(audit(s, topology), "test")
    assert "\x1b" not in text and "x?[2J?y" in text
    assert len(text.splitlines()) == 1 + 1 + 2 + 1  # header, columns, a line per rank, the verdict


# -- properties ------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(MULTI_NODE),
    rpg=st.integers(1, 3),
    data=st.data(),
)
def test_masks_equal_to_the_plan_are_on_plan_whatever_the_process_order(name, rpg, data):
    topology = xml(name)
    plans = [p.cpus for p in plan_machine(topology, rpg).plans]
    s = job(topology, plans, rpg=rpg)
    shuffled = replace(s, processes=tuple(data.draw(st.permutations(s.processes))))
    for each in (s, shuffled):
        result = audit(each, topology)
        assert result.ranks_per_gpu == rpg
        assert [r.verdict for r in result.ranks] == [ON_PLAN] * len(plans)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(MULTI_NODE), data=st.data())
def test_any_masks_overlap_is_mutual_and_far_is_what_leaves_the_gpus_domain(name, data):
    topology = xml(name)
    machine = plan_machine(topology)
    online = sorted(topology.online_cpus)
    masks = [frozenset(data.draw(st.lists(st.sampled_from(online), min_size=1, max_size=12))) for _ in machine.plans]
    result = audit(job(topology, masks), topology)
    ranks = by_pid(result)
    allowed, _ = allowed_pool(topology, None)
    for r in result.ranks:
        assert (r.verdict == OFF_PLAN) == bool(r.problems)
        for problem in r.problems:
            if problem.code == "OVERLAP":
                back = [p for p in ranks[problem.pids[0]].problems if p.code == "OVERLAP" and p.pids == (r.pid,)]
                assert len(back) == 1 and back[0].cpus == problem.cpus
        assert r.mask is not None and r.pci_bus_id is not None
        domain = gpu_domain(topology, r.pci_bus_id, allowed)
        assert domain.local  # every GPU of these machines has a known node
        far = r.mask - domain.cpus
        assert [p.cpus for p in r.problems if p.code == "FAR"] == ([far] if far else [])
        if far:  # the far CPUs are off the GPU's NUMA node, or off its own L3 within it
            assert not far & domain.cpus


# -- live: a pretend job on this machine --------------------------------------------------


def start_job(*args: str) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "CUDA_VISIBLE_DEVICES")}
    launcher = subprocess.Popen(
        [sys.executable, str(JOB), *args], stdout=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    assert launcher.stdout is not None
    line = launcher.stdout.readline()
    assert line, f"the pretend job did not start (exit {launcher.poll()})"
    return launcher, json.loads(line)


def stop_job(launcher: subprocess.Popen[str]) -> None:
    os.killpg(launcher.pid, 9)
    launcher.wait()


needs_two_cpus = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable CPUs")


@needs_two_cpus
def test_live_ranks_on_separate_cpus_are_found_by_local_rank_and_have_no_plan_without_a_gpu():
    first, second = sorted(os.sched_getaffinity(0))[:2]
    launcher, info = start_job("--visible", "1,0", "--rank", str(first), "--rank", str(second))
    try:
        out = affmon("audit", "--pid", str(info["launcher"]), "--json")
    finally:
        stop_job(launcher)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    ranks = data["ranks"]
    # The ranks, not the launcher, in the order of the GPUs their environments name.
    assert [r["pid"] for r in ranks] == info["ranks"][::-1]
    assert [(r["local_rank"], r["gpu_entry"], r["gpu_index"], r["pci_bus_id"], r["mask"]) for r in ranks] == [
        (1, "0", 0, None, str(second)),
        (0, "1", 1, None, str(first)),
    ]
    assert all(r["matched_by"] == "environment" and "not among this machine's GPUs" in r["notes"][0] for r in ranks)
    assert all(r["verdict"] == NO_PLAN and not r["problems"] for r in ranks)
    assert "No GPU found, so there is nothing to plan." in data["warnings"]


@needs_two_cpus
def test_live_overlapping_ranks_and_a_collapsed_worker_exit_1():
    first, second = sorted(os.sched_getaffinity(0))[:2]
    both = f"{first},{second}"
    launcher, info = start_job("--rank", str(first), "--rank", f"{both}:{second}")
    try:
        out = affmon("audit", "--pid", str(info["launcher"]))
        data = json.loads(affmon("audit", "--pid", str(info["launcher"]), "--json").stdout)
    finally:
        stop_job(launcher)
    assert out.returncode == 1, out.stderr
    rank0, rank1 = info["ranks"]
    rows = {int(w[1]): line for line in out.stdout.splitlines() if len(w := line.split()) > 1 and w[1].isdigit()}
    assert sorted(rows) == sorted([rank0, rank1])
    assert "off plan" in rows[rank0] and "OVERLAP: It shares CPU" in rows[rank0]
    assert "COLLAPSED" in rows[rank1] and f"pid {info['workers'][0]}" in rows[rank1]
    found = {r["pid"]: r for r in data["ranks"]}
    assert {p["code"] for p in found[rank0]["problems"]} == {"OVERLAP"}
    assert {p["code"] for p in found[rank1]["problems"]} == {"OVERLAP", "COLLAPSED"}
    assert found[rank0]["problems"][0]["cpus"] == str(first)
    assert found[rank1]["workers"] == info["workers"] and found[rank1]["mask"] == format_cpulist({first, second})
