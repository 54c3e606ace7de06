"""A process that creates threads while it is being pinned: ``python thread_spawner.py``.

Prints one JSON line (``pid``, ``creator``: the TID of a thread that creates threads on
request), then reads commands on stdin and answers each with one JSON line:

* ``spawn N``: the main thread starts N threads that wait; answers their TIDs;
* ``via-creator N``: the creator thread starts N threads; answers their TIDs;
* ``own CPUS``: the main thread starts a thread that sets its own mask to CPUS
  (comma-separated); answers its TID.

``--churn K`` also runs K chains of creators: each creator starts a short-lived thread
every ``--every`` seconds and, after 20 of them, hands over to a new creator and exits,
so creators always have the newest TIDs (they are the last a pin reaches).
"""

import argparse
import json
import os
import queue
import sys
import threading
import time

stop = threading.Event()


def start_waiters(n: int, cpus: set[int] | None = None) -> list[int]:
    tids: list[int] = []
    ready = threading.Barrier(n + 1)

    def wait() -> None:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        tids.append(threading.get_native_id())
        ready.wait()
        stop.wait()

    for _ in range(n):
        threading.Thread(target=wait, daemon=True).start()
    ready.wait()
    return sorted(tids)


def creator(requests: "queue.Queue[tuple[int, queue.Queue[list[int]]]]") -> None:
    while True:
        n, reply = requests.get()
        reply.put(start_waiters(n))


def chain(every: float, life: float) -> None:
    for _ in range(20):
        threading.Thread(target=time.sleep, args=(life,), daemon=True).start()
        time.sleep(every)
    threading.Thread(target=chain, args=(every, life), daemon=True).start()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpus", default=None, help="comma-separated CPUs to pin the process to")
    ap.add_argument("--churn", type=int, default=0)
    ap.add_argument("--every", type=float, default=0.002)
    ap.add_argument("--life", type=float, default=0.1)
    a = ap.parse_args()
    if a.cpus:
        os.sched_setaffinity(0, {int(c) for c in a.cpus.split(",")})
    requests: queue.Queue[tuple[int, queue.Queue[list[int]]]] = queue.Queue()
    creator_tid: list[int] = []
    started = threading.Event()

    def run_creator() -> None:
        creator_tid.append(threading.get_native_id())
        started.set()
        creator(requests)

    threading.Thread(target=run_creator, daemon=True).start()
    started.wait()
    for _ in range(a.churn):
        threading.Thread(target=chain, args=(a.every, a.life), daemon=True).start()
    print(json.dumps({"pid": os.getpid(), "creator": creator_tid[0]}), flush=True)
    for line in sys.stdin:
        command, _, arg = line.strip().partition(" ")
        if command == "spawn":
            answer: object = start_waiters(int(arg))
        elif command == "via-creator":
            reply: queue.Queue[list[int]] = queue.Queue()
            requests.put((int(arg), reply))
            answer = reply.get()
        elif command == "own":
            answer = start_waiters(1, {int(c) for c in arg.split(",")})[0]
        else:
            answer = f"unknown command {command!r}"
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
