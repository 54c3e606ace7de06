"""The loop probe's thread: it probes while it has loops to probe, sleeps without waking
while it has none, and a stop ends it at once either way."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import cast

from affmon.collect.loop import LoopSampler, LoopWatcher
from affmon.collect.procfs import parse_status
from tests.helpers.export import wait_for


class Counting:
    """A stand-in for a ``LoopSampler``: counts its probes; ``fail`` makes them raise."""

    def __init__(self, pid: int = 1, fail: bool = False) -> None:
        self.pid = pid
        self.fail = fail
        self.probes = 0

    def probe(self) -> str:
        self.probes += 1
        if self.fail:
            raise OSError("the file went away in an unexpected way")
        return "other"


def sampler(fake: Counting) -> LoopSampler:
    return cast("LoopSampler", fake)


def probe_thread() -> threading.Thread:
    (found,) = [t for t in threading.enumerate() if t.name == "affmon-loop"]
    return found


def wakes(thread: threading.Thread) -> int:
    """The thread's voluntary context switches: one each time it slept and was woken."""
    assert thread.native_id is not None
    status = parse_status(Path(f"/proc/self/task/{thread.native_id}/status").read_text())
    assert status.voluntary_switches is not None
    return status.voluntary_switches


def test_with_no_loop_to_probe_the_thread_sleeps_until_it_is_given_one() -> None:
    fake = Counting()
    watcher = LoopWatcher([sampler(fake)], rate_hz=50, seed=1)
    watcher.start()
    try:
        wait_for(lambda: fake.probes >= 5, 10.0, "the first probes")
        watcher.set_samplers([])
        thread = probe_thread()
        time.sleep(0.1)  # a probe pass under way when it was told ends
        before, probes = wakes(thread), fake.probes
        time.sleep(1.0)  # 50 wakes at 50 Hz, had it gone on waking
        assert fake.probes == probes
        assert wakes(thread) - before <= 1
        watcher.set_samplers([sampler(fake)])
        wait_for(lambda: fake.probes >= probes + 5, 10.0, "probes again once given a loop")
    finally:
        watcher.stop()
    assert not watcher.running


def test_a_sampler_that_fails_is_dropped_and_the_thread_then_sleeps() -> None:
    fake = Counting(pid=4242, fail=True)
    watcher = LoopWatcher([sampler(fake)], rate_hz=50, seed=1)
    watcher.start()
    try:
        wait_for(lambda: 4242 in watcher.failed, 10.0, "the failing sampler dropped")
        assert fake.probes == 1 and watcher.samplers == []
        thread = probe_thread()
        before = wakes(thread)
        time.sleep(0.5)
        assert wakes(thread) - before <= 1
    finally:
        watcher.stop()
    assert not watcher.running


def test_a_stop_ends_a_sleeping_thread_at_once() -> None:
    watcher = LoopWatcher([], rate_hz=0.01, seed=1)  # a probe a hundred seconds apart, had it one
    watcher.start()
    started = time.monotonic()
    watcher.stop()
    assert not watcher.running
    assert time.monotonic() - started < 5.0
    watcher = LoopWatcher([sampler(Counting())], rate_hz=0.01, seed=1)
    watcher.start()
    started = time.monotonic()
    watcher.stop()
    assert not watcher.running
    assert time.monotonic() - started < 5.0
