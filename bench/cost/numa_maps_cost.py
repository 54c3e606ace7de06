"""What reading ``/proc/PID/numa_maps`` costs, next to ``status`` and ``smaps_rollup``,
for a process with a large resident set: to choose how often a sampler may read it.

    python3 -m bench.cost.numa_maps_cost                 # 2 GiB touched, 30 reads of each
    python3 -m bench.cost.numa_maps_cost --gib 8 --reads 50 --thp never

A child process touches ``--gib`` GiB of anonymous memory (every page written) and
waits; this process then reads each file ``--reads`` times, alternating them, and prints
the median and 90th percentile wall time per read, the ratio to ``status``, and the
numa_maps total against ``VmRSS``. numa_maps is timed twice: the raw read (the kernel's
page-table walk) and the read plus affmon's parse (``read_numa_maps``). ``--thp`` sets
the child's transparent huge pages (``prctl(PR_SET_THP_DISABLE)`` for ``never``), since
a page-table walk over 2 MiB pages is shorter than over 4 kB ones.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from affmon.collect.numa_maps import read_numa_maps

CHILD = r"""
import ctypes, mmap, sys
gib, thp = float(sys.argv[1]), sys.argv[2]
if thp == "never":
    ctypes.CDLL(None, use_errno=True).prctl(41, 1, 0, 0, 0)  # PR_SET_THP_DISABLE
size = int(gib * (1 << 30))
area = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
if thp == "always" and hasattr(mmap, "MADV_HUGEPAGE"):
    area.madvise(mmap.MADV_HUGEPAGE)
page = mmap.PAGESIZE
for offset in range(0, size, page):
    area[offset] = 1
print("ready", flush=True)
sys.stdin.read()
"""


def raw_read(path: str) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        total = 0
        while chunk := os.read(fd, 1 << 16):
            total += len(chunk)
        return total
    finally:
        os.close(fd)


def timed(fn: Callable[[], object], reads: int) -> list[float]:
    times = []
    for _ in range(reads):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def vm_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise SystemExit("no VmRSS")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--reads", type=int, default=30)
    ap.add_argument("--thp", choices=("default", "never", "always"), default="default")
    a = ap.parse_args()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(a.gib), a.thp], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            raise SystemExit("the child did not start")
        pid = child.pid
        base = f"/proc/{pid}"
        cases: dict[str, Callable[[], object]] = {
            "status": lambda: raw_read(f"{base}/status"),
            "smaps_rollup": lambda: raw_read(f"{base}/smaps_rollup"),
            "numa_maps (read)": lambda: raw_read(f"{base}/numa_maps"),
            "numa_maps (read+parse)": lambda: read_numa_maps(pid),
        }
        results: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(a.reads):  # alternate, so a burst of load hits every case alike
            for name, fn in cases.items():
                results[name] += timed(fn, 1)
        memory = read_numa_maps(pid)
        rss = vm_rss_bytes(pid)
        thp = _anon_huge_kib(pid)
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait()
    status_median = statistics.median(results["status"])
    print(f"child: {a.gib:g} GiB touched, VmRSS {rss / (1 << 20):.0f} MiB, AnonHugePages {thp} kB, thp={a.thp}")
    assert memory is not None
    print(
        f"numa_maps: {memory.mappings} mappings, {memory.resident_bytes / (1 << 20):.0f} MiB resident"
        f" ({(memory.resident_bytes - rss) / (1 << 20):+.1f} MiB against VmRSS)"
    )
    print(f"{'file':<24}{'median ms':>11}{'p90 ms':>9}{'x status':>10}  ({a.reads} reads each, {os.cpu_count()} CPUs)")
    for name, times in results.items():
        median = statistics.median(times)
        p90 = sorted(times)[int(0.9 * (len(times) - 1))]
        print(f"{name:<24}{median * 1e3:>11.3f}{p90 * 1e3:>9.3f}{median / status_median:>10.0f}")
    return 0


def _anon_huge_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
