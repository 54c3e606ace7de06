"""What a long journal costs a pin and a view: a journal holding HISTORY applied pins of a
THREADS-thread job that has since exited (the file a busy node collects), then
``affmon pin`` of a one-thread process, twice, and a view's per-tick read of the pins in
force (``PinnedMasks``), all in one run.

    python -m bench.cost.journal_cost [--history 100] [--threads 10000]

Prints the journal's size before and after, each pin's wall time and peak RSS (the
``affmon pin`` process, from ``wait4``), and the view's cost per tick while the file is
unchanged and when it changed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from affmon.actions.journal import Journal, JournalEntry, PinnedMasks, ThreadRecord, new_entry_id


def history(count: int, threads: int) -> list[JournalEntry]:
    """Applied pins of processes that no longer exist (start time 1: long gone)."""
    entries = []
    for i in range(count):
        pid = 4_000_000 + i
        records = tuple(ThreadRecord(pid, pid + t, 1, frozenset({0, 1}), "pin") for t in range(threads))
        entries.append(
            JournalEntry(new_entry_id(), time.time(), pid, 1, frozenset({0}), "applied", records, since_ticks=1)
        )
    return entries


def timed_pin(pid: int, cpu: int, env: dict[str, str]) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MiB, exit status) of ``affmon pin PID --cpus CPU``."""
    started = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-m", "affmon", "pin", str(pid), "--cpus", str(cpu)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - started
    return wall, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, default=100, help="old applied entries in the journal")
    parser.add_argument("--threads", type=int, default=10_000, help="threads recorded in each")
    parser.add_argument("--write", metavar="PATH", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write:
        journal = Journal(args.write)
        with journal.locked():
            journal._write(history(args.history, args.threads))  # as an older affmon left it
        return 0
    state = Path(tempfile.mkdtemp(prefix="affmon-journal-cost-"))
    path = state / "affmon" / "journal.jsonl"
    # Written by a child: a parent grown by a million records would hand its peak RSS to
    # every child it forks (ru_maxrss counts the pages before exec).
    subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.cost.journal_cost",
            "--write",
            str(path),
            "--history",
            str(args.history),
            "--threads",
            str(args.threads),
        ],
        check=True,
        cwd=Path(__file__).resolve().parent.parent.parent,
    )
    before = path.stat().st_size
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    cpu = min(os.sched_getaffinity(0))
    try:
        print(f"journal: {args.history} applied pins of an exited {args.threads}-thread job, {before / 2**20:.1f} MiB")
        for n in (1, 2):
            wall, rss, status = timed_pin(target.pid, cpu, env)
            size = path.stat().st_size
            print(f"pin {n}: {wall:.2f} s, peak RSS {rss:.0f} MiB, exit {status}; journal now {size / 1024:.1f} KiB")
        watch = PinnedMasks(path)
        watch()
        ticks = 1000
        started = time.perf_counter()
        for _ in range(ticks):
            watch()
        unchanged_us = (time.perf_counter() - started) / ticks * 1e6
        os.utime(path)  # a change: the next tick reads it again
        started = time.perf_counter()
        watch()
        changed_us = (time.perf_counter() - started) * 1e6
        print(f"view, per tick: {unchanged_us:.1f} us while unchanged, {changed_us:.0f} us when changed")
    finally:
        target.kill()
        target.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
