"""A terminal that hangs up ends the monitor, at whatever moment of its start it goes.

On a hang-up (an ssh connection that drops, a tmux pane closed) the kernel sends the
terminal's session SIGHUP and then SIGCONT. Textual's driver takes SIGCONT for a resume
after Ctrl-Z and enters application mode again: on the dead terminal that started a second
writer thread, which died on its first write; its queue filled, and the monitor's exit
waited on it forever, an orphan holding its memory and its loop probe (found beside
benchmark runs, whose tmux closed panes at the first frame). Here the monitor runs on a
pseudo-terminal this test holds; at moments spread over the monitor's start the test sends
it SIGHUP (as tmux does to a pane's process) and closes the terminal (a real hang-up: the
kernel sends SIGHUP and SIGCONT), and each time the monitor must be gone within the
deadline. Before the fix the hang-up 0.2 s after the first frame left it running, on this
two-core VM, in each of two runs. Started with SIGHUP ignored (the suite run under
``nohup``), a hang-up during its start left it running too, its input thread at 100% of a
core: the dead terminal reads as ready and empty. And once in a full run beside CPU hogs, at
0.2 s after the first frame, not reproduced in 80 tries after: the likeliest path a hang-up
between the monitor's SIGHUP handler and Textual's driver, whose SIGCONT handler, made after
it, takes the hang-up's SIGCONT for a resume on the dead terminal; the driver now refuses
that resume and drops writes that fail.
"""

from __future__ import annotations

import fcntl
import os
import pty
import signal
import struct
import sys
import termios
import time

import pytest

from tests.helpers.export import REPO
from tests.helpers.pty_read import read_pty

DEADLINE_S = 20.0  # a loaded two-core machine takes seconds to start the monitor


def _gone(pid: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return True
        time.sleep(0.05)
    return False


MOMENTS = [0.0, 0.1, 0.2, 0.3, 0.45, 0.6, 0.8, 1.1, 1.5]


@pytest.mark.parametrize(
    ("after_s", "ignored"), [(s, False) for s in MOMENTS] + [(s, True) for s in (0.0, 0.3, 1.1, 2.5)]
)
def test_the_monitor_ends_when_its_terminal_hangs_up(after_s: float, ignored: bool) -> None:
    """``ignored``: started with SIGHUP ignored, as under ``nohup`` (or a test runner started
    so): the monitor kept running then, its input thread spinning a CPU on the dead terminal."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    pid, fd = pty.fork()
    if pid == 0:  # the child: session leader, the pty its controlling terminal
        os.chdir(REPO)
        # as the test's own disposition may be (inherited across exec): set either way
        signal.signal(signal.SIGHUP, signal.SIG_IGN if ignored else signal.SIG_DFL)
        os.execve(sys.executable, [sys.executable, "-m", "affmon", "--readonly", "--interval", "1"], env)
    try:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 140, 0, 0))
        # The first frame (plain text, before Textual loads) names the machine's CPUs.
        first = read_pty(fd, time.monotonic() + DEADLINE_S, b"CPUs")
        assert b"CPUs" in first
        read_pty(fd, time.monotonic() + after_s)
    finally:
        os.kill(pid, 1)  # what tmux sends a pane's process when it closes it, before the hang-up
        os.close(fd)  # the hang-up: the kernel sends the session SIGHUP, then SIGCONT
    if not _gone(pid, time.monotonic() + DEADLINE_S):
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail(f"the monitor was still running {DEADLINE_S:.0f} s after its terminal hung up")
