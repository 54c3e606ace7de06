"""Torch-free jobs whose cure is not a core set, for the remedy tests: one JSON line when ready.

    python tests/helpers/remedy_workload.py threads [--count N]
    python tests/helpers/remedy_workload.py own_data|step
    python tests/helpers/remedy_workload.py confined --cpu N
    python tests/helpers/remedy_workload.py stalled [--workers N]

* ``threads``: ``--count`` threads hashing 1 MiB buffers with SHA-256, which releases the
  GIL, so they really run in parallel: more busy threads than CPUs, on every CPU it may use;
* ``own_data``: a loop with no worker process that spends most of its time in a function of
  a file under ``.../torch/utils/data/`` (as ``DataLoader(num_workers=0)`` runs a dataset's
  ``__getitem__`` from ``torch/utils/data/_utils/fetch.py``), then a short step and a sleep
  standing for the GPU; ``step``: the same loop with the work in the step's own frames;
* ``confined``: the main thread and a feeder thread (``pin_memory``) each busy, both held to
  CPU ``--cpu`` while the process's other threads and a worker process keep every CPU; the
  worker is mostly idle;
* ``stalled``: the loop waits on a ``multiprocessing.Queue`` (a pipe) that ``--workers``
  worker processes never fill: each blocks forever on a lock it already holds (a futex), as
  forked workers deadlocked in an OpenMP pool do.

The JSON line: ``pid``, ``tids`` (the busy threads, by role), ``workers``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

DATA_MODULE = '''
import time


def fetch(seconds):
    """Stands for a dataset's __getitem__ and its CPU-side augmentation."""
    end = time.perf_counter() + seconds
    total = 0
    while time.perf_counter() < end:
        total += sum(range(200))
    return total
'''


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def hashing() -> None:
    block = os.urandom(1 << 20)
    while True:
        hashlib.sha256(block).digest()


def data_module() -> ModuleType:
    """A module whose file lies under ``torch/utils/data/``, in a temporary directory."""
    where = Path(tempfile.mkdtemp(prefix="affmon-remedy-")) / "torch" / "utils" / "data"
    where.mkdir(parents=True)
    path = where / "fake_fetch.py"
    path.write_text(DATA_MODULE)
    spec = importlib.util.spec_from_file_location("fake_fetch", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def step(seconds: float) -> None:
    spin(seconds)


def own_loop(fetch: Callable[[float], object]) -> None:
    while True:
        fetch(0.040)  # loading the batch: most of the loop's time
        step(0.004)  # the step's own Python and launches
        time.sleep(0.008)  # the GPU's turn


def stuck(ready: multiprocessing.synchronize.Event) -> None:  # type: ignore[name-defined]
    lock = threading.Lock()
    lock.acquire()
    ready.set()
    lock.acquire()  # never returns: a futex wait, as a deadlocked pool


def idle_worker() -> None:
    while True:
        spin(0.005)
        time.sleep(0.1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["threads", "own_data", "step", "confined", "stalled"])
    ap.add_argument("--count", type=int, default=16)
    ap.add_argument("--cpu", type=int, default=0)
    ap.add_argument("--workers", type=int, default=3)
    a = ap.parse_args()
    info: dict[str, object] = {"pid": os.getpid(), "workers": []}
    if a.mode == "threads":
        for _ in range(a.count):
            threading.Thread(target=hashing, daemon=True).start()
        time.sleep(0.2)
        info["tids"] = sorted(int(t) for t in os.listdir("/proc/self/task") if int(t) != os.getpid())
        print(json.dumps(info), flush=True)
        threading.Event().wait()
    if a.mode in ("own_data", "step"):
        fetch = data_module().fetch if a.mode == "own_data" else step
        print(json.dumps(info), flush=True)
        own_loop(fetch)
    if a.mode == "confined":
        worker = multiprocessing.get_context("fork").Process(target=idle_worker, daemon=True)
        worker.start()
        tids: dict[str, int] = {}
        started = threading.Event()

        def feeder() -> None:
            tids["pin_memory"] = threading.get_native_id()
            os.sched_setaffinity(0, {a.cpu})
            started.set()
            while True:
                spin(1.0)

        threading.Thread(target=threading.Event().wait, daemon=True).start()  # a helper left wide
        threading.Thread(target=feeder, name="pin_memory", daemon=True).start()
        started.wait()
        os.sched_setaffinity(0, {a.cpu})  # the main thread only: the others keep theirs
        info["tids"] = {"main": os.getpid(), **tids}
        info["workers"] = [worker.pid]
        print(json.dumps(info), flush=True)
        while True:
            spin(1.0)
    if a.mode == "stalled":
        ctx = multiprocessing.get_context("fork")
        batches: multiprocessing.Queue[bytes] = ctx.Queue()
        workers = []
        for _ in range(a.workers):
            ready = ctx.Event()
            w = ctx.Process(target=stuck, args=(ready,), daemon=True)
            w.start()
            ready.wait()
            workers.append(w.pid)
        info["workers"] = workers
        print(json.dumps(info), flush=True)
        batches.get()  # never returns
    sys.exit(0)


if __name__ == "__main__":
    main()
