"""How often the exporter samples: no more often than it is scraped, within bounds. Pure.

Prometheus scrapes every 15 to 60 s; sampling every second between scrapes would cost
fifteen to sixty samples for each one read. So the exporter samples at ``--interval``
until it has seen two scrapes, then at the pace scrapes come (the median gap of the last
few), never faster than ``--interval`` and never slower than ``MAX_INTERVAL_S``; with no
scrape for several of those gaps (the scraper went away) it samples every
``MAX_INTERVAL_S``, a bounded background pace that keeps the next scrape's rates and
findings meaningful. Rates and findings then cover the interval between two samples,
which is the interval Prometheus itself would see between two scrapes.
"""

from __future__ import annotations

import statistics
from collections import deque

MAX_INTERVAL_S = 60.0
GAPS_KEPT = 5
GONE_AFTER_GAPS = 4  # no scrape for this many expected gaps: nobody is scraping


class Pace:
    def __init__(self, interval_s: float, max_interval_s: float = MAX_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.max_interval_s = max(max_interval_s, interval_s)
        self._last_scrape: float | None = None
        self._gaps: deque[float] = deque(maxlen=GAPS_KEPT)

    def scraped(self, now: float) -> None:
        """A scrape arrived at ``now`` (monotonic seconds)."""
        if self._last_scrape is not None and now > self._last_scrape:
            self._gaps.append(now - self._last_scrape)
        self._last_scrape = now

    def next_interval(self, now: float) -> float:
        """Seconds from ``now`` to the next sample."""
        if not self._gaps or self._last_scrape is None:
            return self.interval_s
        gap = min(max(statistics.median(self._gaps), self.interval_s), self.max_interval_s)
        if now - self._last_scrape > GONE_AFTER_GAPS * gap:
            return self.max_interval_s
        return gap
