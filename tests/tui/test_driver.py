"""The terminal driver (``textual_fast.QuietLinuxDriver``, the ``driver`` override): its
input thread asleep while nothing is typed, awake for a key, for an Escape pressed alone
(once the parser's wait for the rest of a sequence is over) and for a stop; a terminal
that hangs up ends the monitor. Against a real pseudo-terminal."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import signal
import threading
import time
import tty

import pytest
from textual import events
from textual.drivers.linux_driver import LinuxDriver

from affmon.tui import textual_fast
from affmon.tui.first_frame import EarlyScreen
from affmon.tui.textual_fast import HungUpTolerant, QuietLinuxDriver, driver_class, select_timeout, terminal_alive
from tests.tui.helpers import list_app


class StubApp:
    def __init__(self) -> None:
        self.received: list[object] = []

    async def _post_message(self, message: object) -> bool:
        self.received.append(message)
        return True


def keys(app: StubApp) -> list[str]:
    return [m.key for m in app.received if isinstance(m, events.Key)]


async def wait_for(predicate, seconds: float = 5.0) -> float:
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < seconds, "timed out"
        await asyncio.sleep(0.01)
    return time.monotonic() - start


@pytest.fixture
def keep_signals():
    saved = {s: signal.getsignal(s) for s in (signal.SIGTSTP, signal.SIGCONT, signal.SIGHUP)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


async def test_the_input_thread_sleeps_until_a_key_and_wakes_for_escape_and_for_a_stop(keep_signals):
    app = StubApp()
    master, slave = pty.openpty()
    tty.setraw(slave)
    driver = QuietLinuxDriver(app)  # type: ignore[arg-type]
    driver.fileno = slave
    thread = threading.Thread(target=driver.run_input_thread)
    thread.start()
    try:
        await asyncio.sleep(1.0)
        assert driver.input_wakeups == 0  # Textual's own driver wakes ten times a second

        os.write(master, b"q")
        await wait_for(lambda: "q" in keys(app))
        woken = driver.input_wakeups
        assert 1 <= woken <= 2

        os.write(master, b"\x1b")  # Escape alone: a key once the wait for a sequence ends
        took = await wait_for(lambda: "escape" in keys(app))
        assert took < 1.0
        await asyncio.sleep(0.5)
        assert driver.input_wakeups <= woken + 3  # woke for the byte and the deadline, then slept

        driver.exit_event.set()
        thread.join(timeout=2.0)
        assert not thread.is_alive()  # the stop wakes it at once (no timeout to wait out)
    finally:
        driver.exit_event.set()
        thread.join(timeout=2.0)
        driver.close()
        os.close(master)
        os.close(slave)


async def test_a_terminal_that_hangs_up_stops_the_input_thread_and_ends_the_monitor(keep_signals):
    """The terminal's other end closed: its reads fail (EIO), or read as ended after a
    hang-up, and select calls it ready each time. The thread used to read and go round at
    once, forever, a CPU spent on a terminal no one has; it stops and says so."""

    master, slave = pty.openpty()
    tty.setraw(slave)
    driver = QuietLinuxDriver(StubApp())  # type: ignore[arg-type]
    driver.fileno = slave
    gone: list[float] = []
    driver.terminal_gone = lambda: gone.append(time.monotonic())  # type: ignore[method-assign]
    thread = threading.Thread(target=driver.run_input_thread)
    thread.start()
    try:
        await asyncio.sleep(0.3)
        assert driver.input_wakeups == 0 and not gone
        os.close(master)
        master = -1
        await wait_for(lambda: not thread.is_alive())  # nothing more will come from there
        assert len(gone) == 1 and driver.input_wakeups == 1  # woke once, for the hang-up
    finally:
        driver.exit_event.set()
        thread.join(timeout=2.0)
        driver.close()
        if master >= 0:
            os.close(master)
        os.close(slave)


async def test_a_terminal_gone_sends_the_monitor_the_signal_a_hang_up_sends(keep_signals):
    got: list[int] = []
    signal.signal(signal.SIGHUP, lambda signum, frame: got.append(signum))

    driver = QuietLinuxDriver(StubApp())  # type: ignore[arg-type]
    try:
        driver.terminal_gone()
        await wait_for(lambda: bool(got))
        assert got == [signal.SIGHUP]
    finally:
        driver.close()


def test_writes_to_a_terminal_that_hung_up_are_dropped_and_reported_once() -> None:
    """Textual's writer thread writes through this: a failed write used to kill the thread,
    and the monitor's exit then waited on its full queue forever."""
    master, slave = pty.openpty()
    gone: list[bool] = []
    with open(slave, "w", closefd=True) as file:
        out = HungUpTolerant(file, lambda: gone.append(True))
        assert out.write("drawn") == 5
        out.flush()
        assert os.read(master, 64) == b"drawn" and not gone
        os.close(master)  # the hang-up
        assert not terminal_alive(slave)
        out.write("lost")
        out.flush()  # EIO: dropped
        out.write("and more")
        out.flush()
        assert gone == [True] and out.hung_up
        assert out.fileno() == slave  # the rest is the file's
        with contextlib.suppress(OSError):  # what is still buffered cannot be written on close
            file.close()


async def test_sigcont_resumes_only_on_a_terminal_that_is_still_there(keep_signals):
    """The kernel sends SIGCONT right after a hang-up's SIGHUP; taken for a resume after
    Ctrl-Z, it entered application mode again on the dead terminal."""

    master, slave = pty.openpty()
    driver = QuietLinuxDriver(StubApp())  # type: ignore[arg-type]
    resumed: list[bool] = []
    driver.resume_application_mode = lambda: resumed.append(True)  # type: ignore[method-assign]
    driver.fileno = slave
    try:
        driver._sigcont_application()
        assert resumed == [True]  # a resume after Ctrl-Z, as Textual does it
        os.close(master)
        master = -1
        driver._sigcont_application()
        assert resumed == [True]  # hung up: nothing to resume on
    finally:
        driver.close()
        if master >= 0:
            os.close(master)
        os.close(slave)


def test_it_sleeps_until_the_parsers_deadline_or_until_input():
    assert select_timeout(None, 5.0) is None
    assert select_timeout(5.25, 5.0) == pytest.approx(0.25)
    assert select_timeout(4.0, 5.0) == 0.0  # past: look at once


def test_the_monitor_uses_it_where_textual_would_use_its_linux_driver():
    assert driver_class(LinuxDriver) is QuietLinuxDriver
    assert driver_class(QuietLinuxDriver) is QuietLinuxDriver  # any other choice stands
    assert list_app("clean", textual_overrides=[textual_fast.DRIVER]).get_driver_class() is QuietLinuxDriver
    # the override off: Textual's own
    assert driver_class(LinuxDriver, on=False) is LinuxDriver
    assert list_app("clean", textual_overrides=[textual_fast.TABLE]).get_driver_class() is LinuxDriver


def test_textuals_own_driver_gets_a_terminal_the_first_frame_has_put_back():
    """Textual's driver switches to the alternate screen itself: the first frame's screen
    is closed first (the quiet driver takes it over as it is)."""
    closed: list[bool] = []

    class Early(EarlyScreen):
        def close(self) -> None:
            closed.append(True)

    quiet = driver_class(LinuxDriver, Early(-1))
    assert issubclass(quiet, QuietLinuxDriver) and quiet.early is not None and closed == []
    assert driver_class(LinuxDriver, Early(-1), on=False) is LinuxDriver and closed == [True]
