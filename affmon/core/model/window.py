"""A window of snapshots: the intervals between samples taken one after another, oldest
first. ``pin --suggest``, ``tune``'s candidates and the monitor's pin dialog size a job
over one, as ``diagnose`` sizes it over every interval of its run; ``tune`` measures each
placement over one.

``sample_window`` takes the samples and makes each interval's snapshot as the tick every
front end runs makes it (``affmon.core.rules.tick``: ``make_snapshot`` given the snapshot
before). ``widened`` adds an interval to a window: the monitor and ``diagnose`` keep the
intervals their ticks closed with it, and ``sample_window`` the intervals it closes.
Pure: nothing here reads the system but through the ``sample`` it is handed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from affmon.core.model.rates import Snapshot, make_snapshot
from affmon.core.model.samples import Sample
from affmon.core.model.topology import Topology

# Waits that many seconds; a true answer ends the window there (``threading.Event.wait``
# once its event is set). ``time.sleep`` answers None: it never ends one.
Wait = Callable[[float], object]


def widened(
    window: tuple[Snapshot, ...],
    snapshot: Snapshot,
    length: int | None = None,
    *,
    earlier: Callable[[Snapshot], Snapshot] | None = None,
) -> tuple[Snapshot, ...]:
    """``window`` with ``snapshot`` added last: the newest ``length`` of them, or all.
    ``earlier``: what the snapshot that was last is kept as from now on (the monitor keeps
    only what sizing reads of an earlier interval, ``affmon.core.plan.need.for_need``)."""
    if earlier is not None and window:
        window = (*window[:-1], earlier(window[-1]))
    grown = (*window, snapshot)
    return grown if length is None or len(grown) <= length else grown[-length:]


def sample_window(
    sample: Callable[[], Sample],
    topology: Topology,
    every_s: float,
    *,
    intervals: int | None = None,
    seconds: float | None = None,
    wait: Wait = time.sleep,
) -> tuple[Snapshot, ...]:
    """The snapshots of consecutive intervals, oldest first: a sample at once, then one
    after each wait of ``every_s``, for ``intervals`` intervals or until they cover
    ``seconds`` (the last wait cut to what is left), whichever comes first. A wait that
    answers true ends the window with the intervals closed before it (none, at the first)."""
    if intervals is None and seconds is None:
        raise ValueError("a window is so many intervals or so many seconds long")
    count = math.inf if intervals is None else intervals
    left = math.inf if seconds is None else seconds
    window: tuple[Snapshot, ...] = ()
    previous = sample()
    while len(window) < count and left > 1e-6:
        if wait(min(every_s, left)):
            break
        current = sample()
        snapshot = make_snapshot(previous, current, topology, before=window[-1] if window else None)
        window = widened(window, snapshot)
        left -= snapshot.interval_s
        previous = current
    return window
