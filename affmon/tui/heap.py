"""The cyclic garbage collector's settings for the monitor's process.

The monitor allocates many short-lived objects a tick (Textual's strips and segments, the
sample's and the view's values) beside about 100,000 long-lived ones (Textual, Rich, the
widgets, the history). With Python's default thresholds (700, 10, 10) a collection of the
young generation runs several times a tick, and every tenth of those also walks the
middle one; every so often a full collection walks everything. Measured with
``gc.callbacks`` (the collecting thread's CPU time) over a minute of the monitor at 1 Hz
watching one training-like rank, on the two-core VM, the long-lived objects frozen:
0.28-0.36 s of CPU in collections with the defaults; 0.16 s at (5000, 20, 100) (55 young
collections, 2 middle ones, no full one), of about 6 s of CPU in all. The full
collections are kept at every 20th middle one here, so that garbage in a cycle that
lived long enough to reach the oldest generation is not held for minutes.

``at_start`` raises the thresholds before Textual is imported (its import makes many
objects that all live on); ``settle`` collects once and freezes what is alive when the
first measured view is on screen (the objects that live as long as the app), so later
full collections walk only what came after. Garbage held in a cycle is still collected,
later: a young collection every 5,000 allocations net of frees.
"""

from __future__ import annotations

import gc

THRESHOLDS = (5000, 20, 20)  # young, middle, full: allocations, then young and middle collections


def at_start() -> None:
    gc.set_threshold(*THRESHOLDS)


def settle() -> None:
    gc.collect()
    gc.freeze()
