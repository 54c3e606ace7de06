"""A tmux server of the test's own (its own socket, so nothing else's sessions are touched),
driven as a person would: keys in, the screen read back."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Tmux:
    def __init__(self, socket: str, session: str = "e2e", timeout_s: float = 30.0) -> None:
        self.socket = socket
        self.session = session
        self.timeout_s = timeout_s  # how long ``wait_for`` waits unless told

    def run(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=20).stdout

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", self.session)

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", self.session, *keys)

    def wait_for(self, found: Callable[[str], bool], what: str, timeout_s: float | None = None) -> str:
        """The screen once ``found`` accepts it, read every 0.2 s; fails after ``timeout_s``
        (``self.timeout_s``) with the last screen."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if found(screen):
                return screen
            time.sleep(0.2)
        raise AssertionError(f"waited {timeout_s:.0f} s for {what}; the screen was:\n{screen}")


@contextmanager
def tmux_server(name: str, session: str = "e2e", timeout_s: float = 30.0) -> Iterator[Tmux]:
    """A server named for the test and this process, killed after."""
    t = Tmux(f"affmon-{name}-{os.getpid()}-{time.monotonic_ns()}", session, timeout_s)
    try:
        yield t
    finally:
        t.run("kill-server")
