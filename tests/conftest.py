"""The whole suite: a SIGTERM (a timeout, a cancelled CI job) ends the run as Ctrl-C does,
so each test's cleanup still runs. Without it the runner died at once, and what its tests
had started in sessions of their own (CPU hogs, monitors), which a kill of the runner's
process group does not reach, kept running on a shared machine."""

from __future__ import annotations

import signal
from types import FrameType

import pytest


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:  # a handler of the caller's stands
        signal.signal(signal.SIGTERM, _interrupt)
