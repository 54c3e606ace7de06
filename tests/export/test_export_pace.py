"""The exporter samples no more often than it is scraped, within bounds: a table of the
pacing rule, and the sampler thread following it."""

from __future__ import annotations

import dataclasses
import itertools
import time

import pytest

from affmon.core.model.samples import Sample
from affmon.export.pace import GONE_AFTER_GAPS, MAX_INTERVAL_S, Pace
from tests.helpers.export import fetch, serving, topology
from tests.helpers.recordings import load


def paced(scrapes: list[float], now: float, interval_s: float = 1.0) -> float:
    pace = Pace(interval_s)
    for at in scrapes:
        pace.scraped(at)
    return pace.next_interval(now)


@pytest.mark.parametrize(
    ("scrapes", "now", "expected"),
    [
        ([], 0.0, 1.0),  # nobody scraped yet: --interval
        ([10.0], 11.0, 1.0),  # one scrape tells no pace
        ([0.0, 15.0, 30.0], 31.0, 15.0),  # Prometheus every 15 s: a sample per scrape
        ([0.0, 0.2, 0.4, 0.6], 0.7, 1.0),  # scraped faster than --interval: never faster than it
        ([0.0, 300.0, 600.0], 601.0, MAX_INTERVAL_S),  # every 5 min: bounded
        ([0.0, 15.0, 30.0], 30.0 + GONE_AFTER_GAPS * 15.0 + 1, MAX_INTERVAL_S),  # the scraper went away
        ([0.0, 15.0, 30.0, 45.0, 60.0, 61.0], 62.0, 15.0),  # one odd gap does not move the median
    ],
)
def test_the_pace_follows_the_scrapes(scrapes, now, expected):
    assert paced(scrapes, now) == pytest.approx(expected)


def test_the_sampler_slows_down_to_the_scrapes_it_serves():
    """Scraped every 0.6 s at --interval 0.1, the sampler takes about one sample a scrape,
    not six (before, it sampled every interval whatever the scrapes). Real scrapes over
    HTTP, the samples counted as the exporter counts them."""
    _header, samples = load("clean")
    feed = itertools.cycle(samples)
    shift = itertools.count()

    def sample() -> Sample:
        s = next(feed)
        return dataclasses.replace(s, monotonic_s=s.monotonic_s + 1000 * next(shift))

    with serving(sample, topology(), interval_s=0.1) as (exporter, url):
        for _ in range(6):
            fetch(url)
            time.sleep(0.6)
        before = exporter.state.samples_total
        for _ in range(5):
            fetch(url)
            time.sleep(0.6)
        during = exporter.state.samples_total - before
    # Five scrapes 0.6 s apart: about one sample each, never the thirty of one per 0.1 s.
    assert 3 <= during <= 10, during
