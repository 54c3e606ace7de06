"""The monitor's cost watching one process with a large resident set, next to htop's, same run.

Starts a process that writes every page of ``--mib`` MiB (2048) of anonymous memory, in
4 kB pages (``MADV_NOHUGEPAGE``; ``--huge`` leaves transparent huge pages allowed), then,
each in its own 140x40 pane of a private tmux server, ``affmon --pid P --interval 1`` and
``htop -d 10`` for ``--seconds`` (40) after 8 s. Prints each of the monitor's threads' CPU
(utime + stime from ``/proc/PID/task/TID/stat``), its total and htop's, in ms of CPU a
second, and their ratio. What it measures: the page-table walk of ``numa_maps``, which
grows with the resident set, against ``statm`` on a machine whose memory is all on one
node (``affmon.collect.numa_maps``).

    python -m bench.cost.watch_resident [--mib 2048] [--seconds 40] [--huge] [--tree DIR]

``--tree DIR``: run the monitor of another checkout (``python -m affmon`` from DIR), to
compare two versions in the same conditions.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOUCHER = """
import mmap, sys
size = int(sys.argv[1]) << 20
area = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
if sys.argv[2] == "small":
    area.madvise(mmap.MADV_NOHUGEPAGE)
for offset in range(0, size, mmap.PAGESIZE):
    area[offset] = 1
print("ready", flush=True)
sys.stdin.read()
"""


def ticks(path: str) -> int:
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def threads(pid: int) -> dict[str, int]:
    found = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            found[tid] = ticks(f"/proc/{pid}/task/{tid}/stat")
        except OSError:
            continue
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=2048)
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--huge", action="store_true", help="leave transparent huge pages allowed")
    ap.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose monitor runs")
    a = ap.parse_args()
    toucher = subprocess.Popen(
        [sys.executable, "-c", TOUCHER, str(a.mib), "huge" if a.huge else "small"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    sock = f"affmon-resident-{os.getpid()}"
    home = tempfile.mkdtemp()
    try:
        assert toucher.stdout is not None and toucher.stdout.readline().strip() == "ready"
        tmux = ["tmux", "-L", sock]
        monitor = (
            f"cd {a.tree} && exec env -u COLUMNS -u LINES {sys.executable} -m affmon --pid {toucher.pid} --interval 1"
        )
        subprocess.run([*tmux, "new-session", "-d", "-x", "140", "-y", "40", monitor], check=True)
        subprocess.run([*tmux, "new-window", "-d", f"exec env HOME={home} htop -d 10"], check=True)
        time.sleep(8)
        panes = subprocess.run([*tmux, "list-panes", "-a", "-F", "#{pane_pid}"], capture_output=True, text=True)
        affmon_pid, htop_pid = (int(p) for p in panes.stdout.split())
        before, htop_before = threads(affmon_pid), ticks(f"/proc/{htop_pid}/stat")
        time.sleep(a.seconds)
        after, htop_after = threads(affmon_pid), ticks(f"/proc/{htop_pid}/stat")
        hz = os.sysconf("SC_CLK_TCK")

        def per_s(n: int) -> float:
            return float(n * 1000 / hz / a.seconds)

        rss = next(
            line.split()[1]
            for line in Path(f"/proc/{toucher.pid}/status").read_text().splitlines()
            if line.startswith("VmRSS:")
        )
        pages = "huge pages allowed" if a.huge else "4 kB pages"
        load = os.getloadavg()[0]
        print(f"watching {int(rss) >> 10} MiB resident ({pages}), {a.seconds:g} s, load {load:.2f}")
        total = 0
        for tid in sorted(after, key=int):
            spent = after[tid] - before.get(tid, 0)
            total += spent
            if spent:
                print(f"  affmon thread {tid}: {per_s(spent):.1f} ms of CPU a second")
        htop = htop_after - htop_before
        ratio = total / htop if htop else float("nan")
        print(f"  affmon {per_s(total):.1f}, htop {per_s(htop):.1f} ms a second: {ratio:.2f}x")
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)
        toucher.kill()
        toucher.wait()


if __name__ == "__main__":
    main()
