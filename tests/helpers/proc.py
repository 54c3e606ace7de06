"""What the kernel says of live processes, read from ``/proc`` and the affinity system call
independently of affmon's readers: each thread's mask, start times, and a process of
sleeping threads. Also imported by the scenario scripts that run inside a private PID
namespace (they put the repository on ``sys.path`` first)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def thread_masks(*pids: int, skip_exited: bool = False) -> dict[int, frozenset[int]]:
    """tid -> the mask the kernel reports, for every thread of ``pids``. ``skip_exited``: a
    thread that exits while it is read, or a process whose threads cannot be listed (gone),
    has no entry; without it the read fails (``ProcessLookupError``, ``FileNotFoundError``)."""
    found = {}
    for pid in pids:
        try:
            names = os.listdir(f"/proc/{pid}/task")
        except OSError:
            if skip_exited:
                continue
            raise
        for name in names:
            try:
                found[int(name)] = frozenset(os.sched_getaffinity(int(name)))
            except ProcessLookupError:
                if not skip_exited:
                    raise
    return found


def distinct_masks(pid: int) -> list[list[int]]:
    """The different masks of ``pid``'s threads (those alive), each sorted, in order."""
    return sorted(sorted(m) for m in set(thread_masks(pid, skip_exited=True).values()))


def start_ticks(pid: int, tid: int | None = None) -> int:
    """The start time of process ``pid`` (or of its thread ``tid``) in clock ticks since
    boot: field 22 of ``/proc/PID/stat``, counted after the command name's last ``)``."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    return int(Path(path).read_text().rpartition(")")[2].split()[19])


def sleepers(count: int) -> subprocess.Popen[str]:
    """A process of ``count`` threads that wait, on every CPU this one may use."""
    script = (
        "import sys, threading\n"
        "stop = threading.Event()\n"
        f"for _ in range({count}): threading.Thread(target=stop.wait, daemon=True).start()\n"
        "print('ready', flush=True)\n"
        "sys.stdin.read()\n"
    )
    job = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert job.stdout is not None and job.stdout.readline() == "ready\n"
    return job
