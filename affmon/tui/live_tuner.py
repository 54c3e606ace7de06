"""A ``Tuner`` over live sources of its own (the monitor's sampler belongs to its sampling
thread), closed with it: what ``T`` in the monitor runs. Loaded when ``T`` is pressed."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from affmon.actions.journal import Journal
from affmon.actions.tune import Row, Tuner

if TYPE_CHECKING:
    from affmon.sources.live import LiveSources


class LiveTuner(Tuner):
    def __init__(
        self, sources: LiveSources, pid: int, *, start_ticks: int, journal: Journal, on_change: Callable[[Row], None]
    ) -> None:
        super().__init__(
            pid,
            start_ticks=start_ticks,
            sampler=sources.sampler,
            topology=sources.topology,
            journal=journal,
            on_change=on_change,
        )
        self.sources = sources

    def close(self) -> None:
        self.release()
        self.sources.close()
