"""The monitor's memory over many ticks, without a terminal: a recording replayed through
the app (Textual's headless driver, a 140x40 screen) for ``--ticks`` ticks, each sample
given a new time, and the memory Python traced (``tracemalloc``) printed every ``--every``
ticks. A monitor that holds only what a screen needs levels off once its histories are
full (300 ticks); one that keeps each tick's renders grows until its caches are full.

    python -m bench.cost.tui_memory [--recording hogs] [--ticks 600] [--every 100]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import tracemalloc

from tests.helpers.recordings import load
from tests.tui.helpers import list_app, step


async def run(name: str, ticks: int, every: int) -> None:
    _, samples = load(name)
    timed = [
        dataclasses.replace(samples[i % len(samples)], monotonic_s=1000.0 + i, wall_time_s=1e9 + i)
        for i in range(ticks + 2)
    ]
    app = list_app(name, samples=timed)
    tracemalloc.start(1)
    async with app.run_test(size=(140, 40)) as pilot:
        while app.monitor.samples_seen < ticks:
            await step(app, pilot)
            if app.monitor.samples_seen % every < 1 or app.monitor.samples_seen >= ticks:
                await pilot.pause()
                gc.collect()
                traced = tracemalloc.get_traced_memory()[0] / 2**20
                print(f"tick {app.monitor.samples_seen:6d}  traced {traced:7.2f} MiB", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recording", default="hogs", help="a recording of tests/fixtures/recordings (hogs)")
    ap.add_argument("--ticks", type=int, default=600)
    ap.add_argument("--every", type=int, default=100)
    a = ap.parse_args()
    if a.ticks < 2 or a.every < 1:
        ap.error("--ticks must be at least 2 and --every at least 1")
    asyncio.run(run(a.recording, a.ticks, a.every))


if __name__ == "__main__":
    main()
