"""One tick for every front end: the monitor, the exporter and ``diagnose`` reach the
same findings from the same samples, and the tick's own rules (what closes an interval,
what happens to an exited process's findings) hold for all three."""

from __future__ import annotations

import dataclasses

import pytest

from affmon.commands.diagnose import diagnose_run
from affmon.core.rules import tick
from affmon.export.state import ExportState, step
from tests.helpers.recordings import load, monitor


def keys(findings) -> list[tuple[str, int | None, int]]:
    return [(f.code, f.pid, int(f.severity)) for f in findings]


@pytest.mark.parametrize("name", ["hogs", "narrow", "overlap", "single_core", "clean", "ddp2_overlap"])
def test_every_front_end_reaches_the_same_findings(name):
    header, samples = load(name)
    topo = header.topology
    m = monitor(name)
    views = [v for v in (m.feed(s) for s in samples) if v is not None]
    state = ExportState()
    for s in samples:
        state = step(state, s, topo)
    found, _last, _ = diagnose_run(list(samples), topo, {})
    assert keys(views[-1].findings) == keys(state.findings) == keys(found)
    if name != "clean":
        assert found  # a planted problem is named by all three alike, not vacuously equal


def test_the_first_sample_and_one_not_newer_close_no_interval():
    header, samples = load("hogs")
    state = tick.start(header.topology)
    state = tick.advance(state, samples[0])
    assert not state.closed and state.samples == 1 and state.intervals == 0
    stale = dataclasses.replace(samples[1], monotonic_s=samples[0].monotonic_s)
    state = tick.advance(state, stale)
    assert not state.closed and state.intervals == 0
    state = tick.advance(state, samples[2])
    assert state.closed and state.intervals == 1 and state.snapshot is not None
    assert state.snapshot.interval_s == pytest.approx(samples[2].monotonic_s - stale.monotonic_s)


def test_an_exited_process_takes_its_findings_with_it_in_every_front_end():
    header, samples = load("hogs")
    topo = header.topology
    m = monitor("hogs")
    for s in samples:
        m.feed(s)
    raised = {f.pid for f in m.state.findings if f.pid is not None}
    assert raised
    gone = raised.pop()
    without = dataclasses.replace(
        samples[-1],
        monotonic_s=samples[-1].monotonic_s + 1,
        processes=tuple(p for p in samples[-1].processes if p.pid != gone),
    )
    view = m.feed(without)
    assert view is not None and gone not in {f.pid for f in view.findings}
    assert all(key[1] != gone for key in m.tracker.tracks)
    state = ExportState()
    for s in (*samples, without):
        state = step(state, s, topo)
    assert gone not in {f.pid for f in state.findings}
