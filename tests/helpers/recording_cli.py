"""`affmon` run as a user runs it, and the one-line error (exit 2) it gives for bad input:
shared by the tests of what a recording keeps and of what a replay refuses."""

from __future__ import annotations

import subprocess
import sys


def affmon(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "affmon", *args], capture_output=True, text=True, timeout=timeout)


def one_line_error(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 2, (out.returncode, out.stderr)
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("affmon: "), out.stderr
    return lines[0]
