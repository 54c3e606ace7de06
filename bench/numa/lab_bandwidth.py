"""Read bandwidth of a job whose memory is local, then remote, then moved back by ``affmon
pin --migrate-memory``, in one run in the NUMA lab's guest (``python -m bench.numa.lab_checks
bandwidth``, on the two-node shape).

A child first-touches ``MIB`` MiB on node 0 with its threads there, then copies it in
16 MiB pieces into a buffer it allocated once (``memcpy`` through a memoryview: no page
is faulted in while it measures), printing GB/s every half second with the time the
reading ended (the guest's monotonic clock, which this process reads too). Phases, each
``seconds`` long:

1. ``local`` (first round only): threads and memory on node 0;
2. ``remote``: ``affmon pin --cpus <the other node>``: threads moved, pages left behind;
3. ``migrated``: ``affmon pin --cpus <that node> --migrate-memory``: pages moved to them,
   which is the next round's starting point.

Each phase records the median GB/s and the child's resident bytes per node (numa_maps,
read here) at its end. ``numa_balancing`` sets ``/proc/sys/kernel/numa_balancing`` first
(0: the kernel never moves pages on its own, so phase 2 stays remote; 1: Debian's default
on a multi-node machine, where the kernel moves pages toward the threads that touch them).

The guest's nodes are separate RAM objects of one QEMU process on a one-node host, and
TCG emulates every access: what this measures is the mechanism (where the pages are,
before and after), not what remote memory costs on real hardware.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.numa.lab_jobs import numa_maps_bytes

CHILD = r"""
import mmap, os, sys, time
size = int(sys.argv[1]) << 20
piece = 16 << 20
os.sched_setaffinity(0, {0, 1})
area = mmap.mmap(-1, size)
for offset in range(0, size, piece):
    area[offset:offset + piece] = b"\1" * piece   # first touch, on node 0
dst = bytearray(piece)
out = memoryview(dst)
view = memoryview(area)
print("ready", flush=True)
while True:
    t0, done = time.perf_counter(), 0
    while time.perf_counter() - t0 < 0.5:
        for offset in range(0, size, piece):
            out[:] = view[offset:offset + piece]
            done += piece
    print(time.monotonic(), done / (time.perf_counter() - t0) / 1e9, flush=True)
"""

NODE_CPUS = {0: "0-1", 1: "2-3"}


def _phase(child: subprocess.Popen[str], name: str, seconds: float, extra: dict[str, Any]) -> dict[str, Any]:
    """The readings that began after the phase began (the pin before it is over): those
    made while affmon ran, still in the pipe, and the one that straddles the change are
    left out."""
    assert child.stdout is not None
    begin = time.monotonic() + 0.5  # a reading ends 0.5 s after it began
    end = begin + seconds
    rates, dropped = [], 0
    while True:
        ended_at, rate = (float(x) for x in child.stdout.readline().split())
        if ended_at > end:
            break
        if ended_at > begin:
            rates.append(rate)
        else:
            dropped += 1
    return {
        "phase": name,
        "gb_per_s": round(statistics.median(rates), 3),
        "readings": len(rates),
        "readings_dropped": dropped,
        "numa_maps": numa_maps_bytes(child.pid),
        **extra,
    }


def _pin(pid: int, node: int, migrate: bool) -> dict[str, Any]:
    argv = [sys.executable, "-m", "affmon", "pin", str(pid), "--cpus", NODE_CPUS[node]]
    if migrate:
        argv.append("--migrate-memory")
    run = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    return {"pin": " ".join(argv[3:]), "rc": run.returncode, "said": (run.stdout + run.stderr).strip()[-400:]}


def bandwidth_part(mib: int = 256, seconds: float = 5.0, rounds: int = 2, numa_balancing: int = 0) -> dict[str, Any]:
    Path("/proc/sys/kernel/numa_balancing").write_text(str(numa_balancing))
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(mib)], stdout=subprocess.PIPE, text=True)
    phases = []
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        here = 0
        phases.append(_phase(child, "local", seconds, {"round": 1, "threads_on": here}))
        for round_no in range(1, rounds + 1):
            there = 1 - here
            moved = _pin(child.pid, there, migrate=False)
            phases.append(_phase(child, "remote", seconds, {"round": round_no, "threads_on": there, **moved}))
            moved = _pin(child.pid, there, migrate=True)
            phases.append(_phase(child, "migrated", seconds, {"round": round_no, "threads_on": there, **moved}))
            here = there
    finally:
        child.kill()
        child.wait()
    return {"mib": mib, "seconds": seconds, "numa_balancing": numa_balancing, "phases": phases}


__all__ = ["bandwidth_part"]
