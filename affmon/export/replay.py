"""``affmon export --replay``: a recording served as if the machine it was made on were
being sampled now, so that a fleet of exporters (and the alerts and dashboards over them)
can be stood up on one machine (docs/export.md, "A fleet on one machine").

The samples come from ``ReplaySource``, the same reader as ``affmon --replay``, paced as
it paces them (each recorded gap divided by ``speed``); the exporter's state is made from
them by the same ``step`` as live. Two things differ from a plain replay:

* **It loops** unless told to play once. A fleet rig runs for as long as its alerts'
  ``for`` (minutes) and its dashboards' ranges, and a recording lasts seconds. The first
  sample of each new pass is older than the last one of the pass before, so ``step``
  takes it as it takes any sample that is not newer than the last: a tick with no interval
  to show, which keeps the findings, their debounce and the counters. The next interval
  (the recording's first) carries on from there: counters keep rising by the recording's
  increases, so ``rate()`` reads the recorded rates, and a finding present at the end and
  at the start of the recording never leaves the exposition at the seam (its alert is not
  reset). ``affmon_export_replay_restarts_total`` counts the passes.
* **Each sample's wall time is when it is played**, so
  ``affmon_export_last_sample_timestamp_seconds`` moves as a live exporter's does.

Played once, the feed returns None after the last sample; the exporter then keeps serving
the state the recording left, with ``affmon_export_replay_ended`` 1.

The whole recording is read through once when the feed opens (``check``), so a damaged
line anywhere is one line and exit status 2 before anything is served, not an error
counted minutes later on every pass.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Callable

from affmon.core.errors import SourceError
from affmon.core.model.samples import Sample
from affmon.export.state import ReplayStatus
from affmon.sources.stream import ReplaySource


def check(path: str) -> int:
    """Samples in the recording at ``path``, each one read and checked as the replay will
    read it; an ``AffmonError`` naming the file (and line) for anything it would refuse."""
    if os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):
        raise SourceError(f"--replay {path}: not a regular file; the exporter plays it again from its start")
    source = ReplaySource(path)
    try:
        count = 0
        while source.next_sample() is not None:
            count += 1
        return count
    finally:
        source.close()


class ReplayFeed:
    """A recording as the exporter's sampler: ``sample`` for each tick, ``pace_s`` for the
    wait after it, ``status`` for the replay's own series. Called from one thread at a time."""

    def __init__(
        self, path: str, speed: float = 1.0, *, loop: bool = True, clock: Callable[[], float] = time.time
    ) -> None:
        self.samples = check(path)
        self._open: Callable[[], ReplaySource] = functools.partial(ReplaySource, path, speed)
        self._source = self._open()
        self.topology = self._source.topology
        self.info = self._source.info
        self.header = self._source.header
        self.name = os.path.basename(path)
        self.speed = speed
        self.loop = loop
        self._clock = clock
        self._status = ReplayStatus()

    @property
    def status(self) -> ReplayStatus:
        return self._status

    def sample(self) -> Sample | None:
        """The next sample, its wall time now; None once a replay played once has ended."""
        if self._status.ended:
            return None
        sample = self._source.next_sample()
        if sample is None:  # the file ended before the samples counted: it changed since
            self._restart()
            sample = self._source.next_sample()
            if sample is None:
                raise SourceError(f"--replay {self.name}: no samples left in it")
        if self._source.exhausted:
            if self.loop:
                self._restart()
            else:
                self._status = dataclasses.replace(self._status, ended=True)
        return dataclasses.replace(sample, wall_time_s=self._clock())

    def _restart(self) -> None:
        self._source.close()
        self._source = self._open()
        self._status = dataclasses.replace(self._status, restarts=self._status.restarts + 1)

    def pace_s(self) -> float:
        """Seconds from the end of one tick to the next: the recorded gap after the sample
        just played, divided by the speed (the recording's interval across the loop's seam)."""
        return self._source.pace_s()

    def close(self) -> None:
        self._source.close()
