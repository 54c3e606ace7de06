"""The loop breakdown on real processes: a loop fed by a slow worker, a loop spinning in
Python, and a loop queued behind hogs on its one CPU. The machine may be loaded by other
work: every bound leaves room for that."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from affmon.collect.loop import LoopSampler, LoopWatcher
from affmon.collect.pyframes import EXITED
from affmon.core.model.loop import CPU_WAIT, DATA_WAIT, GPU_WAIT, ON_CPU, OTHER, LoopBreakdown, breakdown
from tests.helpers.live import loop

WINDOW_S = 3.0


@contextmanager
def hogs(cpu: int, count: int, nice: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    def place() -> None:
        os.sched_setaffinity(0, {cpu})
        with suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, 0, nice)

    procs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=place, start_new_session=True)
        for _ in range(count)
    ]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


def schedstat(pid: int) -> tuple[int, int]:
    run, wait, _ = Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()
    return int(run), int(wait)


def watch(pid: int, seconds: float = WINDOW_S) -> tuple[LoopBreakdown, LoopSampler, float]:
    """The breakdown of one window of ``seconds`` (after a settling one), and the run-queue
    share the test read itself from schedstat around that window."""
    sampler = LoopSampler(pid)
    with LoopWatcher([sampler], seed=7) as watcher:
        time.sleep(1.0)
        watcher.windows()
        t0, (_, wait0) = time.monotonic(), schedstat(pid)
        time.sleep(seconds)
        window = watcher.windows()[0]
        t1, (_, wait1) = time.monotonic(), schedstat(pid)
    b = breakdown(window, gpu_busy=None)
    assert b is not None
    assert sum(window.probes.values()) >= seconds * 20 * 0.3  # tens of Hz, even on a loaded machine
    return b, sampler, (wait1 - wait0) / ((t1 - t0) * 1e9)


@pytest.mark.parametrize("mode", ["queue", "pin_memory"])
def test_a_loop_fed_by_a_slow_worker_waits_for_data(mode: str) -> None:
    with loop(mode) as info:
        b, sampler, _ = watch(info["pid"])
    assert info["worker"] in sampler.children
    if mode == "pin_memory":
        assert sampler.feeders, "the thread that reads the worker's pipe was not found"
        # Each feeder's syscall file is read open, once, like the loop thread's, until closed.
        kept = [f"/proc/{info['pid']}/task/{tid}/syscall" for tid in (info["pid"], *sampler.feeders)]
        opened = _open_links()
        assert [opened.count(path) for path in kept] == [1] * len(kept)
        sampler.close()
        assert not set(kept) & _open_files()
    assert b.largest == DATA_WAIT and b.shares[DATA_WAIT] >= 0.5, b.to_json()
    assert b.shares[GPU_WAIT] == 0.0


def test_a_loop_spinning_in_python_is_on_cpu() -> None:
    with loop("spin") as info:
        b, _, measured_wait = watch(info["pid"])
    # It never blocks: all its time is on a CPU or queued for one, split as schedstat says
    # (on a machine loaded by other work the queued part can be large).
    assert b.shares[ON_CPU] + b.shares[CPU_WAIT] >= 0.9, b.to_json()
    assert b.shares[DATA_WAIT] + b.shares[GPU_WAIT] + b.shares[OTHER] <= 0.1
    assert b.shares[CPU_WAIT] == pytest.approx(measured_wait, abs=0.05)
    assert b.shares[ON_CPU] >= 0.1


def test_hogs_on_the_loops_cpu_show_as_cpu_wait_as_schedstat_says() -> None:
    cpu = max(os.sched_getaffinity(0))
    with loop("spin", "--cpu", str(cpu)) as info, hogs(cpu, 2, nice=-5):
        b, _, measured = watch(info["pid"])
    # Two hogs at nice -5 on its one CPU leave the loop (nice 0) at most a third of it.
    assert b.largest == CPU_WAIT and b.shares[CPU_WAIT] >= 0.5, b.to_json()
    assert b.shares[CPU_WAIT] == pytest.approx(measured, abs=0.05)
    assert b.shares[ON_CPU] + b.shares[CPU_WAIT] >= 0.9


PROBE_AS_NOBODY = """
import json, os, sys, time
from affmon.collect.loop import LoopSampler
from affmon.core.model.loop import breakdown
os.setgroups([]); os.setgid(65534); os.setuid(65534)  # after the imports: the stdlib may be root's only
s = LoopSampler(int(sys.argv[1]))
found = [s.probe() for _ in range(20)]
time.sleep(0.5)
b = breakdown(s.window(), None)
print(json.dumps({"found": sorted(set(found)), "readable": s.syscall_readable, "b": b and b.to_json()}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_without_ptrace_permission_the_split_is_unavailable_and_the_rest_exact() -> None:
    with loop("queue") as info:
        out = subprocess.run(
            [sys.executable, "-c", PROBE_AS_NOBODY, str(info["pid"])],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent.parent)},
        )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["found"] == ["unknown"] and seen["readable"] is False
    b = seen["b"]
    assert b["blocked_split"] is False and "not readable" in b["unavailable"]
    assert b["data_wait"] == 0 and b["other"] >= 0.5  # blocked, but on what is not known


def _open_links() -> list[str]:
    """What each of this process's open fds names (a file open twice is listed twice)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with suppress(OSError):
            found.append(os.readlink(f"/proc/self/fd/{fd}"))
    return found


def _open_files() -> set[str]:
    return set(_open_links())


def test_the_loop_threads_file_is_read_open_and_closed_with_the_sampler() -> None:
    """The probe keeps the loop thread's ``syscall`` file open and reads it again each look:
    what it reads is what a fresh read of the file says; once the process is gone a look
    is unknown, not an error; ``close`` gives the file back."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; print(flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    proc.stdout.readline()
    path = f"/proc/{proc.pid}/task/{proc.pid}/syscall"
    before = _open_files()
    sampler = LoopSampler(proc.pid)
    try:
        deadline = time.monotonic() + 30
        while sampler.probe() != OTHER:  # blocked in read(2) on its stdin, once it got there
            assert time.monotonic() < deadline, "the process never blocked on its stdin"
            time.sleep(0.05)
        assert sampler._kept_syscall(proc.pid) == Path(path).read_bytes()  # the same line as a fresh read
        assert path in _open_files() - before
        proc.kill()
        proc.wait()
        assert sampler._kept_syscall(proc.pid) is None
        sampler.probe()  # gone: counted as unknown, no exception
    finally:
        proc.kill()
        proc.wait()
        sampler.close()
    assert path not in _open_files()
    sampler.close()  # twice: nothing left to close
    assert sampler._kept_syscall(proc.pid) is None  # a look after close opens again (the process is gone)


def test_the_processes_memory_is_read_open_while_it_lives_and_given_back_once_it_exits() -> None:
    """The probes that find the loop running read its Python frames through one ``mem``
    file kept open: the frames read are the loop's; once the process exits the next read
    finds its memory gone, gives the file back and says the process exited."""
    code = "import sys\ndef spin():\n    while True: pass\nprint(flush=True)\nspin()"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.readline()
    path = f"/proc/{proc.pid}/mem"
    sampler = LoopSampler(proc.pid)
    try:
        deadline = time.monotonic() + 30
        while sampler._frame_probes < 3:  # three looks that found it running, frames read
            assert time.monotonic() < deadline, "no frames read from the spinning process"
            sampler.probe()
            time.sleep(0.01)
        assert sampler.stacks.unavailable is None
        stack = sampler.stacks.stack()
        assert stack is not None and "spin" in [f.name for f in stack]
        assert _open_links().count(path) == 1  # one file, however many looks
        proc.kill()
        proc.wait()
        assert sampler.stacks.stack() is None
        assert sampler.stacks.unavailable == EXITED
        assert path not in _open_files()
        sampler.probe()  # gone: no exception
    finally:
        proc.kill()
        proc.wait()
        sampler.close()
    assert path not in _open_files()
