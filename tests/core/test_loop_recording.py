"""A recorded sample with the loop probe's windows: written under each probed process,
read back exactly, recomputed the same on replay; older recordings (no ``loop`` key) read
as before; a damaged ``loop`` is one ParseError naming its line."""

from __future__ import annotations

import json

import pytest
from hypothesis import given

from affmon.core.errors import ParseError
from affmon.core.model.loop import LoopWindow
from affmon.core.recording.format import parse_sample_line, sample_line
from affmon.core.recording.loop import window_from_json, window_to_json
from affmon.core.rules import tick
from tests.helpers.loop_windows import RANK, input_window, samples, windows_st
from tests.helpers.recordings import load


def test_a_sample_with_a_loop_window_round_trips_exactly_and_replays_the_same() -> None:
    header, _ = load("clean")
    sequence = samples([input_window(), input_window(2.0)], [15, 40])
    lines = [sample_line(s) for s in sequence]
    read = [parse_sample_line(line, "f", n) for n, line in enumerate(lines, start=2)]
    assert read == sequence
    assert [sample_line(s) for s in read] == lines
    state_a = state_b = tick.start(header.topology)
    for a, b in zip(sequence, read, strict=True):
        state_a, state_b = tick.advance(state_a, a), tick.advance(state_b, b)
    assert state_a.loops[RANK].to_json() == state_b.loops[RANK].to_json()
    loops = [p for p in json.loads(lines[1])["sample"]["processes"] if "loop" in p]
    assert [p["pid"] for p in loops] == [RANK]  # written only where the probe ran


def test_a_recording_made_before_the_probe_reads_with_no_loop() -> None:
    _, recorded = load("clean")
    assert all(p.loop is None for s in recorded for p in s.processes)
    assert all('"loop"' not in sample_line(s) for s in recorded)  # and writes back unchanged


@given(windows_st)
def test_any_window_round_trips_exactly(window: LoopWindow) -> None:
    again = window_from_json(json.loads(json.dumps(window_to_json(window))), window.pid)
    assert again == window


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"probes": {"running": -1}}, "expected a count"),
        ({"probes": {"eating": 3}}, "unknown class"),
        ({"run_ns": 1.5}, "run_ns: expected a whole number"),
        ({"seconds": "1"}, "seconds: expected a finite number"),
        ({"workers": [1, 2, 3]}, "loop workers has 3 fields"),
        ({"rate_hz": 0}, "expected a positive rate"),
        ({"syscall_readable": 1}, "expected true or false"),
    ],
)
def test_a_damaged_loop_is_one_parse_error_naming_its_line(change: dict[str, object], message: str) -> None:
    sample = samples([input_window()], [15])[1]
    data = json.loads(sample_line(sample))
    process = next(p for p in data["sample"]["processes"] if p["pid"] == RANK)
    process["loop"].update(change)
    with pytest.raises(ParseError, match=f"line 7: .*{message}"):
        parse_sample_line(json.dumps(data), "f", 7)
