"""The job's GPUs: ``CUDA_VISIBLE_DEVICES`` read as CUDA reads it, ``--gpus``, the GPUs NVML
opens inside a job, and the plan for those GPUs only (a DGX A100 seen from a Slurm job)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from affmon.collect.hwloc_xml import read_hwloc_xml
from affmon.collect.sysfs_topology import read_topology
from affmon.core.errors import ParseError
from affmon.core.model.cpuset import parse_cpulist
from affmon.core.model.topology import Gpu, Topology
from affmon.core.plan.planner import plan_machine
from affmon.core.plan.visible import GpuRef, job_gpus, select_gpus
from affmon.sources.job_gpus import find_job_gpus
from tests.helpers.dgx_a100 import BUS_IDS, JOB_CPUS, dgx_a100_tree
from tests.helpers.fake_pynvml import FakeGpu, FakeNvml, NVMLError

XML_DIR = Path(__file__).parent.parent / "fixtures" / "hwloc_xml"
UUIDS = [f"GPU-{i}a{i}b0c1d-{i:04d}-4e5f-8a9b-0123456789a{i}" for i in range(8)]


@pytest.fixture(scope="module")
def dgx(tmp_path_factory: pytest.TempPathFactory) -> Topology:
    return read_topology(str(dgx_a100_tree(tmp_path_factory.mktemp("dgx"))))


def refs(bus_ids: list[str] = BUS_IDS) -> list[GpuRef]:
    return [GpuRef(i, UUIDS[i], b.upper().replace("0000:", "00000000:")) for i, b in enumerate(bus_ids)]


# --------------------------------------------------------------------------------------
# The plan for the job's GPUs


def test_a_slurm_job_with_two_dgx_a100_gpus_gets_its_whole_cpuset(dgx: Topology) -> None:
    assert dgx.allowed_cpus == parse_cpulist(JOB_CPUS)  # the job's cgroup v2 cpuset, read from the tree
    everything = plan_machine(dgx)  # every GPU of the node: 2 cores each, three quarters of the job unused
    assert {len(p.cpus) for p in everything.plans} == {4}
    job = job_gpus(dgx, "0,1", None)
    assert job.bus_ids == (BUS_IDS[0], BUS_IDS[1]) and job.warnings == ()
    plan = plan_machine(dgx, 1, job.bus_ids)
    assert [(p.pci_bus_id, p.cpus) for p in plan.plans] == [
        (BUS_IDS[0], parse_cpulist("48-55,176-183")),
        (BUS_IDS[1], parse_cpulist("56-63,184-191")),
    ]
    assert plan.warnings == () and [p.numa_node for p in plan.plans] == [3, 3]
    for p in plan.plans:  # two whole 4-core L3 caches each
        touched = [g.cpus for g in dgx.l3_groups if g.cpus & p.cpus]
        assert len(touched) == 2 and frozenset().union(*touched) == p.cpus


def test_a_gpu_outside_the_job_is_never_planned(dgx: Topology) -> None:
    plan = plan_machine(dgx, 2, [BUS_IDS[0]])
    assert [p.pci_bus_id for p in plan.plans] == [BUS_IDS[0]] * 2
    assert plan_machine(dgx, 1, []).plans == ()
    assert "none of the GPUs" in plan_machine(dgx, 1, []).warnings[0]


# --------------------------------------------------------------------------------------
# CUDA_VISIBLE_DEVICES


ENTRY = st.one_of(
    st.integers(0, 9).map(str),
    st.sampled_from(UUIDS + [u[:10] for u in UUIDS] + ["GPU-", "GPU-ffff"]),
    st.sampled_from(["MIG-GPU-" + UUIDS[3][4:] + "/1/0", "-1", "abc", "0x1", " 2 "]),
)


def cuda_reading(entry: str) -> int | None:
    """The NVML index CUDA gives an entry on the machine of ``refs()`` (None: CUDA rejects it)."""
    entry = entry.strip()
    if entry.isdigit():
        return int(entry) if int(entry) < 8 else None
    if entry.startswith("MIG-GPU-"):
        entry = entry[4:].split("/")[0]
    if entry.startswith("GPU-"):
        matches = [i for i, u in enumerate(UUIDS) if u.startswith(entry)]
        return matches[0] if len(matches) == 1 else None
    return None


@given(st.lists(ENTRY, min_size=1, max_size=6))
def test_visible_devices_are_read_as_cuda_reads_them(entries: list[str]) -> None:
    topology = read_hwloc_xml(str(XML_DIR / "mpibind-xml__g4dnmetal.xml"))
    bus_ids = [g.pci_bus_id for g in topology.gpus]
    job = job_gpus(topology, ",".join(entries), refs(bus_ids))
    expected: list[str] = []
    for entry in entries:  # CUDA: the list ends at the first entry naming no GPU
        index = cuda_reading(entry)
        if index is None:
            break
        expected.append(bus_ids[index])
    assert list(job.devices) == expected
    assert job.bus_ids == tuple(dict.fromkeys(expected))
    assert bool(job.warnings) == (len(expected) < len(entries))


def test_without_nvml_indexes_count_nvidia_gpus_in_pci_order_and_uuids_are_unknown() -> None:
    # NVIDIA at 03, 83 and 84:00.0, an AMD GPU at 84:00.1: CUDA index 2 is 84:00.0.
    topology = read_hwloc_xml(str(XML_DIR / "hwloc-xml__32em64t-2n8c2t-pci-wholeio.xml"))
    job = job_gpus(topology, "2,0", None)
    assert job.devices == ("0000:84:00.0", "0000:03:00.0")
    job = job_gpus(topology, f"1,{UUIDS[0]},0", None)  # a UUID CUDA accepts but affmon cannot place
    assert job.devices == ("0000:83:00.0", None, "0000:03:00.0")
    assert "UUID" in job.why_unresolved(1) and job.bus_ids == ("0000:83:00.0", "0000:03:00.0")
    everything = job_gpus(topology, None, None)
    assert everything.bus_ids is None and everything.devices == ("0000:03:00.0", "0000:83:00.0", "0000:84:00.0")


def test_mig_instances_name_their_gpu_where_it_can_be_told(dgx: Topology) -> None:
    old_style = "MIG-" + UUIDS[1] + "/7/0"  # the parent's UUID is in the id
    assert job_gpus(dgx, old_style, refs()).devices == (BUS_IDS[1],)
    new_style = "MIG-4f1b7e2a-5d6c-5b8a-9c0d-1e2f3a4b5c6d"
    one_gpu = refs()[2:3]  # inside a job given one GPU: the instance is on it
    assert job_gpus(dgx, new_style, one_gpu).devices == (BUS_IDS[2],)
    several = job_gpus(dgx, new_style, refs())
    assert several.devices == (None,) and "cannot tell which" in several.why_unresolved(0)
    assert job_gpus(dgx, new_style, None).devices == (None,)


def test_an_empty_list_hides_every_gpu(dgx: Topology) -> None:
    job = job_gpus(dgx, "", refs())
    assert job.devices == () and job.bus_ids == () and "empty" in job.warnings[0]


def test_gpus_option_takes_indexes_and_any_bus_id_spelling(dgx: Topology) -> None:
    assert select_gpus(dgx, "1,0", None).bus_ids == (BUS_IDS[1], BUS_IDS[0])
    assert select_gpus(dgx, "00000000:47:00.0,4e:00.0,0000:87:00.0", None).bus_ids == tuple(BUS_IDS[2:5])
    for bad, message in (("8", "no GPU 8"), ("0000:99:00.0", "no GPU at PCI address"), ("GPU-1", "neither")):
        with pytest.raises(ParseError, match=message):
            select_gpus(dgx, bad, None)


# --------------------------------------------------------------------------------------
# NVML inside a job: the GPUs it can open are the job's


class JobNvml(FakeNvml):
    """A node's GPUs, of which the job may open only ``mine`` (Slurm ConstrainDevices)."""

    def __init__(self, gpus: list[FakeGpu], mine: set[int]) -> None:
        super().__init__(gpus)
        self.mine = mine

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        if index not in self.mine:
            raise NVMLError(4)  # NVML_ERROR_NO_PERMISSION
        return super().nvmlDeviceGetHandleByIndex(index)

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        return UUIDS[self.gpus.index(h)]


def test_the_gpus_nvml_opens_are_the_job_when_nothing_else_says(dgx: Topology) -> None:
    gpus = [FakeGpu(bus_id=b.upper().replace("0000:", "00000000:")) for b in BUS_IDS]
    fake = JobNvml(gpus, mine={0, 1})
    job = find_job_gpus(dgx, visible=None, use_nvml=True, nvml_module=fake)
    assert job.bus_ids == (BUS_IDS[0], BUS_IDS[1]) and "NVML can open" in job.source
    job = find_job_gpus(dgx, visible=UUIDS[1][:12], use_nvml=True, nvml_module=fake)  # a unique UUID prefix
    assert job.devices == (BUS_IDS[1],)
    assert find_job_gpus(dgx, visible="1", gpus="1,0", use_nvml=True, nvml_module=fake).bus_ids == (
        BUS_IDS[1],
        BUS_IDS[0],
    )
    with pytest.raises(ParseError, match="no GPU 7"):  # NVML's index 7 is not the job's: it cannot open it
        find_job_gpus(dgx, visible=None, gpus="7", use_nvml=True, nvml_module=fake)


def test_a_gpu_missing_from_the_topology_is_left_out() -> None:
    gpu = Gpu("0000:3b:00.0", "nvidia", 0, parse_cpulist("0-3"))
    topology = Topology.build(
        source="test",
        online_cpus=range(4),
        allowed_cpus=range(4),
        numa_nodes=[],
        packages=[],
        cores=[],
        l3_groups=[],
        gpus=[gpu],
    )
    job = job_gpus(topology, "0,1", [GpuRef(0, None, "00000000:3B:00.0"), GpuRef(1, None, "00000000:5E:00.0")])
    assert job.devices == ("0000:3b:00.0", "0000:5e:00.0") and job.bus_ids == ("0000:3b:00.0",)


# --------------------------------------------------------------------------------------
# The command line


def affmon(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "LOCAL_RANK")}
    return subprocess.run(
        [sys.executable, "-m", "affmon", *args], capture_output=True, text=True, timeout=120, env={**clean, **env}
    )


@pytest.fixture(scope="module")
def dgx_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return dgx_a100_tree(tmp_path_factory.mktemp("dgx-root"))


def test_plan_gpus_on_a_recorded_dgx_a100_job(dgx_root: Path) -> None:
    out = affmon("plan", "--root", str(dgx_root), "--gpus", "0,1", "--json", env={"CUDA_VISIBLE_DEVICES": "5"})
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["gpus"] == {"source": "--gpus 0,1", "pci_bus_ids": BUS_IDS[:2]}
    assert [p["cpus"] for p in data["plans"]] == ["48-55,176-183", "56-63,184-191"] and data["warnings"] == []
    # A recorded tree is not this machine: this shell's CUDA_VISIBLE_DEVICES is not applied to it.
    out = affmon("plan", "--root", str(dgx_root), "--json", env={"CUDA_VISIBLE_DEVICES": "5"})
    assert len(json.loads(out.stdout)["plans"]) == 8
    out = affmon("plan", "--root", str(dgx_root), "--gpus", "0,9", env={})
    assert out.returncode == 2 and out.stderr == "affmon: --gpus: no GPU 9 (8 GPUs, indexes from 0)\n"


@pytest.mark.parametrize(
    ("visible", "local_rank", "cpus"),
    [("0,1", "0", "48-55,176-183"), ("0,1", "1", "56-63,184-191"), ("1,0", "0", "56-63,184-191")],
)
def test_exec_from_env_pins_each_rank_to_its_share_of_the_job(
    dgx_root: Path, visible: str, local_rank: str, cpus: str
) -> None:
    env = {"CUDA_VISIBLE_DEVICES": visible, "LOCAL_RANK": local_rank}
    out = affmon("exec", "--root", str(dgx_root), "--from-env", "--dry-run", "--", "python", "train.py", env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"would pin to CPUs {cpus} (GPU ") and out.stdout.endswith("run: python train.py\n")


def test_exec_runs_unpinned_when_the_plan_cannot_be_applied(dgx_root: Path) -> None:
    """The DGX plan names CPUs 48-55,176-183; where this machine lacks them, the pin fails
    and the command runs anyway with its exit status kept."""
    env = {"CUDA_VISIBLE_DEVICES": "0,1", "LOCAL_RANK": "0"}
    probe = "import os, sys; print(sorted(os.sched_getaffinity(0))); sys.exit(4)"
    out = affmon("exec", "--root", str(dgx_root), "--from-env", "--", sys.executable, "-c", probe, env=env)
    assert out.returncode == 4, out.stderr
    planned = parse_cpulist("48-55,176-183")
    if planned <= os.sched_getaffinity(0):
        assert out.stdout.strip() == str(sorted(planned)) and out.stderr == ""
    else:
        assert out.stdout.strip() == str(sorted(os.sched_getaffinity(0)))
        assert len(out.stderr.splitlines()) == 1 and "cannot pin to CPUs 48-55,176-183" in out.stderr


def test_exec_from_env_with_two_ranks_a_gpu_puts_local_ranks_0_and_1_on_the_first_gpu(dgx_root: Path) -> None:
    """torchrun with 2 ranks per GPU: local ranks 0 and 1 share the first GPU (its two slots),
    2 and 3 the second, as the plan says."""
    out = affmon("plan", "--root", str(dgx_root), "--gpus", "0,1", "--ranks-per-gpu", "2", "--json", env={})
    plans = json.loads(out.stdout)["plans"]
    by_gpu_slot = {(p["pci_bus_id"], p["rank"]): p["cpus"] for p in plans}
    first, second = BUS_IDS[0], BUS_IDS[1]
    for local_rank, (bus, slot) in enumerate([(first, 0), (first, 1), (second, 0), (second, 1)]):
        env = {"CUDA_VISIBLE_DEVICES": "0,1", "LOCAL_RANK": str(local_rank)}
        args = ("exec", "--root", str(dgx_root), "--from-env", "--ranks-per-gpu", "2", "--dry-run", "--", "x")
        said = affmon(*args, env=env)
        assert said.returncode == 0, said.stderr
        assert said.stdout.startswith(f"would pin to CPUs {by_gpu_slot[(bus, slot)]} (GPU {bus}, rank {slot})"), said
