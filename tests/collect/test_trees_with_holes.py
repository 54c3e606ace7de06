"""Recorded trees with holes: files missing, empty, replaced by a directory, a
FIFO or a symbolic link loop, or full of garbage. ``affmon topology --root`` and
``affmon snapshot --root`` must give a topology and a snapshot with unknowns (exit 0),
or, for garbage only, one line and exit 2: never a traceback, never a hang.

The tree is hwloc's ``nvidiagpunumanodes`` sysfs fixture (cgroup v1 cpuset, NVIDIA GPUs,
CPU-less NUMA nodes) plus six copies of the ``/proc/PID`` files of a process spawned
here (three threads), at PIDs 900001-900006, in the fixture's ``jjh`` cpuset cgroup: in
each case copy N gets damage number N, so one tree and one run cover every kind. As
root, ``chmod 000`` does not make a file unreadable, so "unreadable" is played by a
directory, a FIFO and a link loop, which fail the same reads.

Each tree is read by the CLI as a subprocess (what a user sees) and by the readers
in-process (to check which fields became unknown: None, never 0).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from affmon.collect.sampler import Sampler, Selection
from affmon.collect.sysfs_topology import read_topology
from affmon.core.errors import ParseError
from affmon.core.model.samples import ProcessSample
from affmon.core.model.topology import Topology
from tests.helpers.live import workload
from tests.helpers.topology_trees import extract_tree

REPO = Path(__file__).resolve().parent.parent.parent
THREAD_FILES = ("stat", "status", "schedstat", "sched")


def garbage(path: Path) -> None:
    rng = random.Random(path.name)
    path.write_bytes(bytes(rng.randrange(256) for _ in range(200)) + b"(x) ) \n\0 -1 0x 1-0,,")


MUTATIONS: dict[str, Callable[[Path], None]] = {
    "missing": lambda path: None,
    "empty": lambda path: path.write_bytes(b""),
    "dir": lambda path: path.mkdir(),
    "fifo": lambda path: os.mkfifo(path),
    "loop": lambda path: os.symlink(path.name, path),
    "garbage": garbage,
}
KINDS = list(MUTATIONS)
HOLES = KINDS[:-1]  # what must never be an error: only garbage content may be refused
PIDS = dict(zip(KINDS, range(900001, 900007), strict=True))  # copy of the process damaged by each kind


def damage(path: Path, how: str) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
    MUTATIONS[how](path)


@pytest.fixture(scope="module")
def base_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    fixture = extract_tree(tmp_path_factory, "gpunuma")
    root = tmp_path_factory.mktemp("holes") / "tree"
    shutil.copytree(fixture, root, symlinks=True)
    with workload("--sleepers", "2") as w:
        real = w["pid"]
        files = {name: Path(f"/proc/{real}/{name}").read_bytes() for name in ("stat", "status", "cmdline")}
        threads = {
            int(t.name): {name: (t / name).read_bytes() for name in THREAD_FILES}
            for t in Path(f"/proc/{real}/task").iterdir()
        }
    for pid in PIDS.values():
        dest = root / f"proc/{pid}"
        (dest / "task").mkdir(parents=True)
        for name, data in files.items():
            (dest / name).write_bytes(data.replace(f"{real} (".encode(), f"{pid} (".encode(), 1))
        (dest / "cgroup").write_text("7:cpuset:/jjh\n1:name=systemd:/user.slice\n")
        for tid, thread in threads.items():
            new_tid = pid if tid == real else tid  # the main thread's TID is the PID
            (dest / f"task/{new_tid}").mkdir()
            for name, data in thread.items():
                (dest / f"task/{new_tid}/{name}").write_bytes(
                    data.replace(f"{tid} (".encode(), f"{new_tid} (".encode(), 1)
                )
    return root


@pytest.fixture
def tree(base_tree: Path, tmp_path: Path) -> Path:
    """A copy of the base tree to damage (hard links: every damage replaces the file)."""
    root = tmp_path / "tree"
    subprocess.run(["cp", "-al", str(base_tree), str(root)], check=True)
    return root


def affmon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "affmon", *args], capture_output=True, text=True, timeout=30, cwd=REPO)


def check_cli(out: subprocess.CompletedProcess[str], *, may_refuse: bool) -> dict[str, Any] | None:
    """Exit 0 with JSON, or (when allowed) exit 2 with one line; never a traceback."""
    assert "Traceback" not in out.stderr, out.stderr
    if out.returncode == 0:
        data: dict[str, Any] = json.loads(out.stdout)
        return data
    assert may_refuse, f"exit {out.returncode}: {out.stderr}"
    assert out.returncode == 2 and out.stdout == "", (out.returncode, out.stdout)
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("affmon: "), out.stderr
    return None


class SnapshotCli:
    """``affmon snapshot --root`` run in the background while the test checks in-process."""

    def __init__(self, root: Path) -> None:
        self._pool = ThreadPoolExecutor(1)
        self._job = self._pool.submit(affmon, "snapshot", "--root", str(root), "--all", "--json", "--interval", "0.01")

    def json(self) -> dict[str, Any]:
        try:
            data = check_cli(self._job.result(), may_refuse=False)
        finally:
            self._pool.shutdown()
        assert data is not None
        return data


def copies(root: Path) -> dict[str, ProcessSample | None]:
    """Each kind of damage -> what the sampler made of the copy it hit."""
    sample = Sampler(str(root), Selection(all=True)).sample()
    by_pid = {p.pid: p for p in sample.processes}
    return {how: by_pid.get(pid) for how, pid in PIDS.items()}


def in_cli(data: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
    by_pid = {p["pid"]: p for p in data["processes"]}
    return {how: by_pid.get(pid) for how, pid in PIDS.items()}


def test_the_intact_tree_reads_fully(base_tree: Path) -> None:
    with ThreadPoolExecutor(2) as pool:
        topo_job = pool.submit(affmon, "topology", "--root", str(base_tree), "--json")
        snap_job = pool.submit(affmon, "snapshot", "--root", str(base_tree), "--all", "--json", "--interval", "0.01")
        topo, snap = check_cli(topo_job.result(), may_refuse=False), check_cli(snap_job.result(), may_refuse=False)
    assert topo is not None and topo["allowed_cpus"] == "0-15"  # the cgroup's 0-87 on online 0-15,88-103
    assert snap is not None
    for proc in in_cli(snap).values():
        assert proc is not None and proc["thread_count"] == 3
        assert (proc["user"], proc["cgroup_cpus"]) == ("root", "0-87") and proc["allowed_cpus"]
    for p in copies(base_tree).values():
        assert p is not None and p.uid == 0 and p.mems_allowed is not None and p.cmdline
        for t in p.threads:
            assert None not in (t.cpu_ns, t.wait_ns, t.timeslices, t.migrations, t.voluntary_switches, t.allowed_cpus)


# -- /proc holes: six copies of the process, each damaged its own way ------------------


def damage_copies(root: Path, name: str) -> None:
    """Damage file ``name`` (a glob under proc/PID) of copy N with kind N."""
    for how, pid in PIDS.items():
        targets = sorted(root.glob(f"proc/{pid}/{name}"))
        assert targets, name
        for path in targets:
            damage(path, how)


def test_thread_schedstat_holes_leave_wait_time_unknown(tree: Path) -> None:
    damage_copies(tree, "task/*/schedstat")
    cli = SnapshotCli(tree)
    for how, p in copies(tree).items():
        assert p is not None and len(p.threads) == 3, how  # the threads are still there...
        for t in p.threads:
            assert t.wait_ns is None and t.timeslices is None, how  # ...with wait time unknown
            assert t.cpu_ns is not None  # CPU time then comes from stat
    assert all(p is not None for p in in_cli(cli.json()).values())


def test_thread_sched_holes_leave_migrations_unknown(tree: Path) -> None:
    damage_copies(tree, "task/*/sched")
    cli = SnapshotCli(tree)
    for how, p in copies(tree).items():
        assert p is not None and len(p.threads) == 3, how
        for t in p.threads:
            assert t.migrations is None and t.wait_ns is not None, how
    assert all(p is not None for p in in_cli(cli.json()).values())


def test_thread_status_holes_leave_the_mask_unknown(tree: Path) -> None:
    damage_copies(tree, "task/*/status")
    cli = SnapshotCli(tree)
    for how, p in copies(tree).items():
        assert p is not None and len(p.threads) == 3, how
        assert all(t.allowed_cpus is None for t in p.threads), how  # a recorded tree's mask is in status
    for how, proc in in_cli(cli.json()).items():
        assert proc is not None and proc["allowed_cpus"] is None, how


def test_process_status_holes_leave_owner_and_nodes_unknown(tree: Path) -> None:
    damage_copies(tree, "status")
    cli = SnapshotCli(tree)
    for how, p in copies(tree).items():
        assert p is not None and len(p.threads) == 3, how
        assert p.uid is None and p.user is None and p.mems_allowed is None, how
        assert p.cgroup_cpus == frozenset(range(88)), how  # read on its own, not lost with status
    for how, proc in in_cli(cli.json()).items():
        assert proc is not None and proc["user"] is None and proc["mems_allowed"] is None, how  # null, not 0


def test_process_cgroup_holes_leave_the_cgroup_unknown(tree: Path) -> None:
    damage_copies(tree, "cgroup")
    cli = SnapshotCli(tree)
    for how, p in copies(tree).items():
        assert p is not None and p.uid == 0, how
        assert p.cgroup_cpus is None, how  # no /proc/PID/cpuset either: unknown, never the host's
    for how, proc in in_cli(cli.json()).items():
        assert proc is not None and proc["cgroup_cpus"] is None, how


def test_process_cmdline_holes(tree: Path) -> None:
    damage_copies(tree, "cmdline")
    cli = SnapshotCli(tree)
    for how, p in copies(tree).items():
        assert p is not None and p.uid == 0, how
        if how != "garbage":
            assert p.cmdline in (None, ""), how  # "" is what an empty cmdline says (kernel threads)
    assert all(p is not None for p in in_cli(cli.json()).values())


@pytest.mark.parametrize("name", ["stat", "task/*/stat", "task"])
def test_identity_holes_drop_the_process_and_nothing_else(tree: Path, name: str) -> None:
    """Without stat (who the task is, when it started) there is no sample of it: the
    process is left out, and the rest of the snapshot is read as usual."""
    damage_copies(tree, name)
    cli = SnapshotCli(tree)
    assert copies(tree) == dict.fromkeys(PIDS)
    data = cli.json()
    assert in_cli(data) == dict.fromkeys(PIDS)
    assert data["topology"]["online_cpus"]


# -- /sys holes (and the tables the topology reads from /proc) ------------------------

MANY = {  # groups of many files: the five holes spread over them, garbage in all
    "topology": "sys/devices/system/cpu/cpu*/topology/*",
    "caches": "sys/devices/system/cpu/cpu*/cache/index*/*",
    "nodes": "sys/devices/system/node/node*/cpu*",
    "pci": "sys/bus/pci/devices/*/*",
    "cgroup": "sys/fs/cgroup/cpuset/jjh/cpuset.*",
}
ONE = {  # single files: each kind of damage in turn
    "online": "sys/devices/system/cpu/online",
    "mounts": "proc/mounts",
    "self-cgroup": "proc/self/cgroup",
}


def check_topology(root: Path, may_refuse: bool) -> Topology | None:
    try:
        topology = read_topology(str(root))
    except ParseError:
        assert may_refuse
        return None
    assert topology.online_cpus and topology.allowed_cpus <= topology.online_cpus
    assert sorted(c for core in topology.cores for c in core.cpus) == sorted(topology.online_cpus)
    return topology


def check_sys_tree(root: Path, *, may_refuse: bool, snapshot: bool) -> None:
    with ThreadPoolExecutor(2) as pool:
        topo_job = pool.submit(affmon, "topology", "--root", str(root), "--json")
        snap_job = None
        if snapshot:
            snap_job = pool.submit(affmon, "snapshot", "--root", str(root), "--all", "--json", "--interval", "0.01")
        topology = check_topology(root, may_refuse)
        topo = check_cli(topo_job.result(), may_refuse=may_refuse)
        assert (topo is None) == (topology is None)
        if topo is not None and topology is not None:
            assert topo == topology.to_json()
        if snap_job is not None:
            snap = check_cli(snap_job.result(), may_refuse=may_refuse)
            if not may_refuse:
                assert snap is not None and all(p is not None for p in in_cli(snap).values())


@pytest.mark.parametrize("group", sorted(MANY))
@pytest.mark.parametrize("how", ["holes", "garbage"])
def test_sysfs_groups_of_files(tree: Path, group: str, how: str) -> None:
    targets = sorted(tree.glob(MANY[group]))
    assert len(targets) >= len(HOLES), group
    for index, path in enumerate(targets):
        damage(path, HOLES[index % len(HOLES)] if how == "holes" else "garbage")
    check_sys_tree(tree, may_refuse=how == "garbage", snapshot=group == "cgroup")


@pytest.mark.parametrize("group", sorted(ONE))
@pytest.mark.parametrize("how", KINDS)
def test_sysfs_single_files(tree: Path, group: str, how: str) -> None:
    damage(tree / ONE[group], how)
    check_sys_tree(tree, may_refuse=how == "garbage", snapshot=group != "online")


def test_everything_gutted_at_once(tree: Path) -> None:
    """Every file of the tree empty: a topology of unknowns (one node, every CPU its own
    core) and a snapshot with no process, both exit 0."""
    for path in tree.rglob("*"):
        if path.is_file() and not path.is_symlink():
            damage(path, "empty")
    check_sys_tree(tree, may_refuse=False, snapshot=False)
    snap = check_cli(affmon("snapshot", "--root", str(tree), "--all", "--json", "--interval", "0.01"), may_refuse=False)
    assert snap is not None and snap["processes"] == []
