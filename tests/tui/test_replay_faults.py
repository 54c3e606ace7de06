"""A recording whose later sample is made up (a wall time of 1e20, which time.localtime
cannot show): the app plays the samples before it, then says which line it refused in
the status bar and stops, instead of crashing while drawing the header's clock."""

from __future__ import annotations

import gzip
import json

from textual.widgets import Static

from affmon.sources.stream import ReplaySource
from affmon.tui.app import AffmonApp
from tests.helpers.recordings import RECORDINGS
from tests.tui.helpers import FakePinner, step


async def test_a_made_up_wall_time_is_refused_in_the_status_bar(tmp_path):
    lines = gzip.decompress((RECORDINGS / "hogs.jsonl.gz").read_bytes()).decode().splitlines()
    doc = json.loads(lines[4])  # the fourth sample
    doc["sample"]["wall_time_s"] = 1e20
    lines[4] = json.dumps(doc)
    path = tmp_path / "future.jsonl"
    path.write_text("\n".join(lines) + "\n")

    app = AffmonApp(ReplaySource(str(path)), FakePinner(), autostart=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await step(app, pilot, 2)  # samples 1-2, then 3
        for _ in range(2):  # the refused one, then again: it stays refused
            assert app.tick()
            await app.ticks_landed()  # the app shows why it failed
            await pilot.pause()
        status = str(app.screen.query_one("#status", Static).render())
        assert "future.jsonl, line 5: wall_time_s 1e+20 is not a time" in status
        assert app.view is not None and app.view.header.position == "sample 3/5"
