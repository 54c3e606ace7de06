"""Without NVML the monitor says so in one line at every width from 80 columns: the header
shortens the line to "no NVML: CPU-only" before it would drop it (a CPU-only recording,
replayed: the replay's own marker outranks it, so a live header keeps it narrower still)."""

from __future__ import annotations

import pytest

from affmon.tui.model.header_line import CPU_ONLY_SHORT
from affmon.tui.widgets.header import HeaderBar
from tests.tui.helpers import replay_app, step


async def header_at(width: int) -> tuple[str, str | None]:
    """The header line as drawn after two samples, and the NVML status it was given."""
    app = replay_app("cpu_only")
    async with app.run_test(size=(width, 24)) as pilot:
        await step(app, pilot, 2)
        header = app.query_one(HeaderBar)
        view = header._last[0] if header._last is not None else None
        return header.text.plain, None if view is None else view.nvml_status


@pytest.mark.parametrize(("width", "whole"), [(200, True), (100, False), (80, False)])
async def test_a_cpu_only_monitor_says_so_at_every_width(width: int, whole: bool) -> None:
    line, status = await header_at(width)
    assert status is not None and status.startswith("no NVML")  # the recording is CPU-only
    assert len(line) <= width and line.startswith("affmon")
    if whole:
        assert status in line and CPU_ONLY_SHORT not in line, line
    else:
        assert CPU_ONLY_SHORT in line and status not in line, line
