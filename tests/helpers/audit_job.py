"""A pretend multi-rank job for ``affmon audit``'s live tests, on a machine without GPUs.

``python audit_job.py --visible 1,0 --rank 0 --rank 0-1:1`` starts one rank per
``--rank CPUS[:WORKER_CPUS]``, each with LOCAL_RANK (its position) and
CUDA_VISIBLE_DEVICES in its environment, as torchrun starts ranks, and pinned to CPUS
before it runs. A rank given WORKER_CPUS forks one worker that pins itself there (a
DataLoader worker whose mask collapsed after the fork). Prints one JSON line
``{"launcher": PID, "ranks": [PID, ...], "workers": [PID, ...]}`` once every rank and
worker is pinned, then waits until killed (at most ``--seconds``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def cpus(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        out.update(range(int(first), int(last or first) + 1))
    return out


def rank(spec: str, seconds: float) -> None:
    """The rank itself (started with its mask already set by the launcher)."""
    _, _, worker_cpus = spec.partition(":")
    worker = None
    if worker_cpus:
        read_end, write_end = os.pipe()
        worker = os.fork()
        if worker == 0:
            os.sched_setaffinity(0, cpus(worker_cpus))
            os.write(write_end, b"x")
            time.sleep(seconds)
            os._exit(0)
        os.read(read_end, 1)
    print(json.dumps({"pid": os.getpid(), "worker": worker}), flush=True)
    time.sleep(seconds)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", action="append", default=[], help="CPUS[:WORKER_CPUS], once per rank")
    ap.add_argument("--visible", default=None, help="CUDA_VISIBLE_DEVICES for every rank")
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--as-rank", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.as_rank is not None:
        rank(a.as_rank, a.seconds)
        return
    children = []
    for local_rank, spec in enumerate(a.rank):
        env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "CUDA_VISIBLE_DEVICES")}
        env["LOCAL_RANK"] = str(local_rank)
        if a.visible is not None:
            env["CUDA_VISIBLE_DEVICES"] = a.visible
        mask = cpus(spec.partition(":")[0])
        children.append(
            subprocess.Popen(
                [sys.executable, __file__, "--as-rank", spec, "--seconds", str(a.seconds)],
                env=env,
                stdout=subprocess.PIPE,
                text=True,
                preexec_fn=lambda mask=mask: os.sched_setaffinity(0, mask),
            )
        )
    said = [json.loads(c.stdout.readline()) for c in children if c.stdout is not None]
    print(
        json.dumps(
            {
                "launcher": os.getpid(),
                "ranks": [s["pid"] for s in said],
                "workers": [s["worker"] for s in said if s["worker"]],
            }
        ),
        flush=True,
    )
    time.sleep(a.seconds)


if __name__ == "__main__":
    main()
