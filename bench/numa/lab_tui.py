"""The monitor in the NUMA lab's guest: ``affmon --pid JOB`` in tmux, on a job whose threads
run on node 1 and whose memory sits on node 0; the screen once it shows the job's memory
per node (``python -m bench.numa.lab_checks tui`` runs it; ``tmux`` must be installed).

Returns the last screen's text and the seconds until each of: the first frame with the
job's row, the core map with both nodes, the detail pane's ``memory`` line, and the job's
REMOTE_MEMORY finding (it must hold for two intervals first).
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.numa.lab_jobs import JobSpec, numa_maps_bytes, runtime_file, start_job, stop_jobs

SOCKET = "numa-lab"


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", "-L", SOCKET, *args], capture_output=True, text=True, timeout=60).stdout


@contextlib.contextmanager
def _session(command: str, width: int, height: int) -> Iterator[None]:
    _tmux("new-session", "-d", "-s", "lab", "-x", str(width), "-y", str(height), command)
    try:
        yield
    finally:
        _tmux("kill-server")


def tui_part(workdir: Path, timeout_s: float = 300.0) -> dict[str, Any]:
    spec = JobSpec("lab-tui-job", frozenset({2, 3}), 320, memory_node=0, busy_cpus=(2,))
    job = start_job(spec, runtime_file(workdir))
    out: dict[str, Any] = {"pid": job.pid, "numa_maps": numa_maps_bytes(job.pid)}
    marks: dict[str, float] = {}
    screen = ""
    try:
        started = time.monotonic()
        with _session(f"affmon --pid {job.pid}", 160, 48):
            while time.monotonic() - started < timeout_s:
                screen = _tmux("capture-pane", "-p", "-t", "lab")
                now = round(time.monotonic() - started, 1)
                if str(job.pid) in screen:
                    marks.setdefault("job_row_s", now)
                if "node 0" in screen and "node 1" in screen:
                    marks.setdefault("both_nodes_s", now)
                if re.search(r"\bmemory node \d", screen):
                    marks.setdefault("memory_line_s", now)
                if "REMOTE" in screen:
                    marks.setdefault("remote_memory_s", now)
                if len(marks) == 4:
                    break
                time.sleep(1)
    finally:
        stop_jobs([job])
    out.update(marks)
    out["screen"] = screen
    return out


__all__ = ["tui_part"]
