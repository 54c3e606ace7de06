"""A terminal driver whose input thread sleeps until there is input.

Textual's ``LinuxDriver`` reads the terminal on a thread that wakes ten times a second
(``select`` with a 0.1 s timeout) for two things: to give a lone Escape its key once the
parser's wait for the rest of an escape sequence is over, and to notice its own exit. At
rest that thread is a fixed cost of every Textual app: 1.5-1.8 ms of CPU a second on the
2-core VM, as much as htop spends on a whole refresh (docs/measurements.md).

``QuietLinuxDriver`` waits on the terminal with no timeout while the parser has nothing
pending, and until the parser's own deadline while it has (an Escape pressed alone gets
its key as soon as before). Its exit event also writes to a pipe the thread waits on, so
a stop (quit, suspend, a dialog's external command) still wakes it at once.

A terminal that hangs up ends the monitor, whatever moment of its start it goes at: a
terminal that reads as ended (or fails, EIO) stops the input thread, which sends the
monitor SIGHUP, as the kernel does on a hang-up; writes to it are dropped (``HungUpTolerant``:
Textual's writer thread died on the first, and the exit waited on its full queue); and the
SIGCONT that follows a hang-up is not taken for a resume after Ctrl-Z. Everything else is
Textual's: what is read goes to the same parser and the same ``process_message``.

``driver_class()`` gives this driver where Textual would use its own ``LinuxDriver`` and
the parser has the deadline this relies on; otherwise (another platform, a driver chosen
by ``TEXTUAL_DRIVER``, a Textual without that attribute) Textual's choice stands.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import termios
import threading
from codecs import getincrementaldecoder
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from textual._parser import ParseError
from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver

if TYPE_CHECKING:
    from affmon.tui.first_frame import EarlyScreen

ALT_SCREEN = "\x1b[?1049h"  # what LinuxDriver writes to switch to the alternate screen


class _WakingEvent(threading.Event):
    """An event that also writes a byte to ``wake_fd`` when it is set."""

    def __init__(self, wake_fd: int) -> None:
        super().__init__()
        self._wake_fd = wake_fd

    def set(self) -> None:
        super().set()
        # full (already woken) or closed (the driver is gone): nothing waits on it
        with contextlib.suppress(OSError):
            os.write(self._wake_fd, b"\0")


def parser_deadline(parser: object) -> float | None:
    """When the parser's wait for the rest of a sequence ends (Textual's clock), or None
    when it waits for nothing."""
    deadline = getattr(parser, "_timeout_time", None)
    return deadline if isinstance(deadline, float | int) else None


def select_timeout(deadline: float | None, now: float) -> float | None:
    """How long the input thread may sleep: until input (None) or until the deadline."""
    return None if deadline is None else max(0.0, deadline - now)


class HungUpTolerant:
    """The terminal file Textual's writer thread writes to, made to outlive a hang-up: a
    write or flush that fails (EIO once the terminal is gone) is dropped, and ``gone`` is
    called, once. Textual's writer thread died on the first failed write; its queue of 30
    filled, the next write blocked for good, and with it the monitor's exit: an orphan,
    holding its memory and its loop probes. Everything else is the file's."""

    def __init__(self, file: Any, gone: Callable[[], None]) -> None:
        self._file = file
        self._gone = gone
        self.hung_up = False

    def _hang_up(self) -> None:
        if not self.hung_up:
            self.hung_up = True
            self._gone()

    def write(self, text: str) -> int:
        if not self.hung_up:
            try:
                return int(self._file.write(text))
            except OSError:
                self._hang_up()
        return len(text)

    def flush(self) -> None:
        if not self.hung_up:
            try:
                self._file.flush()
            except OSError:
                self._hang_up()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


def terminal_alive(fd: int) -> bool:
    """Whether ``fd`` is a terminal that has not hung up (its settings can be read)."""
    try:
        termios.tcgetattr(fd)
    except (termios.error, OSError):
        return False
    return True


class QuietLinuxDriver(LinuxDriver):
    early: ClassVar[EarlyScreen | None] = None  # the first frame's screen, taken over at start
    _skip_alt_screen = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.exit_event = _WakingEvent(self._wake_write)
        self.input_wakeups = 0  # times the input thread woke (a figure for tests)
        self._terminal = HungUpTolerant(self._file, self.terminal_gone)
        self._file = self._terminal  # type: ignore[assignment]  # a file to Textual: what it uses, delegated

    def _sigcont_application(self, *args: Any) -> None:
        """SIGCONT: a resume after Ctrl-Z enters application mode again, but not on a
        terminal that hung up (the kernel sends SIGCONT right after a hang-up's SIGHUP; a
        driver made after the monitor's SIGHUP handler ran has this handler in place again)."""
        if self._terminal.hung_up or not terminal_alive(self.fileno):
            return
        super()._sigcont_application(*args)

    def start_application_mode(self) -> None:
        # The first frame put the terminal on the alternate screen already (the shell's
        # cursor saved): switching again would save the alternate screen's cursor over it.
        self._skip_alt_screen = self.early is not None and self.early.hand_over()
        super().start_application_mode()  # type: ignore[no-untyped-call]

    def write(self, data: str) -> None:
        if self._skip_alt_screen and data == ALT_SCREEN:
            self._skip_alt_screen = False
            return
        super().write(data)

    def close(self) -> None:
        super().close()
        for fd in (self._wake_read, self._wake_write):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._wake_read = self._wake_write = -1

    def terminal_gone(self) -> None:
        """The terminal read end of file or failed (EIO): it hung up. A hang-up sends the
        session SIGHUP, which ends the monitor; this sends it too, for a terminal that hung
        up without one (the monitor not its session's leader, the signal ignored or blocked
        when it came). Without it the thread would wake at once, forever: the terminal
        reads as ready and empty once it is gone, and the monitor spun a CPU, drawing on
        nothing."""
        os.kill(os.getpid(), signal.SIGHUP)

    def _drain_wake(self) -> None:
        with contextlib.suppress(OSError):  # empty
            while os.read(self._wake_read, 64):
                pass

    def run_input_thread(self) -> None:
        """Textual's input loop, sleeping until input, the parser's deadline or a stop."""
        fileno = self.fileno
        selector = selectors.SelectSelector()
        selector.register(fileno, selectors.EVENT_READ)
        selector.register(self._wake_read, selectors.EVENT_READ)
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode

        def process(events: list[tuple[selectors.SelectorKey, int]], final: bool = False) -> bool:
            """Feed what the terminal has to the parser; False once the terminal is gone."""
            for key, mask in events:
                if key.fd == fileno and mask & selectors.EVENT_READ:
                    try:
                        raw = os.read(fileno, 1024 * 4)
                    except OSError:  # EIO: the terminal hung up
                        raw = b""
                    if not raw:
                        return False
                    for event in parser.feed(decode(raw, final=final)):
                        self.process_message(event)
            for event in parser.tick():
                self.process_message(event)
            return True

        try:
            while not self.exit_event.is_set():
                events = selector.select(select_timeout(parser_deadline(parser), get_time()))
                self.input_wakeups += 1
                self._drain_wake()
                if not process(events):
                    self.terminal_gone()
                    return
            selector.unregister(fileno)
            process(selector.select(0.1), final=True)
        finally:
            selector.close()
            try:
                for _ in parser.feed(""):
                    pass
            except (EOFError, ParseError):
                pass


def driver_class(chosen: type[Driver], early: EarlyScreen | None = None) -> type[Driver]:
    """``QuietLinuxDriver`` in place of Textual's ``LinuxDriver``; any other choice as it
    is. ``early``: the first frame's screen, which the quiet driver takes over as it is;
    another driver switches screens itself, so the first frame's screen is closed first."""
    if chosen is not LinuxDriver or not hasattr(os, "pipe2") or not hasattr(XTermParser(), "_timeout_time"):
        if early is not None:
            early.close()
        return chosen
    if early is None:
        return QuietLinuxDriver
    return type("QuietLinuxDriver", (QuietLinuxDriver,), {"early": early})
