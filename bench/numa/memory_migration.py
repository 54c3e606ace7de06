"""Proof that ``pin --migrate-memory`` brings a process's memory to its CPUs' node, and
what that is worth: a process whose memory sits on another node than its CPUs reads it
more slowly until the pages move.

    python3 -m bench.numa.memory_migration                # 1 GiB, 3 s a phase
    python3 -m bench.numa.memory_migration --gib 4 --seconds 5

A child first-touches ``--gib`` GiB while pinned to the *far* node (the last node with
CPUs), then reads it in a loop, printing GB/s every half second. Phases, each measured
for ``--seconds``: (1) far: threads and memory on the far node; (2) threads moved by
``affmon pin --cpus <near node>`` without the flag: memory remote; (3) ``affmon pin
--cpus <near node> --migrate-memory``: memory local. Each phase prints the child's
resident bytes per node (numa_maps) and the median read bandwidth. On a machine with one
node of CPUs the phases still run (one node: the pin says "nothing to move") and the
script says there is nothing to prove. Needs a multi-node machine for the proof (the
single-node H200 VMs of docs/validation.md cannot give it).

For a GPU rank instead of this child, start the job on the wrong node with
``bench/numa/cross_numa.py`` (it pins a rank to the CPUs of a node that is not its GPU's, so
its memory is first touched there) and move it with
``affmon pin RANK_PID --cpus <the GPU's node CPUs> --migrate-memory``; ``affmon snapshot
--pid RANK_PID --json`` shows its memory per node before and after once the sampler
reads numa_maps.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from affmon.collect.numa_maps import read_numa_maps
from affmon.collect.sysfs_topology import read_topology
from affmon.core.model.cpuset import format_cpulist

REPO = Path(__file__).resolve().parent.parent.parent

CHILD = r"""
import mmap, sys, time
size = int(float(sys.argv[1]) * (1 << 30))
area = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
area.write(b"\x01" * size)                       # first touch, on the node the process runs on
print("ready", flush=True)
view = memoryview(area)
chunk = 64 << 20
while True:
    t0, done = time.perf_counter(), 0
    while time.perf_counter() - t0 < 0.5:
        for offset in range(0, size, chunk):
            bytes(view[offset:offset + chunk])  # a copy: reads every byte
            done += min(chunk, size - offset)
    print(done / (time.perf_counter() - t0) / 1e9, flush=True)
"""


def affmon(*args: str) -> dict[str, object]:
    run = subprocess.run([sys.executable, "-m", "affmon", *args, "--json"], capture_output=True, text=True, cwd=REPO)
    if run.returncode not in (0, 1):
        raise SystemExit(f"affmon {' '.join(args)}: {run.stderr.strip()}")
    result: dict[str, object] = json.loads(run.stdout)
    return result


def phase(name: str, child: subprocess.Popen[str], seconds: float) -> None:
    assert child.stdout is not None
    child.stdout.readline()  # drop a reading that straddles the change
    rates = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rates.append(float(child.stdout.readline()))
    memory = read_numa_maps(child.pid)
    where = (
        "unknown"
        if memory is None
        else ", ".join(f"node {n}: {b / (1 << 20):.0f} MiB" for n, b in memory.resident_bytes_by_node.items())
    )
    print(f"{name:<34} {statistics.median(rates):6.2f} GB/s   {where}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args()
    topology = read_topology("/")
    nodes = [n for n in topology.cpu_numa_nodes if n.cpus & topology.allowed_cpus]
    near, far = nodes[0], nodes[-1]
    near_cpus = format_cpulist(near.cpus & topology.allowed_cpus)
    far_cpus = frozenset(far.cpus & topology.allowed_cpus)
    print(f"{len(nodes)} node(s) with CPUs; near node {near.id} (CPUs {near_cpus}), far node {far.id}")
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(a.gib)],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: os.sched_setaffinity(0, far_cpus),
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        phase("1 far: threads and memory", child, a.seconds)
        affmon("pin", str(child.pid), "--cpus", near_cpus)
        phase("2 threads near, memory far", child, a.seconds)
        out = affmon("pin", str(child.pid), "--cpus", near_cpus, "--migrate-memory")
        memory = out.get("memory")
        print(f"  affmon: {memory.get('message') if isinstance(memory, dict) else out.get('error')}")
        phase("3 threads and memory near", child, a.seconds)
    finally:
        child.kill()
        child.wait()
    if len(nodes) < 2:
        print("one NUMA node with CPUs: nothing to prove here (run it on a multi-node machine)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
