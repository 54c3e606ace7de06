"""Torch-free training loops for the loop-breakdown tests: one JSON line when ready.

    python tests/helpers/loop_workload.py queue|pin_memory|spin [--cpu N] [--nice N]

* ``queue``: a worker process produces a batch every 50 ms into a ``multiprocessing.Queue``
  (a pipe, as a DataLoader without pin memory); the loop takes it and works 5 ms on it;
* ``pin_memory``: the same, but a thread of the loop's process moves batches from the
  worker's queue to a ``queue.Queue`` the loop takes them from (a DataLoader's pin-memory
  thread);
* ``spin``: the loop runs Python and never blocks.

``--cpu`` pins the loop (not its worker) to one CPU; ``--nice`` sets its niceness;
``--idle-threads`` adds threads that only wait (as a framework's thread pools).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import queue
import sys
import threading
import time

BATCH_EVERY_S = 0.05
WORK_S = 0.005


def produce(out: multiprocessing.Queue[bytes]) -> None:
    while True:
        time.sleep(BATCH_EVERY_S)
        out.put(b"x" * 4096)


def work(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["queue", "pin_memory", "spin"])
    ap.add_argument("--cpu", type=int)
    ap.add_argument("--nice", type=int, default=0)
    ap.add_argument("--idle-threads", type=int, default=0, help="threads that only sleep (a framework's pools)")
    a = ap.parse_args()
    take = None
    worker = None
    if a.mode in ("queue", "pin_memory"):
        batches: multiprocessing.Queue[bytes] = multiprocessing.Queue()
        worker = multiprocessing.Process(target=produce, args=(batches,), daemon=True)
        worker.start()
        take = batches.get
        if a.mode == "pin_memory":
            pinned: queue.Queue[bytes] = queue.Queue()

            def pin() -> None:
                while True:
                    pinned.put(bytes(batches.get()))

            threading.Thread(target=pin, name="pin_memory", daemon=True).start()
            take = pinned.get
    for _ in range(a.idle_threads):
        threading.Thread(target=threading.Event().wait, daemon=True).start()
    if a.cpu is not None:
        os.sched_setaffinity(0, {a.cpu})
    niced = False
    if a.nice:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, a.nice)
            niced = True
        except PermissionError:
            pass
    print(json.dumps({"pid": os.getpid(), "worker": worker.pid if worker else None, "niced": niced}), flush=True)
    while True:
        if take is not None:
            take()
            work(WORK_S)
        else:
            work(1.0)


if __name__ == "__main__":
    sys.exit(main())
