"""The monitor's own CPU use at 1 Hz, next to htop's, in real terminals, same run.

Builds a population of python processes with many threads (default 10 x 201 = 2,010
threads, all watched by affmon's default selection), then starts, each in its own tmux
session of 140x40: ``affmon --interval 1`` (the TUI) and ``htop -d 10`` (htop's delay is
in tenths of a second: 1 s). Both run together for ``--seconds`` (default 60) after a
warm-up; the script reads each one's CPU time (utime + stime of every thread, from
``/proc/PID/stat``) at the start and end of the window and prints the share of one core,
and the ratio. Needs tmux and htop (Debian packages).

    python bench/tui_cost.py [--seconds 60] [--processes 10] [--threads 200]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = ROOT / "tests" / "workload.py"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """CPU time of a process and its reaped children (utime, stime, cutime, cstime)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / TICKS


def pane_pid(session: str) -> int:
    out = subprocess.run(
        ["tmux", "display-message", "-p", "-t", session, "#{pane_pid}"], capture_output=True, text=True
    )
    return int(out.stdout.strip())


def start(session: str, command: str) -> int:
    subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "140", "-y", "40", "-c", str(ROOT), command], check=True
    )
    time.sleep(0.5)
    return pane_pid(session)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=8.0)
    ap.add_argument("--processes", type=int, default=10)
    ap.add_argument("--threads", type=int, default=200)
    a = ap.parse_args()
    for tool in ("tmux", "htop"):
        if shutil.which(tool) is None:
            raise SystemExit(f"tui_cost: {tool} is not installed (apt-get install {tool})")
    population = [
        subprocess.Popen(
            [sys.executable, str(WORKLOAD), "--sleepers", str(a.threads), "--seconds", str(a.seconds + 120)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(a.processes)
    ]
    try:
        for p in population:
            assert p.stdout is not None and p.stdout.readline()
        threads = sum(len(os.listdir(f"/proc/{p.pid}/task")) for p in population)
        affmon = start("cost-affmon", f"exec {sys.executable} -m affmon --interval 1")
        htop = start("cost-htop", "exec htop -d 10")
        time.sleep(a.warmup)
        before = {"affmon": cpu_seconds(affmon), "htop": cpu_seconds(htop)}
        t0 = time.monotonic()
        time.sleep(a.seconds)
        elapsed = time.monotonic() - t0
        after = {"affmon": cpu_seconds(affmon), "htop": cpu_seconds(htop)}
        screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", "cost-affmon"], capture_output=True, text=True)
    finally:
        for session in ("cost-affmon", "cost-htop"):
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        for p in population:
            p.kill()
            p.wait()
    share = {k: 100 * (after[k] - before[k]) / elapsed for k in before}
    print(
        f"population: {a.processes} python processes, {threads} threads; {os.cpu_count()} CPUs; "
        f"{elapsed:.0f} s measured after {a.warmup:.0f} s warm-up, 1 Hz, 140x40 tmux panes"
    )
    print(f"  affmon --interval 1 : {share['affmon']:5.1f}% of one core")
    print(f"  htop -d 10          : {share['htop']:5.1f}% of one core")
    print(f"  ratio affmon / htop : {share['affmon'] / share['htop']:5.2f}   (goal <= 1.00)")
    header = next((line for line in screen.stdout.splitlines() if line.strip()), "")
    print(f"affmon's screen said: {header.strip()[:120]}")


if __name__ == "__main__":
    main()
