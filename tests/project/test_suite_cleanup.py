"""A test run ended by SIGTERM leaves nothing running: the suite's conftest turns the signal
into Ctrl-C's, so a test's ``finally`` stops what it started (here a process in a session
of its own, as the suite's CPU hogs are) before the runner exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.export import REPO

STARTS = """
import os, subprocess, sys, time

def test_starts_a_process_and_waits():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        with open(os.environ["CHILD_PID_FILE"], "w") as out:
            out.write(str(child.pid))
        time.sleep(600)
    finally:
        child.kill()
        child.wait()
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_run_ended_by_sigterm_stops_what_its_tests_started(tmp_path: Path) -> None:
    (tmp_path / "test_starts.py").write_text(STARTS)
    pid_file = tmp_path / "child.pid"
    runner = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=REPO,
        env={**os.environ, "CHILD_PID_FILE": str(pid_file), "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    child = None
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()):
            assert runner.poll() is None and time.monotonic() < deadline, "the test never started its process"
            time.sleep(0.05)
        child = int(pid_file.read_text())
        assert _alive(child)
        runner.send_signal(signal.SIGTERM)
        out, _ = runner.communicate(timeout=60)
        assert runner.returncode != 0  # interrupted, not passed
        assert not _alive(child), out.decode(errors="replace")[-2000:]
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        if child is not None and _alive(child):
            os.kill(child, signal.SIGKILL)
