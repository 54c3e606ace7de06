"""Render ``affmon fleet``'s screenshots from the recorded answers of a real Prometheus over
the five replaying exporters (tests/fixtures/fleet/five.json): ``python -m bench.fleet_screenshots``.

Writes ``screenshots/fleet-80x24.svg`` and ``screenshots/fleet-160x45.svg`` (the fleet view),
and ``screenshots/fleet-node-160x45.svg`` (Enter on the worst job: its node's processes), with
Textual's ``save_screenshot``, never by hand. The clock is the recording's: the header says
when the answers were read.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from affmon.fleet.app import FleetApp  # noqa: E402
from affmon.fleet.model import node_processes  # noqa: E402
from affmon.fleet.source import Answers, Cost  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "fleet" / "five.json"
COST = Cost(3, 0.005)  # a refresh of the real five-exporter fleet: 3 queries, 5 ms (docs/fleet.md)


async def shoot(width: int, height: int, name: str, node: bool) -> None:
    data = json.loads(FIXTURE.read_text())
    fleet = Answers.from_json(data["answers"]).fleet()
    app = FleetApp(
        lambda: (fleet, COST),
        lambda instance: node_processes(data["node_answers"][instance]),
        url="http://prometheus:9090",
        interval_s=5,
        first=(fleet, COST),
        autostart=False,
    )
    async with app.run_test(size=(width, height)) as pilot:
        for _ in range(3):
            await pilot.pause()
        if node:
            await pilot.press("enter")
            for _ in range(5):
                await pilot.pause()
        app.save_screenshot(filename=name, path=str(ROOT / "screenshots"))
    print(f"wrote screenshots/{name}")


def main() -> None:
    os.environ["TZ"] = "UTC"
    time.tzset()
    asyncio.run(shoot(80, 24, "fleet-80x24.svg", node=False))
    asyncio.run(shoot(160, 45, "fleet-160x45.svg", node=False))
    asyncio.run(shoot(160, 45, "fleet-node-160x45.svg", node=True))


if __name__ == "__main__":
    main()
