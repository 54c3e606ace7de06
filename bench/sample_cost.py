"""Per-thread cost of one affmon sample next to ``ps -eLo pid,tid,psr,stat``, same run.

Builds a population of python processes with many threads (default 10 x 201 + 4 busy
= 2,014 threads), then times, alternately:

* affmon: ``Sampler.sample()`` over the population (steady state: the first sample,
  which reads every thread's ``sched`` file, is reported on its own line);
* ps: ``ps -eLo pid,tid,psr,stat`` (procps reads every task's stat and status).

Both are reported as wall time and CPU time (user + system) per thread, and as the ratio
affmon / ps. Run: ``python bench/sample_cost.py [--processes 10] [--threads 200] [--rounds 15]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from affmon.collect.sampler import Sampler, Selection

WORKLOAD = Path(__file__).resolve().parent.parent / "tests" / "workload.py"


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=10)
    ap.add_argument("--threads", type=int, default=200, help="sleeping threads per process")
    ap.add_argument("--busy", type=int, default=4, help="busy threads in all, one per process from the first")
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()

    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(WORKLOAD),
                "--sleepers",
                str(a.threads),
                "--busy",
                str(int(i < a.busy)),
                "--seconds",
                "600",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(a.processes)
    ]
    try:
        pids = []
        for p in procs:
            line = p.stdout.readline() if p.stdout else ""
            pids.append(int(line.split('"pid": ')[1].split(",")[0]))
        sampler = Sampler("/", Selection(pids=tuple(pids)))
        t0 = time.perf_counter()
        first = sampler.sample()
        first_s = time.perf_counter() - t0
        threads = first.thread_count
        system_threads = sum(
            len(os.listdir(f"/proc/{pid}/task"))
            for pid in os.listdir("/proc")
            if pid.isdigit() and os.path.isdir(f"/proc/{pid}/task")
        )

        aff_wall, aff_cpu, ps_wall, ps_cpu, ps_rows = [], [], [], [], []
        for _ in range(a.rounds):
            time.sleep(0.2)
            c0, w0 = time.process_time(), time.perf_counter()
            sample = sampler.sample()
            aff_wall.append((time.perf_counter() - w0) / sample.thread_count)
            aff_cpu.append((time.process_time() - c0) / sample.thread_count)
            time.sleep(0.2)
            c0, w0 = children_cpu_s(), time.perf_counter()
            out = subprocess.run(["ps", "-eLo", "pid,tid,psr,stat"], capture_output=True, text=True, check=True)
            rows = len(out.stdout.splitlines()) - 1
            ps_wall.append((time.perf_counter() - w0) / rows)
            ps_cpu.append((children_cpu_s() - c0) / rows)
            ps_rows.append(rows)
    finally:
        for p in procs:
            p.kill()
            p.wait()

    def us(values: list[float]) -> float:
        return statistics.median(values) * 1e6

    print(
        f"population: {a.processes} processes, {threads} threads sampled by affmon; "
        f"{statistics.median(ps_rows):.0f} threads on the machine (read by ps); {os.cpu_count()} CPUs"
    )
    print(
        f"affmon first sample (reads every sched file): {first_s * 1e3:.1f} ms, {first_s / threads * 1e6:.1f} us/thread"
    )
    print(f"median of {a.rounds} rounds, per thread:")
    print(f"  {'':8} {'wall us':>9} {'cpu us':>9}")
    print(f"  {'affmon':8} {us(aff_wall):9.1f} {us(aff_cpu):9.1f}")
    print(f"  {'ps':8} {us(ps_wall):9.1f} {us(ps_cpu):9.1f}")
    print(
        f"  {'ratio':8} {us(aff_wall) / us(ps_wall):9.2f} {us(aff_cpu) / us(ps_cpu):9.2f}   (affmon / ps; goal <= 0.70)"
    )
    print(
        f"affmon full sample: {statistics.median(aff_wall) * threads * 1e3:.1f} ms wall for {threads} threads "
        f"(system had {system_threads} threads at start)"
    )


if __name__ == "__main__":
    main()
