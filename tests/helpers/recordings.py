"""The H200 recordings (fixtures/recordings/SOURCES.md) as samples, for the TUI's tests."""

from __future__ import annotations

import gzip
from functools import cache
from pathlib import Path

from affmon.core.model.samples import Sample
from affmon.core.recording.format import Header, read_recording
from affmon.sources.stream import SourceInfo
from affmon.tui.model.monitor import Monitor
from affmon.tui.model.views import View

RECORDINGS = Path(__file__).parent.parent / "fixtures" / "recordings"


@cache
def load(name: str) -> tuple[Header, tuple[Sample, ...]]:
    with gzip.open(RECORDINGS / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        header, samples = read_recording(f, name)
        return header, tuple(samples)


def monitor(name: str, **kwargs: int) -> Monitor:
    header, samples = load(name)
    info = SourceInfo(header.host or "?", header.nvml, header.interval_s or 1.0, name, len(samples))
    return Monitor(header.topology, info, **kwargs)


def views(name: str, **kwargs: int) -> list[View]:
    """Every view of a recording, in order (one fewer than its samples)."""
    m = monitor(name, **kwargs)
    out = []
    for s in load(name)[1]:
        v = m.feed(s)
        if v is not None:
            out.append(v)
    return out


def last_view(name: str) -> View:
    return views(name)[-1]
