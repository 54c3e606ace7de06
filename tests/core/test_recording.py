"""Recordings: exact round trip of real samples, and one-line errors on bad files."""

import gzip
import json
from pathlib import Path

import pytest

from affmon.core.errors import ParseError
from affmon.core.recording.format import header_line, read_recording, sample_line

RECORDING = Path(__file__).parent.parent / "fixtures" / "recordings" / "hogs.jsonl.gz"


def recorded_lines() -> list[str]:
    with gzip.open(RECORDING, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def test_round_trip_is_exact():
    lines = recorded_lines()
    header, samples = read_recording(lines, "hogs")
    samples = list(samples)
    assert len(samples) == 5
    assert [sample_line(s) for s in samples] == lines[1:]
    again, _ = read_recording([header_line(header.topology, header.host, header.nvml, header.interval_s)])
    assert again == header
    assert header.topology.gpus[0].pci_bus_id == "0000:00:06.0"
    assert any(p.kernel for p in samples[0].processes) and any(p.watched for p in samples[0].processes)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([], "empty file"),
        (["not json"], "bad header line"),
        (['{"something": 1}'], "not an affmon recording"),
        (['{"affmon_recording": 99}'], "recording format 99"),
        (['{"affmon_recording": 1}'], "bad header line"),
    ],
)
def test_bad_headers(lines, message):
    with pytest.raises(ParseError, match=message):
        read_recording(lines, "f")


def test_bad_sample_line_names_its_line():
    lines = recorded_lines()
    broken = json.loads(lines[2])
    broken["sample"]["processes"][0]["threads"][0] = [1, 2]
    _, samples = read_recording([lines[0], lines[1], json.dumps(broken)], "f")
    with pytest.raises(ParseError, match="line 3: thread row has 2 fields"):
        list(samples)
