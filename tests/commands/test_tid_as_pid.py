"""A TID typed where a PID is meant (``ps -L`` and ``top -H`` list them side by side) names
its process, said once on stderr; a kernel thread or a number that names nothing is one
line on stderr and exit 2. Real processes, the CLI as a user runs it, a journal in a
temporary state directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from affmon.actions.journal import Journal
from affmon.collect.procfs import PF_KTHREAD, ProcFs
from tests.helpers.live import workload
from tests.helpers.pinning import BOTH, REPO, A, B, cpus, masks

NOWHERE = 999999  # above this machine's pid_max (32768 here; 4194304 at most): never a process


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


def affmon(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "affmon", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "XDG_STATE_HOME": str(state)},
    )


def comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def note(tid: int, pid: int) -> str:
    return f"affmon: {tid} is a thread (TID) of PID {pid} ({comm(pid)}): using PID {pid}\n"


def test_pin_of_a_tid_pins_its_process_and_undo_of_the_pid_finds_it(state: Path) -> None:
    with workload("--cpus", f"{A},{B}", "--sleepers", "2", "--sleeper-cpus", str(A)) as w:
        pid, tid = w["pid"], w["sleepers"][1]
        before = masks(pid)
        out = affmon(state, "pin", str(tid), "--cpus", str(B))
        assert out.returncode == 0, out.stderr
        assert out.stderr == note(tid, pid)
        assert masks(pid) == dict.fromkeys(before, cpus(B))  # every thread, not just the one named
        (entry,) = Journal(state / "affmon" / "journal.jsonl").entries()
        assert entry.pid == pid and {t.tid for t in entry.threads} == set(before)
        out = affmon(state, "undo", str(pid))
        assert out.returncode == 0, out.stderr
        assert out.stderr == ""
        assert masks(pid) == before
        assert set(before.values()) == {BOTH, cpus(A)}


def test_snapshot_diagnose_and_record_of_a_tid_watch_its_process(state: Path) -> None:
    with workload("--sleepers", "1") as w:
        pid, tid = w["pid"], w["sleepers"][0]
        out = affmon(state, "snapshot", "--pid", str(tid), "--interval", "0.2", "--json")
        assert out.returncode == 0, out.stderr
        assert out.stderr == note(tid, pid)
        shown = {p["pid"]: p for p in json.loads(out.stdout)["processes"]}
        assert pid in shown and shown[pid]["thread_count"] == 2

        out = affmon(state, "diagnose", "--pid", str(tid), "--samples", "3", "--interval", "0.2", "--json")
        assert out.returncode in (0, 1), out.stderr
        assert out.stderr == note(tid, pid)
        assert "findings" in json.loads(out.stdout)

        out = affmon(state, "record", "-", "--pid", str(tid), "--duration", "0.2", "--interval", "0.2")
        assert out.returncode == 0, out.stderr
        assert out.stderr == note(tid, pid)
        _header, *samples = (json.loads(line) for line in out.stdout.splitlines())
        assert len(samples) == 2
        for sample in samples:
            watched = {p["pid"] for p in sample["sample"]["processes"] if p["watched"]}
            assert watched == {pid}


def kernel_thread_line(pid: int) -> str:
    stat = ProcFs("/").stat(pid)
    assert stat is not None and stat.flags & PF_KTHREAD, f"PID {pid} is not a kernel thread here"
    return f"affmon: PID {pid} ({comm(pid)}) is a kernel thread: affmon watches and pins user processes only\n"


@pytest.mark.parametrize(
    "args",
    [
        ["diagnose", "--pid", "2", "--samples", "3", "--interval", "0.2"],
        ["snapshot", "--pid", "2", "--interval", "0.2"],
        ["record", "-", "--pid", "2", "--duration", "0.2", "--interval", "0.2"],
        ["pin", "2", "--cpus", "0"],
    ],
    ids=["diagnose", "snapshot", "record", "pin"],
)
def test_a_kernel_thread_is_one_line_and_exit_2(state: Path, args: list[str]) -> None:
    before = os.sched_getaffinity(2)
    out = affmon(state, *args)
    assert (out.returncode, out.stderr, out.stdout) == (2, kernel_thread_line(2), "")
    assert os.sched_getaffinity(2) == before
    assert not state.exists()  # not even a journal


@pytest.mark.parametrize(
    "args",
    [
        ["pin", str(NOWHERE), "--cpus", "0"],
        ["diagnose", "--pid", str(NOWHERE), "--samples", "3", "--interval", "0.2"],
        ["snapshot", "--pid", str(NOWHERE), "--interval", "0.2"],
    ],
    ids=["pin", "diagnose", "snapshot"],
)
def test_a_number_that_names_nothing_is_one_line_and_exit_2(state: Path, args: list[str]) -> None:
    assert not os.path.exists(f"/proc/{NOWHERE}")
    out = affmon(state, *args)
    assert (out.returncode, out.stderr, out.stdout) == (2, f"affmon: no such process: {NOWHERE}\n", "")
    assert not state.exists()


def test_undo_given_a_tid_undoes_its_process(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path)}
    with workload("--cpus", f"{A},{B}", "--sleepers", "2") as w:
        pid, tid = w["pid"], w["sleepers"][0]
        pinned = subprocess.run(
            [sys.executable, "-m", "affmon", "pin", str(pid), "--cpus", str(A)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert pinned.returncode == 0, pinned.stderr
        out = subprocess.run(
            [sys.executable, "-m", "affmon", "undo", str(tid)], capture_output=True, text=True, env=env, timeout=60
        )
        assert out.returncode == 0, (out.stdout, out.stderr)
        assert out.stderr == f"affmon: {tid} is a thread (TID) of PID {pid}: using PID {pid}\n"
        assert {frozenset(os.sched_getaffinity(int(t))) for t in os.listdir(f"/proc/{pid}/task")} == {frozenset({A, B})}
