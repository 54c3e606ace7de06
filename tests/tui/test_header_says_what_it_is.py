"""What the screen is (live, or a replay and its position) is in the header at every
width, also where a CPU-only machine's NVML warning competes for the room."""

from __future__ import annotations

import dataclasses

import pytest

from affmon.tui.model.header_line import SEPARATOR, fit, header_segments
from tests.helpers.recordings import views

NO_NVML = "no NVML (NVML Shared Library Not Found); running CPU-only"


@pytest.mark.parametrize("width", [60, 80, 100, 140, 200])
def test_a_cpu_only_replay_says_it_is_a_replay_at_every_width(width):
    header = dataclasses.replace(views("clean")[-1].header, nvml_status=NO_NVML)
    assert not header.live and header.source.startswith("replay ")
    line = SEPARATOR.join(t for _, t, _ in fit(header_segments(header, paused=False, clock_text="12:00:00"), width))
    assert len(line) <= width
    assert "replay" in line, line
    if header.position:
        assert header.position in line, line


@pytest.mark.parametrize("width", [60, 80, 100, 140, 200])
def test_live_the_clock_stays_at_every_width(width):
    header = dataclasses.replace(
        views("clean")[-1].header, nvml_status=NO_NVML, source="live", live=True, position=None
    )
    line = SEPARATOR.join(t for _, t, _ in fit(header_segments(header, paused=False, clock_text="12:00:00"), width))
    assert "12:00:00" in line, line
