"""Kernel threads in the sampler. A kernel worker's name says what work it is doing, and
changes most ticks (``kworker/1:0-events``, then ``kworker/1:0-mm_percpu_wq``); a kernel
thread never execs, so the new name is the same process: its command line and status are
not read again, as they are for a user process whose name changed (an exec). A kernel
thread has no other threads, so its task directory is not listed.

Against a recorded tree made at test time from the live files of kthreadd (PID 2, a kernel
thread on every Linux) and of a ``sleep`` spawned here (a user process), their names then
changed in the copies as a worker's and an exec's would be."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from affmon.collect.procfs import PF_KTHREAD, ProcFs, parse_stat_bytes
from affmon.collect.sampler import Sampler, Selection

KTHREADD = 2


def copy_process(root: Path, pid: int) -> None:
    """``/proc/PID``'s stat, status and cmdline, and its main thread's stat and status."""
    source, copy = Path(f"/proc/{pid}"), root / "proc" / str(pid)
    (copy / "task" / str(pid)).mkdir(parents=True)
    for name in ("stat", "status", "cmdline"):
        shutil.copyfile(source / name, copy / name)
    for name in ("stat", "status"):
        shutil.copyfile(source / "task" / str(pid) / name, copy / "task" / str(pid) / name)


def rename(root: Path, pid: int, new: str) -> None:
    """The name in the copy's stat lines (the process's and its thread's) becomes ``new``."""
    for path in (root / "proc" / str(pid) / "stat", root / "proc" / str(pid) / "task" / str(pid) / "stat"):
        line = path.read_bytes()
        path.write_bytes(line[: line.index(b"(") + 1] + new.encode() + line[line.rindex(b")") :])


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A recorded tree of kthreadd and a live ``sleep``; yields (root, the sleep's PID)."""
    stat = parse_stat_bytes(Path(f"/proc/{KTHREADD}/stat").read_bytes())
    assert stat.flags & PF_KTHREAD, "PID 2 is kthreadd, a kernel thread"
    child = subprocess.Popen(["sleep", "60"])
    try:
        root = tmp_path / "root"
        copy_process(root, KTHREADD)
        copy_process(root, child.pid)
        yield root, child.pid
    finally:
        child.kill()
        child.wait()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    """Every per-process file the sampler reads and every task directory it lists, in order."""
    seen: list[tuple[int, str]] = []
    read, tids = ProcFs.read, ProcFs.tids

    def record_read(self: ProcFs, pid: int, name: str) -> bytes | None:
        seen.append((pid, name))
        return read(self, pid, name)

    def record_tids(self: ProcFs, pid: int) -> list[int]:
        seen.append((pid, "task/"))
        return tids(self, pid)

    monkeypatch.setattr(ProcFs, "read", record_read)
    monkeypatch.setattr(ProcFs, "tids", record_tids)
    return seen


def test_a_renamed_kernel_worker_is_the_same_process_and_its_task_directory_is_never_listed(
    tree: tuple[Path, int], reads: list[tuple[int, str]]
) -> None:
    root, user = tree
    sampler = Sampler(str(root), Selection(others=True))
    rename(root, KTHREADD, "kworker/1:0-events")
    first = {p.pid: p for p in sampler.sample().processes}
    assert (KTHREADD, "cmdline") in reads and (user, "cmdline") in reads
    assert (KTHREADD, "task/") not in reads and (user, "task/") in reads
    assert [t.tid for t in first[KTHREADD].threads] == [KTHREADD]
    assert first[KTHREADD].kernel and first[KTHREADD].name == "kworker/1:0-events"

    reads.clear()
    rename(root, KTHREADD, "kworker/1:0-mm_percpu_wq")
    rename(root, user, "python3")  # a user process whose name changed: it exec'd
    second = {p.pid: p for p in sampler.sample().processes}
    assert second[KTHREADD].name == "kworker/1:0-mm_percpu_wq"
    assert second[KTHREADD].threads[0].name == "kworker/1:0-mm_percpu_wq"
    assert [name for pid, name in reads if pid == KTHREADD] == ["stat"]  # its thread's stat: read_task
    # the exec'd process is read as new: its command line and owner again
    assert (user, "cmdline") in reads and (user, "status") in reads
    assert second[user].name == "python3"


def test_a_kernel_thread_that_restarted_under_its_pid_is_read_as_new(
    tree: tuple[Path, int], reads: list[tuple[int, str]]
) -> None:
    """The rename rule keeps the cache only for the same start time: a PID reused by
    another kernel thread is another process."""
    root, _ = tree
    sampler = Sampler(str(root), Selection(others=True))
    sampler.sample()
    reads.clear()
    stat = root / "proc" / str(KTHREADD) / "stat"
    fields = stat.read_text().rsplit(")", 1)
    rest = fields[1].split()
    rest[19] = str(int(rest[19]) + 1000)  # field 22, the start time
    stat.write_text(fields[0] + ") " + " ".join(rest) + "\n")
    rename(root, KTHREADD, "kworker/0:2-events")
    sampler.sample()
    assert (KTHREADD, "cmdline") in reads and (KTHREADD, "status") in reads
