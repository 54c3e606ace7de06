"""`affmon export` against requests that differ only where the body does not: new query
strings, new ``Accept`` values, long URLs, new ``name[]`` filters, pipelined. A real server on
127.0.0.1, the flood from a process of its own (bench/attacks/export_flood.py's
``shape_flood``), and a scrape timed every 0.5 s as Prometheus sends it."""

from __future__ import annotations

import socket
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from affmon.core.model.samples import Sample
from affmon.export.render import Renderer
from affmon.export.server import PIPELINED_LIMIT, MetricsServer
from affmon.export.service import Exporter
from affmon.export.state import ExportState
from bench.attacks.export_flood import TEXT_ACCEPTS, fetch_raw, read_answer, shape_flood
from tests.helpers.export import process, run, sample, thread, topology, wait_for

THREADS = 1500  # a --threads body of about 1.1 MB: formatting it takes 0.1 to 0.2 s of CPU
SCRAPE_EVERY_S = 0.5
SCRAPES = 4  # a round's
ROUNDS = 6


def big_job_state() -> ExportState:
    """Two samples of the big job: its --threads body has every thread."""
    job = big_job()
    return run(job(), job())


def big_job() -> Callable[[], Sample]:
    """Samples of one process of ``THREADS`` threads, every thread's counters moving."""
    calls = [0]

    def next_sample() -> Sample:
        calls[0] += 1
        t = calls[0]
        return sample(t, process(10, *(thread(10 + i, 100 * t + i, 5 * t) for i in range(THREADS))))

    return next_sample


@contextmanager
def serving_big_job() -> Iterator[tuple[Exporter, int]]:
    exporter = Exporter(big_job(), topology(), interval_s=SCRAPE_EVERY_S, threads=True, max_threads=THREADS)
    _, port = exporter.listen("127.0.0.1", 0)
    exporter.start()
    try:
        wait_for(lambda: exporter.state.snapshot is not None, 20, "two samples")
        yield exporter, port
    finally:
        exporter.stop()


def timed_scrapes(port: int, count: int) -> list[float | None]:
    """``count`` scrapes as Prometheus sends them, one every 0.5 s (the next at once when one took
    longer), 5 s timeout: each one's seconds, None for one that got no whole answer."""
    took: list[float | None] = []
    next_s = time.monotonic()
    for _ in range(count):
        time.sleep(max(0.0, next_s - time.monotonic()))
        next_s = time.monotonic() + SCRAPE_EVERY_S
        seconds, ok = fetch_raw(port, timeout_s=5.0)
        took.append(seconds if ok else None)
    return took


def test_a_flood_of_new_query_strings_and_accept_values_formats_nothing_twice_and_the_scrape_is_answered():
    """Four connections send requests of shapes never sent before (bench/attacks/export_flood.py's
    ``shape_request``: new query strings, long URLs, ``name[]`` filters, gzip or not, and new
    Accept values all answered as text, so that the flood makes nothing the scrape is sent)
    while a scrape is timed every 0.5 s as Prometheus sends it; rounds of scrapes alone and
    under the flood take turns, so that the machine's other load weighs on both alike. The
    flood's process runs at nice 19: on two CPUs its own reading of answers would otherwise
    take the exporter's CPU, which no server can prevent; what is measured is the exporter's
    work for it.
    Before, every request of a new shape was a full render, one at a time under one lock:
    the scrape's median was 2.8 to 3.6 times its median alone. Now a state costs one format
    whatever the flood asks (each family once; the other format takes its sample lines):
    that is what is asserted."""
    tries = []
    for _ in range(ATTEMPTS):
        figures, _ratio, timed_out = flood_round()
        tries.append(figures)
        if not timed_out:
            break
    else:
        raise AssertionError("in every attempt a scrape timed out (5 s): " + "; ".join(tries))


# How long the scrape takes beside the flood is a timing, measured by
# `python -m bench.attacks.export_flood` (docs/export.md), not asserted here: on this
# 2-core machine with the test suite beside it the ratio of medians was 2.3-2.9, at load
# under 10 without it 0.43-0.44. What is asserted is the mechanism: no family is formatted
# twice for one state, whatever the flood asks; and a scrape is answered within 5 s in at
# least one of the attempts (a burst of other load can stall one).
ATTEMPTS = 3


def flood_round() -> tuple[str, float, bool]:
    """One measurement: rounds of scrapes alone and under the flood taking turns. Returns its
    figures, the ratio of the medians, and whether a scrape timed out. The properties that
    do not depend on timing are asserted here, in every attempt."""
    alone: list[float | None] = []
    under: list[float | None] = []
    floods = []
    with serving_big_job() as (exporter, port):
        timed_scrapes(port, 2)  # the pace settles
        formatted_before = exporter.renderer.formatted_total
        samples_before = exporter.state.samples_total
        for _ in range(ROUNDS):
            alone += timed_scrapes(port, SCRAPES)
            with shape_flood(port, connections=4, accepts=TEXT_ACCEPTS, nice=19) as flooded:
                under += timed_scrapes(port, SCRAPES)
            floods += flooded
        states = exporter.state.samples_total - samples_before + 1
        formatted = exporter.renderer.formatted_total - formatted_before
        families = len(exporter.renderer.served_names)
    answered = sum(f.answered for f in floods)
    alone_s = statistics.median(t for t in alone if t is not None)
    under_s = statistics.median(t for t in under if t is not None)
    figures = (
        f"scrape median {alone_s * 1000:.0f} ms alone, {under_s * 1000:.0f} ms under a flood of {answered} answers"
    )
    print(figures)
    assert answered > 4 * len(under), figures  # a flood indeed: four answers for each scrape and more
    # Whatever the flood asked, no family was formatted twice for one state.
    assert formatted <= families * states, f"{formatted} families formatted over {states} states"
    return figures, under_s / alone_s, None in alone or None in under


def test_a_connection_has_at_most_the_limit_of_pipelined_requests_read_ahead():
    """A client writes 200 requests for a 1.1 MB body at once and reads nothing: the server
    answers ``PIPELINED_LIMIT`` of them and parses no more until those answers are sent
    (before, it parsed every request of the first 8 KiB read and answered 195 of the 200 in
    2 s). Then it reads: every request is answered."""
    state = big_job_state()
    requests = [0]
    renderer = Renderer(
        lambda: state, threads=True, max_threads=THREADS, on_request=lambda: requests.__setitem__(0, requests[0] + 1)
    )
    server = MetricsServer(renderer, "127.0.0.1", 0)
    try:
        request = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        last = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        with socket.socket() as conn:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            conn.settimeout(30)
            conn.connect(server.address)
            conn.sendall(request * 199 + last)
            # The server answers what it read ahead, and stops there.
            wait_for(lambda: requests[0] >= PIPELINED_LIMIT, 20, "the requests read ahead answered")
            time.sleep(0.5)
            assert requests[0] == PIPELINED_LIMIT
            with conn.makefile("rb") as answers:
                statuses = []
                while (status := read_answer(answers)) is not None:
                    statuses.append(status)
        assert statuses == [200] * 200
        assert requests[0] == 200
    finally:
        server.stop()
