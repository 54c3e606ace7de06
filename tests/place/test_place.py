"""``affmon.place`` as a training script uses it: ``rank()`` and ``worker_init_fn`` in a
process of their own (``tests/place/test_place_probe.py``) against a recorded sysfs tree of this
machine's CPUs with one GPU, so the plan is known on any machine of two CPUs or more; a
real torch (CPU build) and real DataLoader workers, forked and spawned; every thread's mask
read from ``/proc/self/task/*/status``. The planning and the value types are also tested
in this process, on the DGX A100 tree (``tests/helpers/dgx_a100.py``)."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from affmon.commands.plan import exec_plan
from affmon.core.model.cpuset import parse_cpulist
from affmon.place import Placement, PlacementWarning, placement
from affmon.place.planning import CannotPlan, LocalRank, local_rank_from, plan_rank
from affmon.place.remembered import Remembered, decode, encode
from affmon.place.shares import core_groups, split_for_workers, too_few_cores, worker_share
from affmon.sources.live import load_topology
from tests.helpers.dgx_a100 import dgx_a100_tree
from tests.helpers.live import usable_cpus

ROOT = Path(__file__).resolve().parent.parent.parent
GPU = "0000:3b:00.0"
# What a CI runner or a launcher may have set: each probe starts without them unless given.
CLEARED = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "LOCAL_RANK", "SLURM_LOCALID", "CUDA_VISIBLE_DEVICES", "AFFMON_PLACE")


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def gpu_tree(
    root: Path, cpus: list[int], *, gpu_cpus: list[int] | None = None, cgroup: list[int] | None = None
) -> Path:
    """A tree of ``cpus`` (one core each, one NUMA node per CPU of ``gpu_cpus`` else one
    node of all) with an NVIDIA GPU local to ``gpu_cpus`` (None: all; []: no GPU), and a
    cgroup v2 cpuset of ``cgroup`` (None: none)."""
    listed = ",".join(map(str, cpus))
    write(root / "sys/devices/system/cpu/online", listed)
    for n in cpus:
        write(root / f"sys/devices/system/cpu/cpu{n}/topology/thread_siblings_list", str(n))
    if gpu_cpus:
        for n in cpus:
            write(root / f"sys/devices/system/node/node{n}/cpulist", str(n))
        node, local = str(gpu_cpus[0]), ",".join(map(str, gpu_cpus))
    else:
        write(root / "sys/devices/system/node/node0/cpulist", listed)
        node, local = "0", listed
    if gpu_cpus != []:
        values = {"class": "0x030200", "vendor": "0x10de", "numa_node": node, "local_cpulist": local}
        for name, value in values.items():
            write(root / f"sys/bus/pci/devices/{GPU}/{name}", value)
    if cgroup is not None:
        write(root / "sys/fs/cgroup/cpuset.cpus.effective", listed)
        write(root / "sys/fs/cgroup/job/cpuset.cpus.effective", ",".join(map(str, cgroup)))
        write(root / "proc/self/cgroup", "0::/job")
    return root


@pytest.fixture
def two() -> tuple[int, int]:
    """Two CPUs this process may run on: the tests' trees are made of them."""
    cpus = usable_cpus()
    assert len(cpus) >= 2, "these tests need two CPUs"
    return cpus[0], cpus[1]


def probe(spec: dict[str, Any], env: dict[str, str] | None = None) -> tuple[dict[str, Any], str]:
    """Run the probe with ``spec``; its JSON line and its stderr."""
    base = {k: v for k, v in os.environ.items() if k not in CLEARED}
    out = subprocess.run(
        [sys.executable, "-m", "tests.place.test_place_probe", json.dumps(spec)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={**base, **(env or {})},
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1]), out.stderr


def masks(threads: dict[str, list[int]]) -> set[tuple[int, ...]]:
    return {tuple(m) for m in threads.values()}


# -- rank() in a process -----------------------------------------------------------------


def test_affmon_place_loads_neither_textual_nor_torch(tmp_path, two):
    out, _ = probe({"root": str(gpu_tree(tmp_path, list(two))), "calls": [{"workers": 1}]})
    assert out["placements"][0]["placed"]
    assert not {"textual", "torch", "plotext", "textual_plotext"} & set(out["modules"])


def test_rank_pins_every_thread_of_the_process(tmp_path, two):
    """Threads that exist before the call (torch's intra-op pool, Python threads) all move,
    not only the calling one: the GPU is local to the second CPU, they all started on the first."""
    a, b = two
    root = gpu_tree(tmp_path, [a, b], gpu_cpus=[b])
    out, _ = probe({"root": str(root), "pre_mask": [a], "torch_threads": 2, "python_threads": 2, "calls": [{}]})
    assert len(out["threads_before"]) >= 4 and masks(out["threads_before"]) == {(a,)}
    assert set(out["threads"]) >= set(out["threads_before"])
    assert masks(out["threads"]) == {(b,)}
    assert (
        out["placements"][0]["str"]
        == f"rank 0 on GPU {GPU}: CPUs {b} (node {b}), main pool 1 thread, workers on CPUs {b}"
    )
    assert out["warnings"] == []


@pytest.mark.parametrize(("workers", "before", "after"), [(0, 1, 2), (1, 2, 1)])
def test_rank_gives_the_main_pool_the_rank_cpus_less_one_per_worker(tmp_path, two, workers, before, after):
    out, _ = probe(
        {"root": str(gpu_tree(tmp_path, list(two))), "torch_threads": before, "calls": [{"workers": workers}]}
    )
    assert (out["torch_threads_before"], out["torch_threads"]) == (before, after)
    assert out["omp"] == out["mkl"] == str(after)
    assert out["placements"][0]["settings"] == [
        f"OMP_NUM_THREADS={after}",
        f"MKL_NUM_THREADS={after}",
        f"torch.set_num_threads({after})",
    ]


def test_rank_before_torch_is_imported_sets_what_torch_reads(tmp_path, two):
    out, _ = probe({"root": str(gpu_tree(tmp_path, list(two))), "calls": [{"workers": 1}], "torch_after": True})
    assert out["torch_threads_before"] is None
    assert out["torch_threads"] == 1 and out["omp"] == "1"
    assert "torch.set_num_threads(1)" not in out["placements"][0]["settings"]


def test_a_thread_variable_the_person_set_stays_theirs(tmp_path, two):
    out, _ = probe(
        {"root": str(gpu_tree(tmp_path, list(two))), "torch_threads": 3, "calls": [{"workers": 1}]},
        env={"OMP_NUM_THREADS": "3"},
    )
    first = out["placements"][0]
    assert first["kept"] == ["OMP_NUM_THREADS=3"] and first["settings"] == ["MKL_NUM_THREADS=1"]
    assert out["omp"] == "3" and out["mkl"] == "1" and out["torch_threads"] == 3
    assert "main pool OMP_NUM_THREADS=3, yours" in first["str"]


# -- DataLoader workers --------------------------------------------------------------------


@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
@pytest.mark.parametrize("planned", [None, 2, 1])
def test_dataloader_workers_run_on_their_share_with_one_thread(tmp_path, two, context, planned):
    """Two workers on a rank of two cores: a core each, whether their number was said
    (2) or not (None). Planned for one: that one gets the last core, and the DataLoader's
    two workers share it. Every thread of every worker, inside the rank's plan."""
    a, b = two
    call = {} if planned is None else {"workers": planned}
    spec = {"root": str(gpu_tree(tmp_path, [a, b])), "calls": [call], "loader": {"context": context, "workers": 2}}
    out, err = probe(spec)
    placed = out["placements"][0]
    expected = {0: (b,), 1: (b,)} if planned == 1 else {0: (a,), 1: (b,)}
    if planned is not None:
        assert placed["worker_shares"] == [list(expected[i]) for i in range(planned)]
        assert placed["main_threads"] == 1
    reports = {w["worker_id"]: w for w in out["workers"]}
    assert sorted(reports) == [0, 1] and len({w["pid"] for w in out["workers"]}) == 2
    for worker_id, report in reports.items():
        assert masks(report["threads"]) == {expected[worker_id]}, report
        assert set(expected[worker_id]) <= set(placed["cpus"])
        assert report["torch_threads"] == 1 and report["omp"] == report["mkl"] == "1"
    assert masks(out["threads"]) == {(a, b)}  # the main process keeps the rank's CPUs
    assert "PlacementWarning" not in err


def test_worker_init_fn_without_rank_leaves_the_workers_where_they_are(tmp_path, two):
    a, _b = two
    out, err = probe({"pre_mask": [a], "loader": {"context": "fork", "workers": 2}})
    for report in out["workers"]:
        assert masks(report["threads"]) == {(a,)} and report["torch_threads"] == 1
    # Once in each worker process: each says it for itself.
    assert err.count("affmon.place.rank() was not called before the DataLoader started") == 2


def test_worker_init_fn_outside_a_worker_changes_nothing(tmp_path, two):
    a, b = two
    out, _ = probe(
        {"root": str(gpu_tree(tmp_path, [a, b])), "torch_threads": 1, "calls": [{"workers": 0}], "init_in_main": True}
    )
    assert out["warnings"] == ["worker_init_fn ran outside a DataLoader worker: left alone"]
    assert masks(out["threads"]) == {(a, b)} and out["torch_threads"] == 2 and out["omp"] == "2"


def test_a_local_rank_that_is_no_number_is_said_unless_a_gpu_is_named(tmp_path, two):
    out, _ = probe({"root": str(gpu_tree(tmp_path, list(two))), "calls": [{}, {"gpu": 0}]}, env={"LOCAL_RANK": "two"})
    left, named = out["placements"]
    assert left["str"] == "placement left alone: LOCAL_RANK must be a number to pick this rank's GPU; it is 'two'"
    assert named["placed"] and named["str"].startswith(f"this process on GPU {GPU}: ")
    assert out["warnings"] == [left["str"]]


def test_a_foreign_affmon_place_variable_is_no_plan(two):
    """A worker core outside the plan's CPUs: the workers stay where they are, and say why."""
    a, b = two
    env = {"AFFMON_PLACE": json.dumps({"pid": 1, "cpus": str(a), "workers": 2, "worker_cores": [str(b)]})}
    out, err = probe({"pre_mask": [a], "loader": {"context": "spawn", "workers": 2}}, env=env)
    assert all(masks(r["threads"]) == {(a,)} for r in out["workers"])
    assert err.count("its worker cores are not CPUs of its plan") == 2


# -- what is refused ---------------------------------------------------------------------


def test_no_gpu_leaves_everything_alone_and_says_why_once(tmp_path, two):
    a, b = two
    root = gpu_tree(tmp_path, [a, b], gpu_cpus=[])
    spec = {
        "root": str(root),
        "pre_mask": [a],
        "torch_threads": 1,
        "python_threads": 1,
        "calls": [{"workers": 1}, {"workers": 1}],
        "loader": {"context": "fork", "workers": 2},
    }
    out, err = probe(spec)
    why = "placement left alone: no GPU on this machine: sysfs lists no GPU PCI device"
    assert [p["str"] for p in out["placements"]] == [why, why]
    assert out["warnings"] == [why]  # two calls, one warning
    assert out["threads"] == out["threads_before"] and out["torch_threads"] == 1
    assert out["omp"] is None and out["mkl"] is None
    # The workers keep the mask they inherited; the rank has said why, they say nothing.
    assert all(masks(r["threads"]) == {(a,)} for r in out["workers"])
    assert "PlacementWarning" not in err


def test_a_cgroup_narrower_than_a_core_per_worker_is_left_alone(tmp_path, two):
    a, b = two
    root = gpu_tree(tmp_path, [a, b], cgroup=[a])
    out, _ = probe({"root": str(root), "pre_mask": [b], "python_threads": 1, "calls": [{"workers": 2}, {"workers": 2}]})
    assert not out["placements"][0]["placed"]
    assert out["warnings"] == [
        f"placement left alone: CPUs {a} hold 1 core, fewer than the 2 DataLoader workers: "
        "affmon.place plans a core per worker at least"
    ]
    assert out["threads"] == out["threads_before"] and out["omp"] is None


def test_a_cpuset_that_keeps_too_few_of_the_plan_puts_the_thread_back(tmp_path, two):
    """A plan of two CPUs, one of which this machine lacks: the kernel keeps one, too few
    for two workers. The one thread already set goes back, and nothing else changes."""
    a, b = two
    absent = max(usable_cpus()) + 1
    root = gpu_tree(tmp_path, [a, absent])
    out, _ = probe({"root": str(root), "pre_mask": [b], "python_threads": 2, "calls": [{"workers": 2}]})
    assert not out["placements"][0]["placed"]
    assert out["warnings"] == [
        f"placement left alone: this process's cpuset keeps CPUs {a} of the plan's: CPUs {a} hold 1 core, "
        "fewer than the 2 DataLoader workers: affmon.place plans a core per worker at least"
    ]
    assert out["threads"] == out["threads_before"]


def test_a_cpuset_that_keeps_part_of_the_plan_is_said(tmp_path, two):
    a, b = two
    absent = max(usable_cpus()) + 1
    out, _ = probe({"root": str(gpu_tree(tmp_path, [a, absent])), "pre_mask": [b], "calls": [{"workers": 1}]})
    placed = out["placements"][0]
    assert placed["placed"] and placed["cpus"] == [a] and masks(out["threads"]) == {(a,)}
    said = f"pinned to CPUs {a}, the part of the plan's {a},{absent} that this process's cpuset allows"
    assert out["warnings"] == [said]
    assert placed["main_threads"] == 1 and placed["worker_shares"] == [[a]]  # one CPU: shared


def test_pid_1_is_left_alone_with_a_way_out(tmp_path, two, monkeypatch):
    """A container's first process: the pin refuses PID 1, so rank() says how to start it
    instead (nothing is pinned: the pid is only pretended)."""
    from affmon.place.apply import _pin_self

    topology = load_topology(str(gpu_tree(tmp_path, list(two))))
    before = os.sched_getaffinity(0)
    monkeypatch.setattr(os, "getpid", lambda: 1)
    result, _cpus, why = _pin_self(topology, frozenset(two), None)
    monkeypatch.undo()
    assert result is None and why is not None and "docker run --init" in why
    assert os.sched_getaffinity(0) == before


# -- the planning, in this process -----------------------------------------------------------


def exec_args(root: Path, *, gpu: int | None = None, ranks_per_gpu: int = 1) -> argparse.Namespace:
    return argparse.Namespace(root=str(root), from_env=gpu is None, gpu=gpu, ranks_per_gpu=ranks_per_gpu)


EXEC_CASES = [
    ({"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "0,1"}, None, 1),
    ({"LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "0,1"}, None, 1),
    ({"LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "0,1"}, None, 2),
    ({"LOCAL_RANK": "3", "CUDA_VISIBLE_DEVICES": "4,5,6,7"}, None, 1),
    ({"LOCAL_RANK": "2"}, None, 1),
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, 1, 1),
    ({}, 6, 1),
    ({"LOCAL_RANK": "2", "CUDA_VISIBLE_DEVICES": "0,1"}, None, 1),
    ({"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "GPU-8932f937"}, None, 1),
    ({}, 9, 1),
]


@pytest.mark.parametrize(("env", "gpu", "ranks_per_gpu"), EXEC_CASES)
def test_plan_rank_is_the_plan_exec_applies(tmp_path, monkeypatch, env, gpu, ranks_per_gpu):
    """Same plan and warnings, or the same reason for none, as ``affmon exec``."""
    for name in CLEARED:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    root = dgx_a100_tree(tmp_path)
    try:
        expected: object = exec_plan(exec_args(root, gpu=gpu, ranks_per_gpu=ranks_per_gpu))
    except CannotPlan as exc:
        expected = (str(exc), exc.warnings)
    topology = load_topology(str(root))
    local = None if gpu is not None else local_rank_from(os.environ)
    try:
        got: object = plan_rank(
            topology,
            visible=os.environ.get("CUDA_VISIBLE_DEVICES"),
            refs=None,
            gpu=gpu,
            local_rank=local,
            ranks_per_gpu=ranks_per_gpu,
        )
    except CannotPlan as exc:
        got = (str(exc), exc.warnings)
    assert got == expected


def test_plan_rank_on_the_dgx_job(tmp_path):
    """The Slurm job of GPUs 0 and 1 on node 3: rank 1 gets the second half of its cores."""
    topology = load_topology(str(dgx_a100_tree(tmp_path)))
    mine, said = plan_rank(topology, visible="0,1", refs=None, local_rank=LocalRank(1, "LOCAL_RANK"))
    assert mine.cpus == parse_cpulist("56-63,184-191") and mine.numa_node == 3 and said == ()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"LOCAL_RANK": "2", "SLURM_LOCALID": "5"}, LocalRank(2, "LOCAL_RANK")),
        ({"SLURM_LOCALID": "5"}, LocalRank(5, "SLURM_LOCALID")),
        ({}, LocalRank(0, None)),
        ({"LOCAL_RANK": " 3 "}, LocalRank(3, "LOCAL_RANK")),
    ],
)
def test_local_rank_from_torchrun_then_slurm(env, expected):
    assert local_rank_from(env) == expected


@pytest.mark.parametrize("value", ["", "two", "²", "١", "-1", "1234567"])
def test_a_local_rank_that_is_not_a_number_is_no_plan(value):
    with pytest.raises(CannotPlan, match="LOCAL_RANK must be a number"):
        local_rank_from({"LOCAL_RANK": value, "SLURM_LOCALID": "0"})


def test_the_dgx_rank_split_for_six_workers(tmp_path):
    """16 CPUs (8 cores and their siblings) and 6 workers: a worker on each of the last 6
    cores; the main pool's 10 threads are the first 2 cores and the 6 siblings the
    one-thread workers leave free."""
    topology = load_topology(str(dgx_a100_tree(tmp_path)))
    cpus = parse_cpulist("48-55,176-183")
    split = split_for_workers(topology, cpus, 6)
    assert split.main_threads == 10 and split.main_cpus == parse_cpulist("48-49,176-177")
    assert split.worker_cpus == parse_cpulist("50-55,178-183")
    assert split.worker_cores == tuple(frozenset({c, c + 128}) for c in range(50, 56))
    assert [worker_share(split.worker_cores, i, 6) for i in range(6)] == list(split.worker_cores)
    assert too_few_cores(topology, cpus, 6) is None
    assert too_few_cores(topology, cpus, 9) == (
        "CPUs 48-55,176-183 hold 8 cores, fewer than the 9 DataLoader workers: "
        "affmon.place plans a core per worker at least"
    )


def test_cores_are_grouped_by_sibling_and_ordered_by_l3(tmp_path):
    topology = load_topology(str(dgx_a100_tree(tmp_path, job_cpus=None)))
    groups = core_groups(topology, parse_cpulist("0,4,128,132,200"))
    assert groups == (frozenset({0, 128}), frozenset({4, 132}), frozenset({200}))


def test_worker_shares_are_contiguous_runs_of_cores():
    cores = tuple(frozenset({c}) for c in range(8))
    assert [sorted(worker_share(cores, i, 3)) for i in range(3)] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert [sorted(worker_share(cores, i, 8)) for i in range(8)] == [[c] for c in range(8)]
    assert worker_share(cores[:2], 2, 3) == frozenset({0, 1})  # fewer cores than workers: shared
    assert worker_share(cores, 5, 3) == frozenset({6, 7})  # a DataLoader of more workers than said


def test_eight_cores_six_workers_one_core_each(tmp_path):
    topology = load_topology(str(gpu_tree(tmp_path, list(range(8)))))
    split = split_for_workers(topology, frozenset(range(8)), 6)
    assert split.main_cpus == frozenset({0, 1}) and split.main_threads == 2
    assert [sorted(worker_share(split.worker_cores, i, 6)) for i in range(6)] == [[c] for c in range(2, 8)]


# -- the values ------------------------------------------------------------------------------


def test_a_placement_prints_as_one_line():
    p = Placement(
        local_rank=0,
        pci_bus_id=GPU,
        numa_node=0,
        cpus=frozenset(range(8)),
        main_threads=2,
        workers=6,
        worker_cpus=frozenset(range(2, 8)),
    )
    assert str(p) == f"rank 0 on GPU {GPU}: CPUs 0-7 (node 0), main pool 2 threads, 6 workers on CPUs 2-7"
    assert str(Placement(left_alone="no GPU")) == "placement left alone: no GPU"
    assert not Placement(left_alone="no GPU").placed and p.placed


@pytest.mark.parametrize(
    "state",
    [
        Remembered(41, None, frozenset(range(8)), 6, tuple(frozenset({c}) for c in range(2, 8))),
        Remembered(41, None, frozenset({0, 1}), None, (frozenset({0, 1}),)),
        Remembered(41, left_alone="no GPU"),
    ],
)
def test_the_remembered_plan_survives_the_environment(state):
    assert decode(encode(state)) == state


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("not json", "not JSON"),
        ("[]", "not what rank() writes"),
        ('{"pid": -1, "left_alone": "x"}', "not what rank() writes"),
        ('{"pid": 1, "left_alone": 5}', "not what rank() writes"),
        ('{"pid": 1, "cpus": "0-3", "workers": "6", "worker_cores": ["1"]}', "no worker count"),
        ('{"pid": 1, "cpus": "0-3", "workers": 2, "worker_cores": ["4"]}', "not CPUs of its plan"),
        ('{"pid": 1, "cpus": "0-3", "workers": 2, "worker_cores": []}', "not CPUs of its plan"),
        ('{"pid": 1, "cpus": "0-3", "workers": 2, "worker_cores": [3]}', "not CPUs of its plan"),
        ('{"pid": 1, "cpus": "3-0", "workers": 2, "worker_cores": ["1"]}', "descending"),
        ("x" * (1 << 18), "characters long"),
    ],
)
def test_a_foreign_remembered_plan_is_refused(text, why):
    with pytest.raises(ValueError, match=re.escape(why)):
        decode(text)


def test_each_reason_is_said_once_per_process(monkeypatch):
    monkeypatch.setattr(placement, "_said", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            placement.say_once("no GPU", stacklevel=1)
            placement.say_once("too narrow", stacklevel=1)
    assert [(w.category, str(w.message)) for w in caught] == [
        (PlacementWarning, "no GPU"),
        (PlacementWarning, "too narrow"),
    ]
