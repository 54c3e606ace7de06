"""The ticker thread: one tick at a time, never before it is due, never while the last
one's end is unacknowledged; a failing tick hands over its error and the next still runs."""

from __future__ import annotations

import queue
import threading
import time

import pytest

from affmon.tui.ticker import Ticker


class Harness:
    def __init__(self, fail: bool = False) -> None:
        self.ran: list[float] = []
        self.ended: queue.Queue[tuple[int | None, BaseException | None]] = queue.Queue()
        self.running = threading.Event()
        self.release = threading.Event()
        self.release.set()
        self.fail = fail
        self.ticker = Ticker(self.run, lambda result, error: self.ended.put((result, error)))

    def run(self) -> int:
        self.ran.append(time.monotonic())
        self.running.set()
        self.release.wait(10)
        if self.fail:
            raise OSError("proc went away")
        return len(self.ran)

    def end(self) -> BaseException | None:
        """The error the last tick ended with (None: it went well, and handed over its result)."""
        result, error = self.ended.get(timeout=10)
        assert (result is None) == (error is not None)  # a result or an error, never both
        if error is None:
            assert result == len(self.ran)
        return error


@pytest.fixture
def harness():
    h = Harness()
    yield h
    h.release.set()
    h.ticker.close()


def test_each_tick_hands_over_its_own_result_with_its_end(harness):
    harness.ticker.now()
    assert harness.ended.get(timeout=10) == (1, None)
    harness.ticker.acknowledge()
    harness.ticker.now()
    assert harness.ended.get(timeout=10) == (2, None)


def test_now_runs_one_tick_and_refuses_another_until_the_end_is_acknowledged(harness):
    assert not harness.ticker.busy
    harness.release.clear()
    assert harness.ticker.now()
    assert harness.ticker.busy  # asked for: busy before the thread even started it
    assert harness.running.wait(10)
    assert not harness.ticker.now()  # running
    harness.release.set()
    assert harness.end() is None
    assert harness.ticker.busy and not harness.ticker.now()  # ended, not acknowledged
    harness.ticker.acknowledge()
    assert not harness.ticker.busy
    assert harness.ticker.now()
    assert harness.end() is None
    assert len(harness.ran) == 2


def test_a_tick_after_a_delay_is_never_early_and_waits_for_the_acknowledgement(harness):
    harness.ticker.now()
    harness.end()
    asked = time.monotonic()
    harness.ticker.after(0.2)  # due while the last end is still unacknowledged
    time.sleep(0.4)
    assert len(harness.ran) == 1  # not started: the app has not handled the last one
    harness.ticker.acknowledge()
    harness.end()
    assert len(harness.ran) == 2 and harness.ran[1] - asked >= 0.2


def test_cancel_drops_the_due_tick_and_says_when_one_is_running(harness):
    harness.ticker.after(0.3)
    assert harness.ticker.cancel() is False  # nothing running
    time.sleep(0.5)
    assert harness.ran == []
    harness.release.clear()
    harness.ticker.now()
    assert harness.running.wait(10)
    assert harness.ticker.cancel() is True  # it runs on and lands as usual
    harness.release.set()
    assert harness.end() is None


def test_a_failing_tick_hands_over_its_error_and_the_next_one_runs():
    h = Harness(fail=True)
    try:
        h.ticker.now()
        error = h.end()
        assert isinstance(error, OSError) and "proc went away" in str(error)
        h.ticker.acknowledge()
        h.fail = False
        h.ticker.now()
        assert h.end() is None and len(h.ran) == 2
    finally:
        h.ticker.close()


def test_close_stops_the_thread_and_nothing_starts_after_it(harness):
    harness.ticker.now()
    harness.end()
    harness.ticker.acknowledge()
    thread = harness.ticker._thread
    harness.ticker.close()
    assert thread is not None and not thread.is_alive()
    assert not harness.ticker.now()
    harness.ticker.after(0.0)
    time.sleep(0.2)
    assert len(harness.ran) == 1
