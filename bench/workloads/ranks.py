"""Training-like ranks without a GPU: the processes affmon exists to watch, for the cost
benchmarks (bench/cost/: sample_cost, tui_cost; ``--ranks N``).

A rank is a python process that affmon takes for training: it maps a file named
``libtorch_cpu.so`` (an empty stand-in, as a process that loaded PyTorch's CPU library has
it in ``/proc/PID/maps``), or with ``--torch`` imports the real ``torch`` (a CPU build will
do). Its shape is a PyTorch job's on the CPU side:

* a main thread that is busy for ``--main-duty`` of every 100 ms (hashing; 1.0 never
  sleeps);
* ``--intra-op`` (24) threads that wake every ``--period`` seconds for ``--work-us`` of work,
  as an intra-op pool between operators;
* a pin-memory thread that wakes the same way;
* ``--workers`` (6) DataLoader-like worker processes, forked before any thread starts (so
  each maps the runtime too, as a forked DataLoader worker does), each of
  ``--worker-threads`` (2) threads that wake the same way.

As a program, one rank::

    python -m bench.workloads.ranks [--intra-op 24] [--workers 6] [--worker-threads 2]
                                    [--main-duty 0.25] [--torch] [--seconds 600]

prints one JSON line once every thread of it and its workers runs: ``{"pid": ..., "workers":
[...], "threads": ...}`` (threads: the rank's and its workers' together), and exits after
``--seconds`` (its workers with it).

The main thread's duty defaults to 0.25 of a CPU: on the 2-core machine the benchmarks run
on, four ranks' main threads then take one CPU and the 2,000 waking threads of the
population about another (``bench/workloads/waking.py`` measures that); at 1.0 four ranks
alone would ask for four CPUs, and the benchmark would measure the run queue.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import signal
import sys
import threading
import time
from functools import partial

from bench.workloads.waking import STACK_BYTES, busy_ish, map_runtime, positive, wake, work_buffer

PR_SET_PDEATHSIG = 1


def worker(threads: int, period_s: float, buffer: bytes, seed: int, until: float, ready_fd: int) -> None:
    """A DataLoader-like worker: ``threads`` threads (its main one included) that wake. It
    dies with its rank (``PR_SET_PDEATHSIG``), as a killed rank's workers must not linger."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    rng = random.Random(seed)
    jobs = [partial(wake, period_s, buffer, rng.uniform(0, period_s), until) for _ in range(threads)]
    started = threading.Barrier(len(jobs))

    def start(job: partial[None]) -> None:
        started.wait()
        job()

    for job in jobs[1:]:
        threading.Thread(target=start, args=(job,), daemon=True).start()
    started.wait()
    os.write(ready_fd, b"w")
    os.close(ready_fd)
    jobs[0]()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--intra-op", type=int, default=24, help="threads of the intra-op pool")
    ap.add_argument("--workers", type=int, default=6, help="DataLoader-like worker processes")
    ap.add_argument("--worker-threads", type=int, default=2, help="threads of each worker, its main one included")
    ap.add_argument("--main-duty", type=positive, default=0.25, help="the main thread's share of a CPU, at most 1")
    ap.add_argument("--period", type=positive, default=0.5, help="seconds between a waking thread's wakes")
    ap.add_argument("--work-us", type=positive, default=30.0, help="CPU microseconds of work per wake")
    ap.add_argument("--torch", action="store_true", help="import torch instead of mapping a stand-in libtorch")
    ap.add_argument("--seconds", type=positive, default=600.0)
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args(argv)
    if a.intra_op < 0 or a.workers < 0 or a.worker_threads < 1 or a.main_duty > 1:
        ap.error("--intra-op and --workers must not be negative, --worker-threads at least 1, --main-duty at most 1")
    runtime = map_runtime(a.torch)  # before the fork: the workers map it too
    threading.stack_size(STACK_BYTES)
    until = time.monotonic() + a.seconds
    rng = random.Random(a.seed)
    buffer = work_buffer(a.work_us)
    ready_r, ready_w = os.pipe()
    workers = []
    for n in range(a.workers):
        pid = os.fork()
        if pid == 0:  # the worker: no thread has started in the parent yet
            os.close(ready_r)
            try:
                worker(a.worker_threads, a.period, buffer, rng.randrange(1 << 30) + n, until, ready_w)
            finally:
                os._exit(0)
        workers.append(pid)
    os.close(ready_w)
    jobs = [partial(busy_ish, a.main_duty, until)]
    jobs += [partial(wake, a.period, buffer, rng.uniform(0, a.period), until) for _ in range(a.intra_op + 1)]
    started = threading.Barrier(len(jobs))

    def start(job: partial[None]) -> None:
        started.wait()
        job()

    for job in jobs[1:]:
        threading.Thread(target=start, args=(job,), daemon=True).start()
    started.wait()
    got = 0
    while got < a.workers:
        chunk = os.read(ready_r, a.workers)
        if not chunk:
            break
        got += len(chunk)
    os.close(ready_r)
    threads = len(os.listdir("/proc/self/task")) + sum(len(os.listdir(f"/proc/{w}/task")) for w in workers)
    print(json.dumps({"pid": os.getpid(), "workers": workers, "threads": threads}), flush=True)
    jobs[0]()  # until ``--seconds`` have passed; the workers die with this process
    del runtime


if __name__ == "__main__":
    main(sys.argv[1:])
