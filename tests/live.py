"""Helpers for tests that spawn real processes with a known affinity."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

WORKLOAD = Path(__file__).parent / "workload.py"


@contextmanager
def workload(*args: str) -> Iterator[dict[str, Any]]:
    """Start ``workload.py`` with ``args``; yield its JSON line; kill it and its children."""
    proc = subprocess.Popen(
        [sys.executable, str(WORKLOAD), *args], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line:
            raise RuntimeError(f"workload {args} did not start (exit {proc.wait()})")
        yield json.loads(line)
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()


def usable_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))
