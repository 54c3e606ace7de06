"""The monitor's own cost at 1 Hz next to htop's, in real terminals, on threads that wake, same run.

Starts the waking population of bench/waking.py (2,000 threads in 10 processes by default,
each thread waking every 0.5 s for a few tens of microseconds, plus a training-like python
process of 12 threads, 3 of them busy-ish; ``--processes 0``: nothing), then, each in its
own 140x40 pane of a private tmux server: ``affmon --interval 1`` (the TUI) and ``htop -d 10``
(htop's delay is in tenths of a second: 1 s; run with an empty configuration directory, so
with its default meters). Both run together for ``--seconds`` (60) after ``--warmup`` (8).

Measured for each over that window:

* CPU: utime + stime (and the reaped children's) of the pane's process, from
  ``/proc/PID/stat`` at the start and the end, as a share of one core;
* RSS: ``VmRSS`` from ``/proc/PID/status`` at the end;
* refreshes achieved: every 0.25 s the script captures both panes (``tmux capture-pane``)
  and counts the changes of a clock each one draws when it refreshes: affmon's header shows
  the HH:MM:SS of its newest sample, htop its ``Uptime: HH:MM:SS`` meter. A 1 Hz tool that
  keeps up changes its clock about once a second; one that falls behind, less. affmon's
  header drops its clock when the line is too long for the pane (a long "no NVML (...)"
  warning on a machine without a GPU does that at 140 columns); where the clock was missing
  from more than a tenth of the captures, the count is of changes of the whole screen
  (marked "screen"), each new screen counted once it has been captured twice in a row (a
  capture of a half-drawn screen is not a refresh); a lower bound: a refresh that changes
  nothing on the screen is not seen. CPU per refresh is the window's CPU divided by the count.

``--sleeping`` adds a second population: the same number of threads that never wake (the
case measured before). Each population runs ``--repeat`` times (3), the populations taking
turns, because the machine may be shared: the summary gives the median and range of the
ratios. Needs tmux and htop (Debian: ``apt-get install tmux htop``).

    python bench/tui_cost.py [--seconds 60] [--repeat 3] [--threads 2000] [--processes 10] [--sleeping]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from waking import Population, Shape, StartError, activity, add_arguments, check_arguments, task_counters

ROOT = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")
POLL_S = 0.25
WIDTH, HEIGHT = 140, 40
# affmon: the first HH:MM:SS on its header (the first line drawn); htop: its uptime meter.
AFFMON_CLOCK = re.compile(r"\b(\d\d:\d\d:\d\d)\b")
HTOP_CLOCK = re.compile(r"Uptime: ((?:\d+ days?, )?\d\d:\d\d:\d\d)")


def cpu_seconds(pid: int) -> float:
    """CPU time of a process and its reaped children (utime, stime, cutime, cstime)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / TICKS


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def affmon_clock(screen: str) -> str | None:
    """The clock on affmon's header: the first non-blank line's first HH:MM:SS."""
    header = next((line for line in screen.splitlines() if line.strip()), "")
    m = AFFMON_CLOCK.search(header)
    return m[1] if m else None


def htop_clock(screen: str) -> str | None:
    m = HTOP_CLOCK.search(screen)
    return m[1] if m else None


def refreshes(screens: list[str], clock: Callable[[str], str | None]) -> tuple[int, str]:
    """(refreshes seen, how): changes of the clock, or of the whole screen where the clock
    is missing from more than a tenth of the captures."""
    clocks = [clock(screen) for screen in screens]
    if sum(c is None for c in clocks) <= len(clocks) / 10:
        return changes(clocks), "clock"
    return changes(settled(screens)), "screen"


def changes(clocks: Iterable[str | None]) -> int:
    """How many times the clock read differs from the one read before it (unreadable
    captures, None, are skipped: a half-drawn screen is not a refresh)."""
    count, last = 0, None
    for clock in clocks:
        if clock is None:
            continue
        if last is not None and clock != last:
            count += 1
        last = clock
    return count


def settled(screens: list[str]) -> list[str | None]:
    """Each capture, or None where the next capture differs from it: a screen caught half
    drawn is replaced 0.25 s later, and must not count as a refresh of its own."""
    return [screen if screen == after else None for screen, after in pairwise(screens)]


class Tmux:
    """A private tmux server (its own socket), so that no other tmux session is touched."""

    def __init__(self) -> None:
        self.socket = f"affmon-bench-{os.getpid()}"

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True)

    def start(self, session: str, command: str) -> int:
        done = self.run(
            "new-session", "-d", "-s", session, "-x", str(WIDTH), "-y", str(HEIGHT), "-c", str(ROOT), command
        )
        if done.returncode:
            raise OSError(f"tmux new-session failed: {done.stderr.strip()}")
        return int(self.run("display-message", "-p", "-t", session, "#{pane_pid}").stdout.strip())

    def capture(self, session: str) -> str:
        return self.run("capture-pane", "-p", "-t", session).stdout

    def close(self) -> None:
        self.run("kill-server")


@dataclass(frozen=True)
class Tool:
    cpu_share: float  # of one core
    rss_mib: float
    refreshes: int
    counted_by: str  # "clock" or "screen"

    def cpu_ms_per_refresh(self, seconds: float) -> float:
        return self.cpu_share * seconds * 1e3 / self.refreshes if self.refreshes else float("nan")


@dataclass(frozen=True)
class Row:
    shape: Shape
    run: int
    seconds: float
    affmon: Tool
    htop: Tool
    workload: str
    header: str


def measure(shape: Shape, run: int, seconds: float, warmup: float) -> Row:
    tmux = Tmux()
    config = tempfile.mkdtemp(prefix="htop-config-")
    try:
        with Population(shape, seconds=warmup + seconds + 120) as population:
            pids = {
                "affmon": tmux.start("affmon", f"exec {sys.executable} -m affmon --interval 1"),
                "htop": tmux.start("htop", f"exec env XDG_CONFIG_HOME={config} htop -d 10"),
            }
            time.sleep(warmup)
            before = {k: cpu_seconds(p) for k, p in pids.items()}
            counters, t0 = task_counters(population.all_pids()), time.monotonic()
            screens: dict[str, list[str]] = {"affmon": [], "htop": []}
            while time.monotonic() - t0 < seconds:
                for name, shots in screens.items():
                    shots.append(tmux.capture(name))
                time.sleep(POLL_S)
            elapsed = time.monotonic() - t0
            after = {k: cpu_seconds(p) for k, p in pids.items()}
            workload = activity(counters, task_counters(population.all_pids()), elapsed).line()
            rss = {k: rss_mib(p) for k, p in pids.items()}
            header = next((line for line in tmux.capture("affmon").splitlines() if line.strip()), "").strip()
    finally:
        tmux.close()
        shutil.rmtree(config, ignore_errors=True)
    clocks = {"affmon": affmon_clock, "htop": htop_clock}
    tools = {k: Tool((after[k] - before[k]) / elapsed, rss[k], *refreshes(screens[k], clocks[k])) for k in pids}
    return Row(shape, run, elapsed, tools["affmon"], tools["htop"], workload, header)


def divide(a: float, b: float) -> float:
    return a / b if b else float("nan")


def ratios(row: Row) -> tuple[float, float]:
    """affmon / htop: CPU share, and CPU per refresh."""
    per_refresh = divide(row.affmon.cpu_ms_per_refresh(row.seconds), row.htop.cpu_ms_per_refresh(row.seconds))
    return divide(row.affmon.cpu_share, row.htop.cpu_share), per_refresh


def table(rows: list[Row]) -> list[str]:
    lines = [
        f"{'threads, run':<21} {'tool':<22} {'CPU % of a core':>15} {'RSS MiB':>8} {'refreshes':>17} "
        f"{'CPU ms/refresh':>15}"
    ]
    for row in rows:
        for name, tool in (("affmon --interval 1", row.affmon), ("htop -d 10", row.htop)):
            label = f"{row.shape.label()}, {row.run}" if tool is row.affmon else ""
            lines.append(
                f"{label:<21} {name:<22} {100 * tool.cpu_share:15.1f} "
                f"{tool.rss_mib:8.0f} {tool.refreshes:6d}/{row.seconds:<3.0f} {tool.counted_by:<6} "
                f"{tool.cpu_ms_per_refresh(row.seconds):15.1f}"
            )
        ratio, per_refresh = ratios(row)
        lines.append(f"{'':<21} {'ratio affmon / htop':<22} {ratio:15.2f} {'':8} {'':17} {per_refresh:15.2f}")
    return lines


def summary(rows: list[Row]) -> list[str]:
    """Per population: the median and range of the ratios over its runs."""
    lines = []
    for label in dict.fromkeys(row.shape.label() for row in rows):
        runs = [ratios(row) for row in rows if row.shape.label() == label]
        cpu, per_refresh = sorted(r[0] for r in runs), sorted(r[1] for r in runs)
        lines.append(
            f"{label}: affmon / htop over {len(runs)} runs: CPU {statistics.median(cpu):.2f} "
            f"({cpu[0]:.2f}-{cpu[-1]:.2f}), CPU per refresh {statistics.median(per_refresh):.2f} "
            f"({per_refresh[0]:.2f}-{per_refresh[-1]:.2f})"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap)
    ap.add_argument("--seconds", type=float, default=60.0, help="the measured window")
    ap.add_argument("--warmup", type=float, default=8.0, help="seconds both run before the window")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each population, the populations alternating")
    a = ap.parse_args()
    check_arguments(ap, a)
    if a.seconds <= 0 or a.warmup < 0 or a.repeat < 1:
        ap.error("--seconds must be positive, --warmup not negative and --repeat at least 1")
    for tool in ("tmux", "htop"):
        if shutil.which(tool) is None:
            print(f"tui_cost: {tool} is not installed (Debian: apt-get install {tool})", file=sys.stderr)
            sys.exit(2)
    shapes = [Shape.from_args(a)] + ([Shape.from_args(a, sleeping=True)] if a.sleeping and a.processes else [])
    rows = []
    try:
        for run in range(1, a.repeat + 1):
            for shape in shapes:
                rows.append(measure(shape, run, a.seconds, a.warmup))
    except (StartError, OSError, ValueError) as e:
        print(f"tui_cost: {e}", file=sys.stderr)
        sys.exit(2)
    population = (
        f"{a.processes} processes of {'waker' if a.population_as == 'others' else 'python'} threads "
        f"(affmon samples them as {a.population_as}) + a training-like python process of 12 threads"
        if a.processes
        else "nothing running"
    )
    print(
        f"{population}; {os.cpu_count()} CPUs; {a.seconds:g} s measured after {a.warmup:g} s warm-up; "
        f"{WIDTH}x{HEIGHT} tmux panes; screens read every {POLL_S:g} s"
    )
    for row in rows:
        if row.shape.processes:
            print(f"{row.shape.label()}, {row.run}: {row.workload}")
    print(f"affmon's header at the end of the last run: {rows[-1].header[:110]}")
    print("\n".join(table(rows) + summary(rows)))


if __name__ == "__main__":
    main()
