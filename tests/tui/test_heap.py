"""The collector's settings: raised at the command's start, and what is alive frozen once,
when the first measured view is on screen; an app made by a test freezes nothing."""

from __future__ import annotations

import gc

import pytest

from affmon.tui import heap
from tests.tui.helpers import list_app, step

SIZE = (140, 40)


def test_at_start_raises_the_thresholds():
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)  # CPython's defaults (another test may have run the command in-process)
        heap.at_start()
        assert gc.get_threshold() == heap.THRESHOLDS
        assert heap.THRESHOLDS[0] > 700
    finally:
        gc.set_threshold(*before)


@pytest.mark.parametrize("asked", [True, False])
async def test_the_heap_is_settled_once_after_the_first_measured_view_only_when_asked(monkeypatch, asked):
    settled: list[bool] = []

    app = list_app("clean")
    app.settle_heap = asked
    monkeypatch.setattr(heap, "settle", lambda: settled.append(app.view is not None and app.view.measured))
    async with app.run_test(size=SIZE) as pilot:
        await step(app, pilot, 4)
        await pilot.pause()
    assert settled == ([True] if asked else [])
