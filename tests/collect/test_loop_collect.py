"""The loop sampler on a recorded /proc tree: what a probe reads and how the window adds up."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from affmon.collect.loop import LoopSampler, parse_cpu_times, parse_epoll_targets
from affmon.core.errors import ParseError
from affmon.core.model.loop import DATA_WAIT, GPU_WAIT, OTHER, RUNNING, UNKNOWN, breakdown

STAT = "100 (python) S 1 100 100 0 -1 4194304 0 0 0 0 5 5 0 0 20 0 3 0 1000 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 2\n"
IDLE = "0 0x0 0x0 0x0 0x0 0x0 0x0 0x7ffd 0x7f00\n"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def write(root: Path, path: str, text: str) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def link(root: Path, path: str, to: str) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(to, target)


def call(number: int, *args: int) -> str:
    full = [*args, 0, 0, 0, 0, 0, 0][:6]
    return f"{number} " + " ".join(hex(a) for a in full) + " 0x7ffd 0x7f00\n"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """Rank 100 (loop thread 100, pin-memory-like thread 102) with one worker, 101, sharing pipe:[77]."""
    write(tmp_path, "/proc/100/task/100/stat", STAT)
    write(tmp_path, "/proc/100/task/100/schedstat", "1000000000 0 10\n")
    write(tmp_path, "/proc/100/task/100/syscall", "running\n")
    write(tmp_path, "/proc/100/task/100/children", "101 ")
    write(tmp_path, "/proc/100/task/102/syscall", call(0, 5))  # the feeder, reading the worker's pipe
    write(tmp_path, "/proc/100/task/102/children", "")
    link(tmp_path, "/proc/100/fd/5", "pipe:[77]")
    link(tmp_path, "/proc/100/fd/6", "pipe:[78]")
    link(tmp_path, "/proc/100/fd/7", "/dev/nvidiactl")
    link(tmp_path, "/proc/100/fd/9", "anon_inode:[eventpoll]")
    write(tmp_path, "/proc/100/fdinfo/9", "pos:\t0\nflags:\t02\ntfd:        5 events:       19 data: 5\n")
    write(tmp_path, "/proc/101/task/101/schedstat", "0 0 0\n")
    link(tmp_path, "/proc/101/fd/3", "pipe:[77]")
    link(tmp_path, "/proc/101/fd/4", "/dev/null")
    write(tmp_path, "/proc/stat", "cpu  1 2 3 4\ncpu0 0 0 0 100 0 0 0 0\ncpu1 0 0 0 100 0 0 0 0\n")
    return tmp_path


def sampler(tree: Path, clock: Clock) -> LoopSampler:
    return LoopSampler(100, root=str(tree), machine="x86_64", clock=clock)


def test_probes_classify_what_the_thread_waits_on(tree: Path) -> None:
    s = sampler(tree, Clock())
    assert s.children == (101,) and s.worker_links == frozenset({"pipe:[77]"}) and s.feeders == {102}
    cases = [
        ("running\n", RUNNING),
        (call(0, 5), DATA_WAIT),  # read on the worker's pipe
        (call(0, 6), OTHER),  # a pipe no worker holds
        (call(16, 7, 0xC020462A), GPU_WAIT),  # ioctl on /dev/nvidiactl
        (call(232, 9, 0x1000, 8, 100), DATA_WAIT),  # epoll_wait on an instance watching the pipe
        (call(24), GPU_WAIT),  # sched_yield
        (call(202, 0x7F00, 0x80), DATA_WAIT),  # futex while the feeder reads the worker's pipe
        (call(230, 0, 0, 0x1000), OTHER),  # clock_nanosleep
        ("-1 0x7ffd 0x7f00\n", OTHER),  # blocked outside a call
        ("garbage", UNKNOWN),  # garbled: unknown, and no claim that reading is refused
    ]
    for text, expected in cases:
        write(tree, "/proc/100/task/100/syscall", text)
        assert s.probe() == expected, text
    assert s.syscall_readable


def test_a_stalled_workers_place_is_read_again_only_once_it_ran(tree: Path) -> None:
    """A stalled pipeline (its workers did not run) names where each worker thread sleeps.
    A thread whose run and wait times did not move since that was read has not been on a
    CPU, so it sleeps where it slept: kept, its files not read again; once it ran, read."""
    clock = Clock()
    s = sampler(tree, clock)
    write(tree, "/proc/101/task/101/stat", STAT.replace("100 (python)", "101 (python)"))
    write(tree, "/proc/101/task/101/wchan", "pipe_read")
    write(tree, "/proc/101/task/101/syscall", call(0, 3))

    def window(at: float) -> list[tuple[str | None, str | None]]:
        write(tree, "/proc/100/task/100/syscall", call(0, 5))  # the loop reads the worker's pipe
        assert s.probe() == DATA_WAIT
        clock.now = at
        w = s.window()
        assert w.workers is not None
        return [(t.wchan, t.syscall) for t in w.workers.waits]

    assert window(1.0) == [("pipe_read", "read")]
    write(tree, "/proc/101/task/101/wchan", "futex_wait_queue")  # as if read at another time: not read
    write(tree, "/proc/101/task/101/syscall", call(202, 0x7F00, 0x80))
    assert window(2.0) == [("pipe_read", "read")]
    write(tree, "/proc/101/task/101/schedstat", "20000 3000 1\n")  # it ran, for 20 us: still stalled
    assert window(3.0) == [("futex_wait_queue", "futex")]
    assert window(4.0) == [("futex_wait_queue", "futex")]
    write(tree, "/proc/101/task/101/schedstat", "20000 9000 2\n")  # it waited for a CPU: it was woken
    write(tree, "/proc/101/task/101/wchan", "pipe_read")
    write(tree, "/proc/101/task/101/syscall", call(0, 3))
    assert window(5.0) == [("pipe_read", "read")]


def test_sleeping_workers_of_a_loop_not_waiting_for_data_are_not_looked_at(tree: Path) -> None:
    """Workers that barely ran beside a loop never found waiting for data (asleep in its own
    sleep, running): no rule reads where they sleep, so their files are not read."""
    clock = Clock()
    s = sampler(tree, clock)
    write(tree, "/proc/101/task/101/stat", STAT.replace("100 (python)", "101 (python)"))
    write(tree, "/proc/101/task/101/wchan", "pipe_read")
    write(tree, "/proc/101/task/101/syscall", call(0, 3))
    for at, loop in ((1.0, call(230, 0, 0, 0x1000)), (2.0, "running\n")):
        write(tree, "/proc/100/task/100/syscall", loop)
        assert s.probe() != DATA_WAIT
        clock.now = at
        w = s.window()
        assert w.workers is not None and w.workers.count == 1
        assert w.workers.waits == ()
    write(tree, "/proc/100/task/100/syscall", call(0, 5))  # now it waits on the worker's pipe
    assert s.probe() == DATA_WAIT
    clock.now = 3.0
    w = s.window()
    assert w.workers is not None and [(t.wchan, t.syscall) for t in w.workers.waits] == [("pipe_read", "read")]


def test_futex_is_other_when_the_feeder_sleeps_elsewhere(tree: Path) -> None:
    s = sampler(tree, Clock())
    write(tree, "/proc/100/task/102/syscall", call(230, 0, 0, 0x1000))
    write(tree, "/proc/100/task/100/syscall", call(202, 0x7F00, 0x80))
    assert s.probe() == OTHER
    os.unlink(tree / "proc/100/task/102/syscall")  # the feeder exited: forgotten
    assert s.probe() == OTHER and s.feeders == set()


def test_window_adds_schedstat_probes_workers_and_free_cpus(tree: Path) -> None:
    clock = Clock()
    s = sampler(tree, clock)
    write(tree, "/proc/100/task/100/syscall", call(0, 5))
    for _ in range(6):
        s.probe()
    write(tree, "/proc/100/task/100/syscall", "running\n")
    for _ in range(2):
        s.probe()
    clock.now = 2.0
    write(tree, "/proc/100/task/100/schedstat", "1400000000 100000000 20\n")
    write(tree, "/proc/101/task/101/schedstat", "1500000000 500000000 9\n")
    write(tree, "/proc/stat", "cpu  1 2 3 4\ncpu0 50 0 0 150 0 0 0 0\ncpu1 100 0 0 100 0 0 0 0\n")
    write(tree, "/proc/100/task/100/status", "Cpus_allowed_list:\t0-1\n")
    write(tree, "/proc/101/task/101/status", "Cpus_allowed_list:\t0\n")
    w = s.window()
    assert (w.seconds, w.run_ns, w.wait_ns) == (2.0, 400_000_000, 100_000_000)
    assert w.probes == {DATA_WAIT: 6, RUNNING: 2}
    assert w.workers is not None
    # The worker's first schedstat read 0 0 0 (unknown): its delta starts at the second mark.
    assert (w.workers.count, w.workers.domain_cpus, w.workers.free_cpus) == (1, 2, 0.5)
    b = breakdown(w, gpu_busy=0.1)
    assert b is not None
    assert b.shares[DATA_WAIT] == pytest.approx(0.75)
    assert b.largest == DATA_WAIT
    second = s.window()
    assert second.probes == {} and second.run_ns == 0


def test_a_thread_that_is_gone_gives_an_empty_window(tree: Path) -> None:
    clock = Clock()
    s = sampler(tree, clock)
    for name in ("syscall", "schedstat", "stat"):
        os.unlink(tree / f"proc/100/task/100/{name}")
    assert s.probe() == UNKNOWN
    clock.now = 1.0
    w = s.window()
    assert w.run_ns is None and breakdown(w, None) is None


def test_a_reused_tid_is_not_the_thread_that_was_watched(tree: Path) -> None:
    clock = Clock()
    s = sampler(tree, clock)
    write(tree, "/proc/100/task/100/stat", STAT.replace(" 1000 0 0", " 2000 0 0"))  # start time 2000, not 1000
    write(tree, "/proc/100/task/100/schedstat", "5000000000 0 10\n")
    clock.now = 1.0
    assert s.window().run_ns is None


def test_parse_cpu_times_and_epoll_targets() -> None:
    text = "cpu  9 9 9 9\ncpu0 1 2 3 4 5 6 7 8 9 10\ncpu3 0 0 0 10 0\nintr 5\n"
    assert parse_cpu_times(text) == {0: (4 + 5, 36), 3: (10, 10)}
    with pytest.raises(ParseError):
        parse_cpu_times("cpu0 1 x 3 4 5\n")
    with pytest.raises(ParseError):
        parse_cpu_times("cpuX 1 2 3 4 5\n")
    assert parse_epoll_targets("pos: 0\ntfd: 4 events: 19\ntfd:\t12 events: 1\ntfd: x\n") == [4, 12]


@given(st.text(alphabet="cpu0123456789 x\n-", max_size=300))
def test_parse_cpu_times_any_text_is_times_or_a_parse_error(text: str) -> None:
    try:
        times = parse_cpu_times(text)
    except ParseError:
        return
    assert all(0 <= idle <= total for idle, total in times.values())
