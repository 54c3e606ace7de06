"""What closing a probed loop's interval costs: ``LoopSampler.window()`` on one rank of
``bench.workloads.ranks`` (a main thread busy a quarter of the time, 24 intra-op threads, 6
worker processes of 2 threads that wake every 0.5 s for microseconds: workers that barely
run, beside a loop that never waits for data), after 20 probes 50 ms apart, as the monitor's
ticker closes it once a second. Prints the median thread CPU of a window over ``--windows``
windows (the first two left out) and how many worker threads' sleeping places it read.

``--tree DIR`` measures another checkout's ``affmon`` the same way, in a child process,
after this one's: alternate them and compare in the same run.

    python -m bench.cost.loop_window_cost [--windows 12] [--tree DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def measure(windows: int) -> str:
    from affmon.collect.loop import LoopSampler  # the checkout on sys.path first: this one, or --tree's

    rank = subprocess.Popen(
        [sys.executable, "-m", "bench.workloads.ranks", "--seconds", str(windows * 2 + 20)],
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        assert rank.stdout is not None
        rank.stdout.readline()  # every thread of it runs
        sampler = LoopSampler(rank.pid)
        costs, read = [], 0
        for _ in range(windows):
            for _ in range(20):
                time.sleep(0.05)
                sampler.probe()
            start = time.thread_time()
            window = sampler.window()
            costs.append(time.thread_time() - start)
            read = 0 if window.workers is None else len(window.workers.waits)
        median_ms = statistics.median(costs[2:]) * 1e3
        return f"window() {median_ms:.2f} ms of CPU (median), worker threads' places read: {read}"
    finally:
        rank.kill()
        rank.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=12)
    parser.add_argument("--tree", help="another checkout to measure after this one")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.windows < 3:
        parser.error("--windows: at least 3 (the first two are left out)")
    if args.tree and not (Path(args.tree) / "affmon" / "collect" / "loop.py").is_file():
        parser.error(f"--tree: {args.tree} holds no affmon checkout")
    print(f"{'' if args.child else 'this tree: '}{measure(args.windows)}", flush=True)
    if args.tree and not args.child:
        # The script by its path: its own folder first on sys.path, then PYTHONPATH, so the
        # child imports the other checkout's affmon.
        print(f"{args.tree}: ", end="", flush=True)
        script = ROOT / "bench" / "cost" / "loop_window_cost.py"
        subprocess.run(
            [sys.executable, str(script), "--child", "--windows", str(args.windows)],
            env={**os.environ, "PYTHONPATH": str(Path(args.tree).resolve())},
            check=True,
        )


if __name__ == "__main__":
    main()
