"""A process with a known shape for live tests: ``python workload.py [options]``.

Pins itself (so every thread inherits the mask), starts busy threads that really use a
CPU (hashlib releases the GIL on large buffers), prints one JSON line with its pid and
thread ids, then runs until killed or ``--seconds`` pass.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import threading
import time


def busy(stop: threading.Event) -> None:
    data = b"x" * (1 << 20)
    while not stop.is_set():
        hashlib.sha256(data).digest()


def sleeper(stop: threading.Event, cpus: set[int] | None) -> None:
    if cpus is not None:
        os.sched_setaffinity(0, cpus)  # 0 = this thread only
    stop.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpus", default=None, help="comma-separated CPUs to pin the process to")
    ap.add_argument("--busy", type=int, default=0)
    ap.add_argument("--sleepers", type=int, default=0)
    ap.add_argument("--sleeper-cpus", default=None, help="mask each sleeper thread sets on itself")
    ap.add_argument("--child", action="store_true", help="also start a child workload (a DataLoader-like worker)")
    ap.add_argument("--seconds", type=float, default=60.0)
    a = ap.parse_args()
    if a.cpus:
        os.sched_setaffinity(0, {int(c) for c in a.cpus.split(",")})
    stop = threading.Event()
    tids: dict[str, list[int]] = {"busy": [], "sleepers": []}
    ready = threading.Barrier(a.busy + a.sleepers + 1)

    def run(kind: str, fn, *args):
        tids[kind].append(threading.get_native_id())
        ready.wait()
        fn(stop, *args)

    sleeper_cpus = {int(c) for c in a.sleeper_cpus.split(",")} if a.sleeper_cpus else None
    for _ in range(a.busy):
        threading.Thread(target=run, args=("busy", busy), daemon=True).start()
    for _ in range(a.sleepers):
        threading.Thread(target=run, args=("sleepers", sleeper, sleeper_cpus), daemon=True).start()
    ready.wait()
    child_pid = None
    if a.child:
        child = subprocess.Popen(
            [sys.executable, __file__, "--sleepers", "1", "--seconds", str(a.seconds)], stdout=subprocess.PIPE
        )
        child_pid = json.loads(child.stdout.readline())["pid"]
    time.sleep(0.05)  # sleepers have set their masks
    print(json.dumps({"pid": os.getpid(), "child": child_pid, **tids}), flush=True)
    stop.wait(a.seconds)


if __name__ == "__main__":
    main()
