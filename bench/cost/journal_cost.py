"""What a journal full of stacked pins costs a pin that has nothing to do with them.

    python -m bench.cost.journal_cost [--threads 10000] [--pins 20] [--repeat 3] [--skip-undo-all]

A job of ``--threads`` threads is pinned ``--pins`` times over, alternating between two
CPUs, never undone: the journal a busy node collects when a job is re-pinned through its
life. The journal's size after the job's first pin (one pin's entry) and after the last
is printed with their ratio. Then ``affmon pin`` of a one-thread process and ``affmon
undo`` of it, with an empty journal (a fresh state directory each time) and with the
stacked pins' journal, one after the other, ``--repeat`` times (so that both see the same
machine: a busy one changes from minute to minute). Each figure is the median of its
runs: wall time and peak RSS (``ru_maxrss`` of the ``affmon`` process, from ``wait4``),
the stacked journal's next to the empty one's with the ratio.
Then a view's per-tick read of the pins in force (``PinnedMasks``), while the file is
unchanged and when it changed, and, unless ``--skip-undo-all``, ``affmon undo --all``:
every stacked pin put back, with a check that every thread of the job is back on the mask
it had before the first pin.

Every ``affmon`` runs as a child of this process, which stays small: a parent grown by a
large journal would hand its peak RSS to every child it forks (``ru_maxrss`` counts the
pages before ``exec``), so the view's read runs in a child of its own too.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
Figures = tuple[float, float]  # (wall seconds, peak RSS MiB)

# The job: THREADS threads that wait, with small stacks (10,000 default 8 MiB stacks would be
# 80 GiB of address space); prints "ready" once every thread runs.
JOB = r"""
import sys, threading
threading.stack_size(64 * 1024)
stop = threading.Event()
count = int(sys.argv[1])
ready = threading.Barrier(count + 1)
def wait():
    ready.wait()
    stop.wait()
for _ in range(count):
    threading.Thread(target=wait, daemon=True).start()
ready.wait()
print("ready", flush=True)
sys.stdin.read()
"""

VIEW = r"""
import os, sys, time
from pathlib import Path
from affmon.actions.journal import PinnedMasks
path = sys.argv[1]
watch = PinnedMasks(Path(path))
started = time.perf_counter()
watch()
first_ms = (time.perf_counter() - started) * 1e3
ticks = 1000
started = time.perf_counter()
for _ in range(ticks):
    watch()
unchanged_us = (time.perf_counter() - started) / ticks * 1e6
os.utime(path)
started = time.perf_counter()
watch()
changed_ms = (time.perf_counter() - started) * 1e3
print(f"{first_ms:.1f} {unchanged_us:.1f} {changed_ms:.1f}")
"""


def affmon(env: dict[str, str], *args: str) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MiB, exit status) of ``affmon ARGS``."""
    started = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-m", "affmon", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - started
    assert child.stderr is not None
    errors = child.stderr.read().decode(errors="replace").strip()
    child.stderr.close()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        print(f"  affmon {' '.join(args)}: exit {code}: {errors}", flush=True)
    return wall, usage.ru_maxrss / 1024, code


def state_env(state: Path) -> dict[str, str]:
    return {**os.environ, "XDG_STATE_HOME": str(state), "PYTHONPATH": str(REPO)}


def pin_and_undo(env: dict[str, str], pid: int, cpu: int) -> tuple[Figures, Figures]:
    """((pin s, pin MiB), (undo s, undo MiB)) of the one-thread process."""
    pin_s, pin_mib, pin_code = affmon(env, "pin", str(pid), "--cpus", str(cpu))
    undo_s, undo_mib, undo_code = affmon(env, "undo", str(pid))
    if pin_code or undo_code:
        raise SystemExit("the pin or undo of the one-thread process failed")
    return (pin_s, pin_mib), (undo_s, undo_mib)


def medians(runs: list[Figures]) -> Figures:
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def row(what: str, empty: Figures, loaded: Figures) -> str:
    return (
        f"{what:<6} {empty[0]:8.2f} s {empty[1]:6.0f} MiB   {loaded[0]:8.2f} s {loaded[1]:6.0f} MiB"
        f"   x{loaded[0] / empty[0]:5.2f}  x{loaded[1] / empty[1]:5.2f}"
    )


def masks(pid: int) -> dict[int, frozenset[int]]:
    found = {}
    for name in os.listdir(f"/proc/{pid}/task"):
        try:
            found[int(name)] = frozenset(os.sched_getaffinity(int(name)))
        except ProcessLookupError:
            continue
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=10_000, help="threads of the job pinned over and over")
    parser.add_argument("--pins", type=int, default=20, help="stacked pins of that job")
    parser.add_argument("--repeat", type=int, default=3, help="runs of the unrelated pin and undo, each case")
    parser.add_argument("--skip-undo-all", action="store_true", help="leave out the final `affmon undo --all`")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("needs two CPUs")
    first, second = cpus[0], cpus[1]
    small = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    job = subprocess.Popen(
        [sys.executable, "-c", JOB, str(args.threads)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    scratch = Path(tempfile.mkdtemp(prefix="affmon-journal-cost-"))
    try:
        assert job.stdout is not None
        if job.stdout.readline().strip() != "ready":
            raise SystemExit("the job did not start")
        print(f"affmon from {REPO}; {len(cpus)} CPUs; load {os.getloadavg()[0]:.2f}", flush=True)

        env = state_env(scratch / "stacked")
        path = scratch / "stacked" / "affmon" / "journal.jsonl"
        before = masks(job.pid)
        pin_s: list[float] = []
        one_entry = 0
        for n in range(args.pins):
            wall, _, code = affmon(env, "pin", str(job.pid), "--cpus", str(second if n % 2 == 0 else first))
            if code:
                raise SystemExit(f"stacked pin {n + 1} failed")
            pin_s.append(wall)
            if n == 0:
                one_entry = path.stat().st_size
        size = path.stat().st_size
        print(
            f"job: {args.threads} threads pinned {args.pins} times; each pin {pin_s[0]:.2f} s (first),"
            f" {statistics.median(pin_s):.2f} s (median), {pin_s[-1]:.2f} s (last)"
        )
        print(
            f"journal: one pin's entry {one_entry / 1024:.1f} KiB; after {args.pins} pins {size / 1024:.1f} KiB"
            f" (x{size / one_entry:.2f})",
            flush=True,
        )

        empty: list[tuple[Figures, Figures]] = []
        loaded: list[tuple[Figures, Figures]] = []
        for n in range(args.repeat):
            empty.append(pin_and_undo(state_env(scratch / f"empty-{n}"), small.pid, first))
            loaded.append(pin_and_undo(env, small.pid, first))
        print(f"one-thread process, median of {args.repeat}: empty journal | after the stacked pins | ratio")
        print(row("pin", medians([e[0] for e in empty]), medians([lo[0] for lo in loaded])))
        print(row("undo", medians([e[1] for e in empty]), medians([lo[1] for lo in loaded])), flush=True)

        view = subprocess.run(
            [sys.executable, "-c", VIEW, str(path)], cwd=REPO, env=env, capture_output=True, text=True, check=True
        )
        first_ms, unchanged_us, changed_ms = view.stdout.split()
        print(
            f"view (PinnedMasks): first read {first_ms} ms; per tick {unchanged_us} us while unchanged,"
            f" {changed_ms} ms when changed"
        )

        if not args.skip_undo_all:
            wall, rss, code = affmon(env, "undo", "--all")
            back = masks(job.pid) == before
            print(
                f"undo --all: {wall:.2f} s, peak RSS {rss:.0f} MiB, exit {code};"
                f" every thread back on its mask from before the first pin: {back}"
            )
        print(f"load {os.getloadavg()[0]:.2f} at the end")
    finally:
        for child in (small, job):
            child.kill()
            child.wait()
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
