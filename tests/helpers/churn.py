"""Process and thread churn for the stress test: ``python churn.py SECONDS [WIDTH]``.

Prints ``{"pid": ...}`` on one line, then, until SECONDS have passed, loops: starts WIDTH
threads that live about a millisecond, and forks WIDTH children that each start a thread
of their own, live a few milliseconds and exit; then reaps the children. So PIDs and TIDs
appear and vanish hundreds of times a second, some between the sampler's listing of
``/proc`` and its reading of a task's files. At the end it prints
``{"threads": N, "processes": M, "seconds": S}`` (what it made, for the rate).
"""

import json
import os
import sys
import threading
import time


def short_life() -> None:
    time.sleep(0.001)


def child() -> None:
    t = threading.Thread(target=short_life)
    t.start()
    time.sleep(0.003)
    t.join()
    os._exit(0)


def main() -> None:
    seconds = float(sys.argv[1])
    width = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    print(json.dumps({"pid": os.getpid()}), flush=True)
    threads = processes = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        batch = [threading.Thread(target=short_life) for _ in range(width)]
        for t in batch:
            t.start()
        children = []
        for _ in range(width):
            pid = os.fork()
            if pid == 0:
                child()
            children.append(pid)
        for t in batch:
            t.join()
        for pid in children:
            os.waitpid(pid, 0)
        threads += width * 2  # each child's thread counts too
        processes += width
    print(json.dumps({"threads": threads, "processes": processes, "seconds": time.monotonic() - start}), flush=True)


if __name__ == "__main__":
    main()
