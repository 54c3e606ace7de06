"""A window of snapshots, made one way (``affmon.core.model.window``): how long it waits and
how many intervals it closes, that a wait can end it, that its snapshots are those of the
plain ``make_snapshot`` of each pair of samples, and how ``widened`` keeps a window."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

import pytest

from affmon.core.model.rates import Snapshot, make_snapshot
from affmon.core.model.samples import Sample
from affmon.core.model.topology import Topology
from affmon.core.model.window import sample_window, widened
from tests.helpers.recordings import load


class Clock:
    """A recording's samples handed out one by one, each taken at the clock's time: a wait
    moves the clock by what it waits, and taking a sample by ``cost_s``."""

    def __init__(self, samples: tuple[Sample, ...], cost_s: float = 0.0, stop_at: int | None = None) -> None:
        self.samples = iter(samples)
        self.now = 1000.0
        self.cost_s = cost_s
        self.waits: list[float] = []
        self.stop_at = stop_at  # the wait (counted from 0) that answers True

    def sample(self) -> Sample:
        self.now += self.cost_s
        return dataclasses.replace(next(self.samples), monotonic_s=self.now)

    def wait(self, seconds: float) -> bool:
        if self.stop_at is not None and len(self.waits) == self.stop_at:
            return True
        self.waits.append(seconds)
        self.now += seconds
        return False


def hogs() -> tuple[Callable[..., Clock], Topology]:
    header, samples = load("hogs")
    return (lambda **kw: Clock(samples, **kw)), header.topology


def test_so_many_intervals_waits_the_interval_before_each():
    clock_of, topo = hogs()
    clock = clock_of(cost_s=0.05)
    window = sample_window(clock.sample, topo, 0.5, intervals=3, wait=clock.wait)
    assert clock.waits == [0.5, 0.5, 0.5]
    assert [round(s.interval_s, 9) for s in window] == [0.55, 0.55, 0.55]
    assert all(a.current is b.previous for a, b in itertools.pairwise(window))


def test_so_many_seconds_cuts_the_last_wait_to_what_is_left():
    clock_of, topo = hogs()
    clock = clock_of(cost_s=0.05)
    window = sample_window(clock.sample, topo, 0.4, seconds=1.0, wait=clock.wait)
    # 0.45 s closed, then 0.45 s: 0.1 s left, waited; the third interval covers the rest.
    assert [round(w, 9) for w in clock.waits] == [0.4, 0.4, 0.1]
    assert len(window) == 3 and sum(s.interval_s for s in window) >= 1.0


@pytest.mark.parametrize(("stop_at", "closed"), [(0, 0), (1, 1), (2, 2)])
def test_a_wait_that_answers_true_ends_the_window_there(stop_at, closed):
    clock_of, topo = hogs()
    clock = clock_of(stop_at=stop_at)
    window = sample_window(clock.sample, topo, 1.0, intervals=5, wait=clock.wait)
    assert len(window) == closed and len(clock.waits) == stop_at


def test_its_snapshots_are_those_of_each_pair_of_samples():
    """The window chains each snapshot to the one before, as the tick does; the values are
    those of ``make_snapshot`` on the pair alone."""
    clock_of, topo = hogs()
    clock = clock_of()
    window = sample_window(clock.sample, topo, 1.0, intervals=4, wait=clock.wait)
    pairs = [(s.previous, s.current) for s in window]
    assert window == tuple(make_snapshot(a, b, topo) for a, b in pairs)


def test_a_window_without_a_length_or_seconds_is_refused():
    clock_of, topo = hogs()
    with pytest.raises(ValueError, match="intervals or so many seconds"):
        sample_window(clock_of().sample, topo, 1.0)


def test_widened_keeps_the_newest_and_lightens_only_the_one_that_was_last():
    clock_of, topo = hogs()
    clock = clock_of()
    snaps = sample_window(clock.sample, topo, 1.0, intervals=4, wait=clock.wait)
    lightened: list[Snapshot] = []

    def earlier(s: Snapshot) -> Snapshot:
        lightened.append(s)
        return dataclasses.replace(s, processes=())

    window: tuple[Snapshot, ...] = ()
    for s in snaps:
        window = widened(window, s, 3, earlier=earlier)
    assert lightened == list(snaps[:-1])  # each once, as a newer one came
    assert window[-1] is snaps[-1] and len(window) == 3
    assert [s.current for s in window] == [s.current for s in snaps[1:]]
    assert all(s.processes == () for s in window[:-1])
    assert widened((), snaps[0]) == (snaps[0],)
    assert widened(snaps[:3], snaps[3]) == snaps  # no length: all kept, as they were
