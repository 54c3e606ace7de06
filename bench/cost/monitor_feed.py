"""The monitor's model per tick, after minutes: ``Monitor.feed`` timed over a recording
replayed again and again (each copy shifted in time), once its histories are full.

    python -m bench.cost.monitor_feed [--recording FILE] [--ticks 400] [--tree DIR]

Prints the thread CPU time of a feed (median and quartiles over the last 100 ticks, the
histories full: ``HISTORY_LEN`` points a series). ``--tree DIR`` runs the same measure
with another checkout's ``affmon`` (the tree before a change), in a child process, and
prints both: alternate them and compare in the same run.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def measure(recording: str, ticks: int) -> list[float]:
    from affmon.core.recording.format import read_recording
    from affmon.sources.stream import SourceInfo
    from affmon.tui.model.monitor import Monitor

    with gzip.open(recording, "rt", encoding="utf-8") as f:
        header, read = read_recording(f, recording)
        samples = list(read)
    monitor = Monitor(header.topology, SourceInfo("bench", None, 1.0, "bench"))
    span = samples[-1].monotonic_s - samples[0].monotonic_s + 1.0
    out = []
    for i in range(ticks):
        s = samples[i % len(samples)]
        shift = span * (i // len(samples))
        s = dataclasses.replace(s, monotonic_s=s.monotonic_s + shift, wall_time_s=s.wall_time_s + shift)
        t0 = time.thread_time()
        view = monitor.feed(s)
        shown = None if view is None else next(iter(view.process_history), None)
        if view is not None and shown is not None:
            view.process_history[shown]  # what the UI reads: one process's history
        out.append(time.thread_time() - t0)
    return out[-100:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--recording", default=str(ROOT / "affmon" / "data" / "demo.jsonl.gz"), help="a recording (the demo's)"
    )
    ap.add_argument("--ticks", type=int, default=400)
    ap.add_argument("--tree", help="another checkout to measure beside this one")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.json:
        import affmon

        assert Path(affmon.__file__).resolve().is_relative_to(Path.cwd().resolve()), affmon.__file__
        print(json.dumps(measure(a.recording, a.ticks)))
        return
    trees = [("this tree", str(ROOT))] + ([("--tree", a.tree)] if a.tree else [])
    for r in range(a.rounds):
        for name, tree in trees:
            env = dict(os.environ, PYTHONPATH=tree)
            cmd = [sys.executable, __file__, "--json", "--recording", a.recording]
            out = subprocess.run(
                [*cmd, "--ticks", str(a.ticks)], cwd=tree, env=env, capture_output=True, text=True, check=True
            )
            times = json.loads(out.stdout)
            q = [x * 1e3 for x in statistics.quantiles(times, n=4)]
            print(f"round {r + 1} {name:10} feed {q[1]:6.2f} ms (quartiles {q[0]:.2f}-{q[2]:.2f})")


if __name__ == "__main__":
    main()
