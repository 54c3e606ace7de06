"""A process that affmon takes for "someone else's" (not python by name): ``python quiet_other.py
[--runtime PATH] [--name NAME]``.

Renames itself (``comm``) to NAME (``quietother``), starts 20 threads that wake every 0.2 s
for a few microseconds, prints one JSON line (``pid``, ``tids``), then answers commands on
stdin with one JSON line each:

* ``spin``: starts a thread that never sleeps; answers its TID;
* ``still``: stops it.

``--runtime PATH``: maps the file PATH (as a process that loaded a library of that name).
"""

import argparse
import json
import mmap
import os
import sys
import threading

stop = threading.Event()
spinning = threading.Event()


def waker() -> None:
    while not stop.wait(0.2):
        sum(range(50))


def spinner() -> None:
    while spinning.is_set():
        pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runtime", default=None)
    ap.add_argument("--name", default="quietother")
    a = ap.parse_args()
    with open("/proc/self/comm", "w") as f:
        f.write(a.name)
    keep = []
    if a.runtime:
        with open(a.runtime, "rb") as f:
            keep.append(mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ))
    threads = [threading.Thread(target=waker, daemon=True) for _ in range(20)]
    for t in threads:
        t.start()
    print(json.dumps({"pid": os.getpid(), "tids": [t.native_id for t in threads]}), flush=True)
    spin = None
    for line in sys.stdin:
        command = line.strip()
        if command == "spin":
            spinning.set()
            spin = threading.Thread(target=spinner, daemon=True)
            spin.start()
            print(json.dumps({"tid": spin.native_id}), flush=True)
        elif command == "still":
            spinning.clear()
            if spin is not None:
                spin.join()
            print(json.dumps({"ok": True}), flush=True)
    stop.set()


if __name__ == "__main__":
    main()
