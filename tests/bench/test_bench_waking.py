"""The cost benchmarks' workload (bench/workloads/waking.py) does what their figures claim: waking
threads are scheduled, sleeping ones never are, busy-ish threads use a share of a CPU, and
the population is split and named as said; and the benchmarks' arithmetic (refreshes
counted from screen captures, the affmon / ps ratio)."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from affmon.collect.selection import is_training_candidate
from bench.cost.sample_cost import Row as CostRow
from bench.cost.sample_cost import Timing
from bench.cost.sample_cost import table as cost_table
from bench.cost.tui_cost import Control, Tmux, affmon_clock, changes, htop_clock, quoted, refreshes
from bench.workloads.waking import Population, Shape, split, task_counters

WAKING = Path(__file__).resolve().parent.parent.parent / "bench" / "workloads" / "waking.py"


@contextmanager
def waking(*args: str) -> Iterator[dict[str, int]]:
    proc = subprocess.Popen([sys.executable, str(WAKING), *args, "--seconds", "120"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield json.loads(proc.stdout.readline())
    finally:
        proc.kill()
        proc.wait()


def tids(counters: dict[tuple[int, int], tuple[int, int]]) -> set[int]:
    return {tid for _, tid in counters}


@given(st.integers(1, 20_000), st.integers(1, 200))
def test_split_is_even_and_complete(threads: int, processes: int) -> None:
    if threads < processes:
        return
    parts = split(threads, processes)
    assert len(parts) == processes and sum(parts) == threads
    assert min(parts) >= 1 and max(parts) - min(parts) <= 1


def test_every_waking_thread_is_scheduled_again_and_again() -> None:
    with waking("--threads", "30", "--period", "0.2") as ready:
        pid = ready["pid"]
        assert ready["threads"] == 30
        first = task_counters([pid])
        assert len(first) == 30
        deadline = time.monotonic() + 60  # generous: a loaded machine delays wakes, it does not stop them
        while time.monotonic() < deadline:
            now = task_counters([pid])
            if all(now[k][1] - first[k][1] >= 3 for k in first):
                break
            time.sleep(0.2)
        assert {k: now[k][1] - first[k][1] for k in first if now[k][1] - first[k][1] < 3} == {}


def test_sleeping_threads_are_never_scheduled() -> None:
    with waking("--threads", "30", "--sleeping") as ready:
        pid = ready["pid"]
        # Released from the start barrier, each thread runs once more to reach its sleep.
        settled = task_counters([pid])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.5)
            again = task_counters([pid])
            if again == settled:
                break
            settled = again
        assert len(settled) == 30
        time.sleep(2)
        assert task_counters([pid]) == settled


def test_a_busy_ish_thread_uses_a_share_of_a_cpu_and_sleeps_the_rest() -> None:
    with waking("--threads", "4", "--busy-duty", "0.3", "--period", "0.2") as ready:
        pid = ready["pid"]
        time.sleep(0.5)
        before, t0 = task_counters([pid]), time.monotonic()
        time.sleep(3)
        after, seconds = task_counters([pid]), time.monotonic() - t0
    cpu_s = {tid: (after[(p, tid)][0] - before[(p, tid)][0]) / 1e9 for p, tid in before}
    busy = cpu_s.pop(pid)  # the main thread runs the first job: the busy-ish one
    assert len(cpu_s) == 3
    assert busy > 10 * statistics.median(cpu_s.values())
    assert busy < 0.8 * seconds  # it slept 70% of every 100 ms


def test_the_population_is_split_and_named_as_the_benchmarks_say() -> None:
    with Population(Shape(threads=21, processes=2, others=True), seconds=120) as population:
        assert population.training_pid is not None
        counts = [len(tids(task_counters([pid]))) for pid in population.pids]
        training_threads = len(tids(task_counters([population.training_pid])))
        names = {}
        for pid in population.all_pids():
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            argv = [a for a in Path(f"/proc/{pid}/cmdline").read_text().split("\0") if a]
            names[pid] = is_training_candidate(comm, argv), comm
    assert counts == [11, 10] and training_threads == 12
    assert [names[pid] for pid in population.pids] == [(False, "waker")] * 2  # sampled as others
    assert names[population.training_pid][0] is True  # watched
    assert all(proc.returncode is not None for proc in population.procs)  # killed and reaped on exit


def test_a_watched_population_is_python() -> None:
    with Population(Shape(threads=2, processes=1, others=False), seconds=120) as population:
        (pid,) = population.pids
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        argv = [a for a in Path(f"/proc/{pid}/cmdline").read_text().split("\0") if a]
        assert is_training_candidate(comm, argv)


AFFMON_SCREEN = (
    "\n affmon  │  vm  │  2 CPUs · 2 cores · 1 NUMA node · 0 GPUs  │  every 1 s  │  02:58:11  │  2,111 threads\n"
    "╭─ Processes ─ 12:00:00 ─╮\n"
)
HTOP_SCREEN = "  Mem[|||   280M/23.5G] Uptime: 01:38:31\n  Swp[   0K/0K]\n"


def test_clocks_are_read_from_each_tools_screen() -> None:
    assert affmon_clock(AFFMON_SCREEN) == "02:58:11"  # the header's, not a later line's
    assert affmon_clock("\n affmon  │  vm  │  no NVML (...); running CPU-only\n 12:00:00\n") is None
    assert htop_clock(HTOP_SCREEN) == "01:38:31"
    assert htop_clock("Uptime: 3 days, 01:38:31") == "3 days, 01:38:31"
    assert htop_clock("Load average: 1.82 1.61 1.80") is None


def test_refreshes_count_clock_changes_and_fall_back_to_screen_changes() -> None:
    assert changes(["a", "a", None, "b", "b", "c", None, "c"]) == 2  # an unreadable capture is no refresh
    assert changes([None, None]) == 0
    htop = [f"Uptime: 00:00:{s:02d} load {i}" for i, s in enumerate([1, 1, 1, 1, 2, 2, 2, 2, 3])]
    assert refreshes(htop, htop_clock) == (2, "clock")  # the load text changed every capture
    no_clock = ["head\nA", "head\nA", "head\nB", "head\nB", "head\nC", "head\nC"]
    assert refreshes(no_clock, affmon_clock) == (2, "screen")
    half_drawn = ["head\nA", "head\nA", "head\nAB", "head\nB", "head\nB", "head\nB", "head\nC"]
    assert refreshes(half_drawn, affmon_clock) == (1, "screen")  # AB: caught mid-draw; C: not yet seen twice


def test_the_cost_ratio_is_per_thread() -> None:
    affmon = Timing(cpu_s=(0.010, 0.012, 0.011), wall_s=(0.02, 0.02, 0.02), threads=(1000, 1000, 1000))
    ps = Timing(cpu_s=(0.040, 0.044, 0.042), wall_s=(0.05, 0.05, 0.05), threads=(2000, 2000, 2000))
    row = CostRow(Shape(2000, 10), affmon, ps, 0.1, 1000, "")
    lines = cost_table([row])
    assert lines[2].split()[:3] == ["2,000", "waking", "affmon"]
    assert lines[2].split()[-2:] == ["11.0", "20.0"]  # median ms / threads read, in us
    assert lines[4].split()[-2:] == ["0.52", "0.80"]  # 11.0 / 21.0 and 20.0 / 25.0


def test_the_first_frames_are_heard_as_each_pane_writes_and_read_on_one_client() -> None:
    """``tui_cost``'s control-mode client: a launched pane's output is heard when it is
    written (not before), its screen is read through the open client, and a word that
    tmux would split or expand is refused rather than passed on."""
    tmux = Tmux()
    try:
        control = Control(tmux)
        try:
            started = time.monotonic()
            pane = control.launch("first-test", 'sleep 0.3; echo "the frame"; sleep 30')
            for _ in range(5):  # windows made one after another: each answer is its own command's
                other = control.launch("first-other", "sleep 30")
                assert re.fullmatch(r"%\d+", other) and other != pane, other
                control.command(f"kill-window -t {other}")
            while pane not in control.wrote and time.monotonic() - started < 10:
                control.listen(0.1)
            heard = control.wrote.pop(pane) - started
            assert 0.3 <= heard < 10, heard  # the output, not the launch
            assert "the frame" in control.screen(pane)
            assert control.command("display-message -p -t " + pane + " '#{pane_width}x#{pane_height}'") == ["140x40"]
        finally:
            control.close()
    finally:
        tmux.close()
    with pytest.raises(ValueError):
        quoted("it's")
