"""The loop breakdown's pure core: parsing, classifying probes, shares, and the two rules."""

from __future__ import annotations

import os
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from affmon.core.errors import ParseError
from affmon.core.model.loop import (
    BLOCKED_SHARES,
    CPU_WAIT,
    DATA_WAIT,
    FD_DATA,
    FD_GPU,
    FD_OTHER,
    GPU_WAIT,
    ON_CPU,
    OTHER,
    RUNNING,
    SHARES,
    UNKNOWN,
    LoopBreakdown,
    LoopWindow,
    Probe,
    WorkerStats,
    _parse_syscall_fields,
    breakdown,
    classify,
    describe,
    fd_kind,
    parse_syscall,
)
from affmon.core.rules.base import Severity
from affmon.core.rules.loop import DEFAULT_LOOP_THRESHOLDS, evaluate_loop, input_advice, verdict

# -- the syscall file -------------------------------------------------------------------


def test_parse_syscall_running_blocked_and_outside_a_call() -> None:
    assert parse_syscall("running\n").running
    futex = parse_syscall("202 0x7f00 0x80 0x0 0x0 0x0 0x0 0x7ffd1000 0x7f001234\n")
    assert (futex.running, futex.number, futex.args[:2]) == (False, 202, (0x7F00, 0x80))
    assert futex.name("x86_64") == "futex"
    assert futex.name("aarch64") == "syscall 202"
    fault = parse_syscall("-1 0x7ffd1000 0x7f001234\n")
    assert (fault.running, fault.number) == (False, -1)


@pytest.mark.parametrize(
    "text",
    ["", "walking", "202", "202 0x1 0x2", "x 0x0 0x0 0x0 0x0 0x0 0x0 0x0 0x0", "7 1 2 3 4 5 6 7 8", "-2 0x0 0x0"],
)
def test_parse_syscall_refuses_what_no_kernel_prints(text: str) -> None:
    with pytest.raises(ParseError):
        parse_syscall(text)


@given(st.text(max_size=200))
def test_parse_syscall_any_text_is_a_state_or_a_parse_error(text: str) -> None:
    try:
        state = parse_syscall(text)
    except ParseError:
        return
    assert state.running or state.number >= -1


def _same(text: str) -> None:
    """``parse_syscall`` (a match for the kernel's shape, the full parse otherwise) reads
    ``text`` as the full parse does, or refuses it as it does."""
    try:
        expected = _parse_syscall_fields(text)
    except ParseError:
        with pytest.raises(ParseError):
            parse_syscall(text)
        return
    assert parse_syscall(text) == expected


HEX = st.integers(0, 2**64 - 1).map(lambda n: f"{n:#x}")


@given(
    st.one_of(st.integers(-3, 10**7).map(str), st.sampled_from(["-0", "007", "+1", "1e3", "٣"])),
    st.lists(st.one_of(HEX, st.sampled_from(["0X1", "0x", "0xABC", "0x" + "f" * 17, "1", " "])), max_size=9),
    st.sampled_from(["", "\n", " \n", "\n\n", "\t"]),
)
def test_parse_syscall_matches_the_full_parse_on_lines_like_the_kernels(number: str, args: list[str], end: str) -> None:
    _same(" ".join([number, *args]) + end)


def _asleep(tid: int | None) -> bool:
    """Whether this process's thread ``tid`` sleeps (state S in its ``stat``)."""
    with open(f"/proc/{os.getpid()}/task/{tid}/stat", encoding="ascii") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "S"


def test_parse_syscall_matches_the_full_parse_on_this_machines_threads() -> None:
    """Every thread of this process, read from its own ``syscall`` file as the probe does."""
    stop = threading.Event()
    waiters = [threading.Thread(target=stop.wait, daemon=True) for _ in range(3)]
    for t in waiters:
        t.start()
    try:
        # Started is not yet blocked: on a loaded machine a waiter may still be on its way
        # into the wait (a runnable thread's file says "running"). Until all three sleep.
        deadline = time.monotonic() + 30
        while not all(_asleep(t.native_id) for t in waiters) and time.monotonic() < deadline:
            time.sleep(0.01)
        seen = 0
        for tid in os.listdir(f"/proc/{os.getpid()}/task"):
            try:
                with open(f"/proc/{os.getpid()}/task/{tid}/syscall", encoding="ascii") as f:
                    text = f.read()
            except OSError:
                continue
            _same(text)
            seen += not parse_syscall(text).running
        assert seen >= 3  # the three waiters, blocked in a call with its arguments
    finally:
        stop.set()


# -- one probe --------------------------------------------------------------------------


def test_fd_kind() -> None:
    workers = frozenset({"pipe:[77]"})
    assert fd_kind("pipe:[77]", workers) == FD_DATA
    assert fd_kind("pipe:[78]", workers) == FD_OTHER
    assert fd_kind("/dev/nvidiactl", workers) == FD_GPU
    assert fd_kind("/dev/nvidia0", workers) == FD_GPU
    assert fd_kind(None, workers) == FD_OTHER


@pytest.mark.parametrize(
    ("probe", "expected"),
    [
        (Probe(None), RUNNING),
        (Probe(UNKNOWN), UNKNOWN),
        (Probe("poll", (FD_DATA,)), DATA_WAIT),
        (Probe("read", (FD_OTHER, FD_DATA)), DATA_WAIT),
        (Probe("ioctl", (FD_GPU,)), GPU_WAIT),
        (Probe("poll", (FD_GPU,)), GPU_WAIT),
        (Probe("sched_yield"), GPU_WAIT),
        (Probe("futex", (), feeder_busy=True), DATA_WAIT),
        (Probe("futex", (), feeder_busy=False), OTHER),
        (Probe("read", (FD_OTHER,)), OTHER),
        (Probe("clock_nanosleep"), OTHER),
        (Probe("syscall -1"), OTHER),
    ],
)
def test_classify(probe: Probe, expected: str) -> None:
    assert classify(probe) == expected


# -- shares -----------------------------------------------------------------------------


def window(run_s: float, wait_s: float, seconds: float = 1.0, **probes: int) -> LoopWindow:
    return LoopWindow(1, 1, seconds, int(run_s * 1e9), int(wait_s * 1e9), probes)


def test_schedstat_gives_on_cpu_and_cpu_wait_and_probes_split_the_rest() -> None:
    b = breakdown(window(0.2, 0.1, data_wait=30, other=10, running=5), gpu_busy=0.3)
    assert b is not None
    assert b.shares[ON_CPU] == pytest.approx(0.2)
    assert b.shares[CPU_WAIT] == pytest.approx(0.1)
    assert b.shares[DATA_WAIT] == pytest.approx(0.7 * 0.75)
    assert b.shares[OTHER] == pytest.approx(0.7 * 0.25)
    assert b.largest == DATA_WAIT and b.blocked_split
    assert describe(b) == "GPU busy 30%; loop: data 53%, CPU 20%, other 18%, waiting for a CPU 10%"


def test_no_blocked_probe_puts_the_blocked_time_in_other_and_says_why() -> None:
    unreadable = LoopWindow(1, 1, 1.0, int(0.3e9), 0, {UNKNOWN: 20}, syscall_readable=False)
    b = breakdown(unreadable, None)
    assert b is not None and not b.blocked_split
    assert b.shares[OTHER] == pytest.approx(0.7)
    assert b.unavailable is not None and "not readable" in b.unavailable
    assert breakdown(LoopWindow(1, 1, 1.0, None, None), None) is None


def test_spin_is_inferred_only_when_the_gpu_is_saturated() -> None:
    spinning = window(0.95, 0.01, running=20)
    busy = breakdown(spinning, gpu_busy=0.97)
    assert busy is not None
    assert busy.largest == GPU_WAIT and busy.spin_inferred == pytest.approx(0.95)
    idle = breakdown(spinning, gpu_busy=0.4)
    assert idle is not None
    assert idle.largest == ON_CPU and idle.spin_inferred == 0


def test_a_stack_sampler_splits_on_cpu_time_instead() -> None:
    measured = LoopWindow(1, 1, 1.0, int(0.8e9), 0, {RUNNING: 16}, spin_probes=12, stack_probes=16)
    b = breakdown(measured, gpu_busy=0.97)
    assert b is not None
    assert b.shares[GPU_WAIT] == pytest.approx(0.6) and b.shares[ON_CPU] == pytest.approx(0.2)
    assert b.spin_inferred == 0


@given(
    run=st.integers(0, 4 * 10**9),
    wait=st.integers(0, 4 * 10**9),
    seconds=st.floats(0.001, 10),
    counts=st.dictionaries(st.sampled_from([*BLOCKED_SHARES, RUNNING, UNKNOWN]), st.integers(0, 1000)),
    gpu=st.none() | st.floats(0, 1),
    stack=st.none() | st.tuples(st.integers(0, 100), st.integers(0, 100)),
)
def test_shares_are_never_negative_and_sum_to_one(
    run: int, wait: int, seconds: float, counts: dict[str, int], gpu: float | None, stack: tuple[int, int] | None
) -> None:
    spin, probed = stack if stack else (None, None)
    b = breakdown(LoopWindow(1, 1, seconds, run, wait, counts, spin_probes=spin, stack_probes=probed), gpu)
    assert b is not None
    assert all(b.shares[name] >= -1e-12 for name in SHARES)
    assert sum(b.shares.values()) == pytest.approx(1.0)
    assert set(b.to_json()) >= set(SHARES)


# -- the rules --------------------------------------------------------------------------


def shares(gpu: float | None, **values: float) -> LoopBreakdown:
    run = values.get(ON_CPU, 0.0)
    wait = values.get(CPU_WAIT, 0.0)
    blocked = {k: round(v * 1000) for k, v in values.items() if k in BLOCKED_SHARES}
    b = breakdown(window(run, wait, **blocked), gpu)
    assert b is not None
    return b


def workers(count: int, cpus: float, wait_ratio: float, free: float | None, domain: int = 8) -> WorkerStats:
    run = int(cpus * 1e9)
    wait = int(run * wait_ratio / (1 - wait_ratio)) if wait_ratio < 1 else run
    return WorkerStats(count, run, wait, domain, free)


def test_input_bound_positive_and_its_advice() -> None:
    b = shares(0.2, on_cpu=0.1, data_wait=0.9)
    assert verdict(b) == "input_bound"
    [f] = evaluate_loop(b, workers(2, 1.9, 0.02, free=5.0))
    assert (f.code, f.severity, f.pid) == ("INPUT_BOUND", Severity.BAD, 1)
    # The advice is evidence: ``Finding.suggestion`` is a core set (pin, the monitor and diagnose read its CPUs).
    assert f.evidence["advice"] == {"action": "add_workers", "workers": 7} and f.suggestion is None
    assert "GPU is busy only 20%" in f.message and "data 90%" in f.evidence["line"]


def test_input_bound_negative_when_the_gpu_is_busy() -> None:
    b = shares(0.95, on_cpu=0.1, gpu_wait=0.5, data_wait=0.4)
    assert evaluate_loop(b, workers(2, 1.9, 0.02, free=5.0)) == []


@pytest.mark.parametrize(
    ("stats", "action"),
    [
        (None, "use_workers"),
        (workers(0, 0, 0, 4.0), "use_workers"),
        (workers(2, 1.9, 0.02, free=0.2), "more_cpus"),
        (workers(2, 1.0, 0.5, free=3.0), "move_neighbours"),
        (workers(2, 1.0, 0.5, free=0.1), "more_cpus"),
        (workers(4, 0.4, 0.01, free=5.0), "check_pipeline"),
        (workers(2, 1.9, 0.02, free=None), "add_workers"),
    ],
)
def test_input_advice_follows_what_the_workers_did(stats: WorkerStats | None, action: str) -> None:
    assert input_advice(stats, 1.0, 0.8, DEFAULT_LOOP_THRESHOLDS)["action"] == action


def test_loop_bound_positive_and_negative() -> None:
    b = shares(0.3, on_cpu=0.85, cpu_wait=0.05, other=0.1)
    [f] = evaluate_loop(b, None)
    assert (f.code, f.severity) == ("LOOP_BOUND", Severity.WARN)
    assert evaluate_loop(shares(0.97, on_cpu=0.95, other=0.05), None) == []


def test_gpu_bound_is_healthy() -> None:
    b = shares(0.99, on_cpu=0.05, gpu_wait=0.95)
    assert verdict(b) == "gpu_bound"
    assert evaluate_loop(b, workers(4, 1.0, 0.0, 2.0)) == []


def test_a_half_busy_gpu_is_no_finding() -> None:
    b = shares(0.6, on_cpu=0.9, other=0.1)
    assert verdict(b) == "mixed" and evaluate_loop(b, None) == []
