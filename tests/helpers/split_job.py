"""A training job's shape, driven over stdin, for tests of a split placement (main loop and
DataLoader workers on separate cores): ``python split_job.py [--cpus LIST]``.

The main process starts one worker process (this script with ``--worker``), each with one
waiting thread besides its main one, and prints ``{"pid": ..., "worker": ...}`` on one
line. Then every process reads commands on stdin and answers each with one JSON line:

* ``spawn``: its main thread starts a thread that waits (it inherits that thread's mask);
  answers the new thread's TID;
* ``fork``: its main thread starts another worker process (which inherits the main
  thread's mask, as a DataLoader re-forked each epoch does); answers the new PID;
* ``to PID COMMAND``: hands COMMAND to its worker PID; answers the worker's answer.

Workers stay in the first process's session, so a test ends the whole tree with one
``killpg``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from typing import IO

stop = threading.Event()


def start_waiter() -> int:
    tids: list[int] = []
    ready = threading.Event()

    def wait() -> None:
        tids.append(threading.get_native_id())
        ready.set()
        stop.wait()

    threading.Thread(target=wait, daemon=True).start()
    ready.wait()
    return tids[0]


def start_worker(workers: dict[int, subprocess.Popen[str]]) -> int:
    worker = subprocess.Popen(
        [sys.executable, __file__, "--worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert worker.stdout is not None
    pid = int(json.loads(worker.stdout.readline())["pid"])
    workers[pid] = worker
    return pid


def ask(worker: subprocess.Popen[str], command: str) -> object:
    assert worker.stdin is not None and worker.stdout is not None
    worker.stdin.write(command + "\n")
    worker.stdin.flush()
    return json.loads(worker.stdout.readline())


def serve(commands: IO[str], workers: dict[int, subprocess.Popen[str]]) -> None:
    for line in commands:
        command, _, arg = line.strip().partition(" ")
        answer: object
        if command == "spawn":
            answer = start_waiter()
        elif command == "fork":
            answer = start_worker(workers)
        elif command == "to":
            pid, _, rest = arg.partition(" ")
            answer = ask(workers[int(pid)], rest)
        else:
            answer = f"unknown command {command!r}"
        print(json.dumps(answer), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpus", default=None, help="comma-separated CPUs to pin the process to")
    ap.add_argument("--worker", action="store_true", help="be a worker: no worker of its own")
    a = ap.parse_args()
    if a.cpus:
        os.sched_setaffinity(0, {int(c) for c in a.cpus.split(",")})
    start_waiter()
    workers: dict[int, subprocess.Popen[str]] = {}
    first = None if a.worker else start_worker(workers)
    print(json.dumps({"pid": os.getpid(), "worker": first}), flush=True)
    serve(sys.stdin, workers)


if __name__ == "__main__":
    main()
