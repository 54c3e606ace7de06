"""A process tree grown on request, for tests of processes started after a pin (the
DataLoader workers a training loop forks again every epoch): ``python forker.py [--cpus LIST]``.

Prints ``{"pid": ...}`` on one line, then reads commands on stdin and answers each with one
JSON line:

* ``fork [CPUS]``: forks a child, which inherits the mask of the thread that forks it (or,
  given CPUS, comma-separated, sets that mask on itself before it answers); answers its PID.
  The child serves the same commands, on pipes to its parent;
* ``to PID COMMAND``: hands COMMAND to this process's child PID; answers the child's answer;
* ``end PID``: kills this process's child PID and reaps it; answers PID.

Every process of the tree is single-threaded and stays in the session of the first, so a
test ends the whole tree with one ``killpg``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from typing import IO


def serve(commands: IO[str], answers: IO[str]) -> None:
    children: dict[int, tuple[IO[str], IO[str]]] = {}
    for line in commands:
        command, _, arg = line.strip().partition(" ")
        answer: object
        if command == "fork":
            answer = fork(children, arg)
        elif command == "to":
            pid, _, rest = arg.partition(" ")
            from_child, to_child = children[int(pid)]
            to_child.write(rest + "\n")
            to_child.flush()
            answer = json.loads(from_child.readline())
        elif command == "end":
            pid = int(arg)
            from_child, to_child = children.pop(pid)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            from_child.close()
            to_child.close()
            answer = pid
        else:
            answer = f"unknown command {command!r}"
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


def fork(children: dict[int, tuple[IO[str], IO[str]]], cpus: str) -> int:
    down_read, down_write = os.pipe()  # commands to the child
    up_read, up_write = os.pipe()  # its answers
    pid = os.fork()
    if pid == 0:
        os.close(down_write)
        os.close(up_read)
        for from_child, to_child in children.values():  # the parent's, not this child's
            from_child.close()
            to_child.close()
        if cpus:
            os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
        with os.fdopen(down_read) as commands, os.fdopen(up_write, "w") as answers:
            answers.write(json.dumps("ready") + "\n")
            answers.flush()
            serve(commands, answers)
        os._exit(0)
    os.close(down_read)
    os.close(up_write)
    from_child = os.fdopen(up_read)
    to_child = os.fdopen(down_write, "w")
    if json.loads(from_child.readline()) != "ready":
        raise RuntimeError(f"child {pid} did not start")
    children[pid] = (from_child, to_child)
    return pid


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpus", default=None, help="comma-separated CPUs to pin the process to")
    a = ap.parse_args()
    if a.cpus:
        os.sched_setaffinity(0, {int(c) for c in a.cpus.split(",")})
    print(json.dumps({"pid": os.getpid()}), flush=True)
    serve(sys.stdin, sys.stdout)


if __name__ == "__main__":
    main()
