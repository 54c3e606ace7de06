"""What one affmon sample costs next to ``ps -eLo pid,tid,psr,stat,comm``, on threads that wake, same run.

Starts the waking population of bench/workloads/waking.py (2,000 threads in 10 processes by default,
each thread waking every 0.5 s for a few tens of microseconds, plus a training-like python
process of 12 threads, 3 of them busy-ish; ``--ranks N``: N training-like ranks of
bench/workloads/ranks.py in its place), then times, in rounds that alternate the two:

* affmon: ``Sampler("/", Selection(others=True)).sample()``, the monitor's selection (training
  processes and what runs below them watched, every other process sampled as others), one sample every
  ``--interval`` seconds as the monitor takes them; the first sample of a run (which reads
  every thread's ``sched`` file) is reported on its own line;
* ps: ``ps -eLo pid,tid,psr,stat,comm`` (procps reads every task's stat and status), half way
  between two affmon samples.

CPU time is this process's (``time.process_time``) around ``sample()`` and the reaped
children's (``resource.getrusage(RUSAGE_CHILDREN)``) around ``ps``; wall time is
``time.perf_counter``. Per sample: mean, median and max; per thread: the median sample
divided by the threads that tool read (both read every thread on the machine, which the
population's threads dominate). The ratios are affmon / ps, per thread and per sample (the
medians). The load average at the end is printed with them. ``--sleeping`` adds a row on the
same number of threads that never wake (the case measured before), which takes affmon's
quiet-process path.

    python -m bench.cost.sample_cost [--threads 2000] [--processes 10] [--rounds 15] [--sleeping]
                                     [--population-as others|python] [--ranks 4]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

from affmon.collect.sampler import Sampler, Selection
from bench.workloads.waking import (
    Population,
    Shape,
    StartError,
    activity,
    add_arguments,
    check_arguments,
    task_counters,
)

PS = ["ps", "-eLo", "pid,tid,psr,stat,comm"]
SETTLE_S = 2.0  # after the population is ready: every thread has passed its random phase


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class Timing:
    """One tool's samples: CPU and wall seconds of each, and the threads each read."""

    cpu_s: tuple[float, ...]
    wall_s: tuple[float, ...]
    threads: tuple[int, ...]

    def per_thread_us(self, values: tuple[float, ...]) -> float:
        return statistics.median(values) / statistics.median(self.threads) * 1e6


@dataclass(frozen=True)
class Row:
    shape: Shape
    affmon: Timing
    ps: Timing
    first_sample_s: float
    first_sample_threads: int
    workload: str


def measure(shape: Shape, rounds: int, interval_s: float) -> Row:
    with Population(shape, seconds=SETTLE_S + rounds * interval_s + 300) as population:
        time.sleep(SETTLE_S)
        sampler = Sampler("/", Selection(others=True))
        w0 = time.perf_counter()
        first = sampler.sample()
        first_s = time.perf_counter() - w0
        before, t0 = task_counters(population.all_pids()), time.monotonic()
        aff_cpu, aff_wall, aff_threads, ps_cpu, ps_wall, ps_threads = [], [], [], [], [], []
        due = time.monotonic() + interval_s
        for _ in range(rounds):
            time.sleep(max(0.0, due - time.monotonic()))
            due += interval_s
            c0, w0 = time.process_time(), time.perf_counter()
            sample = sampler.sample()
            aff_wall.append(time.perf_counter() - w0)
            aff_cpu.append(time.process_time() - c0)
            aff_threads.append(sample.thread_count)
            time.sleep(max(0.0, due - interval_s / 2 - time.monotonic()))
            c0, w0 = children_cpu_s(), time.perf_counter()
            out = subprocess.run(PS, capture_output=True, text=True, check=True)
            ps_wall.append(time.perf_counter() - w0)
            ps_cpu.append(children_cpu_s() - c0)
            ps_threads.append(len(out.stdout.splitlines()) - 1)
        after, t1 = task_counters(population.all_pids()), time.monotonic()
    return Row(
        shape,
        Timing(tuple(aff_cpu), tuple(aff_wall), tuple(aff_threads)),
        Timing(tuple(ps_cpu), tuple(ps_wall), tuple(ps_threads)),
        first_s,
        first.thread_count,
        activity(before, after, t1 - t0).line(),
    )


def stats_ms(values: tuple[float, ...]) -> str:
    return f"{statistics.mean(values) * 1e3:7.1f} {statistics.median(values) * 1e3:7.1f} {max(values) * 1e3:7.1f}"


def table(rows: list[Row]) -> list[str]:
    head = (
        f"{'threads':<16} {'tool':<7} {'read':>6}  {'CPU ms/sample':^23}  {'wall ms/sample':^23}  "
        f"{'us/thread (median)':^18}"
    )
    sub = f"{'':<16} {'':<7} {'':>6}  {'mean':>7} {'median':>7} {'max':>7}  {'mean':>7} {'median':>7} {'max':>7}"
    lines = [head, sub + f"  {'CPU':>8} {'wall':>9}"]
    for row in rows:
        for name, t in (("affmon", row.affmon), ("ps", row.ps)):
            lines.append(
                f"{row.shape.label() if name == 'affmon' else '':<16} {name:<7} {statistics.median(t.threads):6.0f}  "
                f"{stats_ms(t.cpu_s)}  {stats_ms(t.wall_s)}  "
                f"{t.per_thread_us(t.cpu_s):8.1f} {t.per_thread_us(t.wall_s):9.1f}"
            )
        cpu = row.affmon.per_thread_us(row.affmon.cpu_s) / row.ps.per_thread_us(row.ps.cpu_s)
        wall = row.affmon.per_thread_us(row.affmon.wall_s) / row.ps.per_thread_us(row.ps.wall_s)
        lines.append(f"{'':<16} {'ratio':<7} {'':>6}  {'affmon / ps, per thread:':<49}  {cpu:8.2f} {wall:9.2f}")
        per_sample = statistics.median(row.affmon.cpu_s) / statistics.median(row.ps.cpu_s)
        label = "affmon / ps, CPU per sample (medians):"
        lines.append(f"{'':<16} {'ratio':<7} {'':>6}  {label:<49}  {per_sample:8.2f}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap)
    ap.add_argument("--rounds", type=int, default=15, help="samples of each tool per row")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between affmon's samples (the monitor's)")
    a = ap.parse_args()
    check_arguments(ap, a)
    if a.rounds < 1 or a.interval <= 0:
        ap.error("--rounds must be at least 1 and --interval positive")
    shapes = [Shape.from_args(a)] + ([Shape.from_args(a, sleeping=True)] if a.sleeping else [])
    rows = []
    try:
        for shape in shapes:
            rows.append(measure(shape, a.rounds, a.interval))
    except (StartError, OSError, subprocess.CalledProcessError) as e:
        print(f"sample_cost: {e}", file=sys.stderr)
        sys.exit(2)
    print(
        f"{shapes[0].describe()}; wakes every {a.period:g} s, {a.work_us:g} us of work; {a.rounds} rounds "
        f"alternating affmon and ps, affmon every {a.interval:g} s; {os.cpu_count()} CPUs, load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end"
    )
    for row in rows:
        print(f"{row.shape.label()}: {row.workload}")
        print(
            f"{'':{len(row.shape.label())}}  affmon's first sample: {row.first_sample_s * 1e3:.0f} ms wall for "
            f"{row.first_sample_threads:,} threads ({row.first_sample_s / row.first_sample_threads * 1e6:.1f} us each)"
        )
    print("\n".join(table(rows)))


if __name__ == "__main__":
    main()
