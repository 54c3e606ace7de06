"""`affmon export` against its network, on loopback: idle connections past the descriptor
limit, clients that never read a large answer, a burst of parallel scrapes, idle timeouts;
and the shared renderings, checked against prometheus-client's own app.

The attacks are bench/attacks/export_flood.py's own (``connect_many``, ``scrape``), scaled down.
Exporters that must be measured from outside (their descriptors, their RSS) run as
``python -m affmon export`` children."""

from __future__ import annotations

import dataclasses
import gzip
import os
import re
import select
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from affmon.core.model.samples import Sample
from affmon.export.catalogue import CATALOGUE
from affmon.export.collector import StateCollector
from affmon.export.render import BodyReader, Renderer, _Families, _Formatted
from affmon.export.server import fd_connection_limit
from affmon.export.service import Exporter
from affmon.export.shapes import OPENMETRICS_ACCEPT, Shape, shape_of
from affmon.export.state import ExportState
from bench.attacks.export_flood import (
    PROMETHEUS_HEADERS,
    SLOW_REQUEST,
    affmon_export,
    close_all,
    connect_many,
    exporter,
    many_threads,
    metric,
    rss_bytes,
    scrape,
)
from tests.helpers.export import process, run, sample, thread, topology, wait_for

REQUEST = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


def counter(url: str, name: str, timeout_s: float = 10.0) -> float:
    """``name`` from a scrape that must answer."""
    _, text = scrape(url, timeout_s=timeout_s)
    assert text is not None, f"no answer from {url}"
    value = metric(text, name)
    assert value is not None, name
    return value


def drained(conn: socket.socket, timeout_s: float = 20) -> bytes:
    """What ``conn`` receives until the server closes it (an end of file or a reset); a
    connection still open after ``timeout_s`` fails the test."""
    conn.settimeout(timeout_s)
    received = b""
    try:
        while chunk := conn.recv(1 << 16):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def ticking(p: int = 10) -> Callable[[], Sample]:
    calls = [0]

    def next_sample() -> Sample:
        calls[0] += 1
        return sample(calls[0], process(p, thread(p, 100 * calls[0], 10)))

    return next_sample


@contextmanager
def serving(**limits: int) -> Iterator[tuple[Exporter, int]]:
    exporter_ = Exporter(ticking(), topology(), interval_s=0.1, **limits)
    _, port = exporter_.listen("127.0.0.1", 0)
    exporter_.start()
    try:
        yield exporter_, port
    finally:
        exporter_.stop()


# -- descriptors: idle connections past the limit ------------------------------------------------


def test_idle_connections_past_the_descriptor_limit_stop_neither_sampling_nor_a_scrape():
    """The exporter may open 64 files (soft and hard limit); 150 connections that send nothing
    come first. Before, each took a descriptor and a thread until accept() failed with EMFILE,
    and from then on no scrape was answered (none within 10 s)."""
    with exporter(affmon_export(os.getpid(), threads=False, interval_s=0.2), nofile=64, hard=True) as ex:
        wait_for(lambda: counter(ex.url, "affmon_export_samples_total") >= 2, 20, "two samples")
        idle = connect_many(ex.port, 150)
        try:
            assert len(idle) == 150  # the kernel queues them: none waits on the exporter
            took, text = scrape(ex.url, timeout_s=10)
            assert text is not None and metric(text, "affmon_export_samples_total") is not None, took
            before = counter(ex.url, "affmon_export_samples_total")
            wait_for(lambda: counter(ex.url, "affmon_export_samples_total") >= before + 5, 20, "five more samples")
            assert counter(ex.url, "affmon_export_sample_errors_total") == 0
        finally:
            close_all(idle)
        assert "Too many open files" not in ex.stderr()


def test_the_exporter_raises_its_soft_descriptor_limit_to_the_hard_one():
    with exporter(affmon_export(os.getpid(), threads=False), nofile=64) as ex:
        limits = Path(f"/proc/{ex.proc.pid}/limits").read_text()
    (soft, hard) = re.search(r"^Max open files\s+(\S+)\s+(\S+)", limits, re.MULTILINE).groups()
    assert soft == hard and hard != "64", limits


def test_the_connection_limit_leaves_half_of_the_free_descriptors_to_the_sampler():
    assert fd_connection_limit(100, 1024, 24) == 100
    assert fd_connection_limit(100, 64, 14) == 25
    assert fd_connection_limit(100, 10, 12) == 1  # never none: the exporter must still answer


@given(st.integers(1, 10_000), st.integers(1, 1 << 20), st.integers(0, 1 << 20))
def test_the_connection_limit_is_within_the_wanted_and_half_the_free(wanted, soft, open_now):
    limit = fd_connection_limit(wanted, soft, open_now)
    assert 1 <= limit <= wanted
    assert limit == 1 or 2 * limit <= soft - open_now


# -- memory: clients that never read a large answer ------------------------------------------------


def test_clients_that_never_read_a_large_answer_neither_grow_the_exporter_nor_block_a_scrape():
    """100 clients ask for the ``--threads`` body of a 1,000-thread process (about 0.7 MB) with
    a 4 KiB receive buffer and never read. Before, each held a copy of its own: 100 bodies.
    Now a body is shared by the connections sending it: the exporter grows by one body for
    each state the clients were sent (several on a loaded machine, where their requests span
    a few samples), never by one a client."""
    readers = 100
    with many_threads(1000) as pid, exporter(affmon_export(pid, threads=True, interval_s=1.0)) as ex:
        wait_for(lambda: counter(ex.url, "affmon_export_samples_total") >= 2, 20, "two samples")
        for headers in ({}, None):  # both shapes rendered once: the baseline holds one of each
            scrape(ex.url, timeout_s=10, headers=headers)
        _, plain = scrape(ex.url, timeout_s=10, headers={})
        assert plain is not None
        body_bytes = len(plain.encode())
        assert body_bytes > 500_000, body_bytes
        samples_before = counter(ex.url, "affmon_export_samples_total")
        baseline = rss_bytes(ex.proc.pid)

        slow = connect_many(ex.port, readers, rcvbuf=4096, request=SLOW_REQUEST)
        try:
            assert len(slow) == readers
            peak = baseline
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                peak = max(peak, rss_bytes(ex.proc.pid))
                time.sleep(0.1)
            took, text = scrape(ex.url, timeout_s=10)
            peak = max(peak, rss_bytes(ex.proc.pid))
            assert text is not None and "affmon_thread_wait_ratio" in text, took
            # The states the slow clients may have been sent: each has one body, shared by
            # every connection sending it; on a loaded machine the clients' requests span
            # several samples, and each state's body is held as long as its readers are.
            states = int(counter(ex.url, "affmon_export_samples_total") - samples_before) + 1
        finally:
            close_all(slow)
    grown = peak - baseline
    # A copy per client would be ``readers`` bodies. Sharing allows one per state, plus four
    # for the last scrape's own renderings and the allocator's slack.
    assert states + 4 < readers / 2, f"{states} samples in the window: too many to tell a copy per client"
    bound = (states + 4) * body_bytes
    assert grown < bound, f"RSS grew {grown / 1e6:.1f} MB over {states} states; body {body_bytes / 1e6:.1f} MB"


def test_a_body_is_read_through_a_view_of_the_shared_bytes():
    made = Renderer(lambda: run(sample(0, process(10, thread(10, 100)))), threads=True).rendering(
        {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics"}
    )
    reader = BodyReader(made)
    assert reader.read() is made.body  # not a copy
    reader.close()
    assert reader.rendering is None


def test_past_the_cap_a_reader_of_an_earlier_state_is_closed_and_the_latest_state_served():
    """A reader stalls on the ``--threads`` body of a 1,500-thread process; the sampler moves
    on. With a cap of 1 byte on bodies of earlier states, the stalled reader is closed long
    before its idle timeout (60 s), and the next scrape is answered."""
    big = process(10, *(thread(10 + i, 100, 10) for i in range(1500)))
    ticks = iter(range(1_000_000))
    exporter_ = Exporter(
        lambda: sample(next(ticks), big), topology(), threads=True, held_bytes_limit=1, idle_timeout_s=60
    )
    exporter_.tick()
    exporter_.tick()  # rates, and so per-thread series, from the second sample on
    _, port = exporter_.listen("127.0.0.1", 0)
    try:
        (stalled,) = connect_many(port, 1, rcvbuf=4096, request=SLOW_REQUEST)
        wait_for(lambda: exporter_.renderer.renders_total == 1, 20, "the stalled reader's body rendered")
        body_bytes = len(exporter_.renderer.cached()[0].body)
        exporter_.tick()
        took, text = scrape(f"http://127.0.0.1:{port}/metrics", timeout_s=20)
        assert text is not None and "affmon_thread_last_cpu" in text, took
        server = exporter_.server
        assert server is not None
        wait_for(lambda: server.evicted_total >= 1, 10, "the stalled reader closed")  # at the loop's next turn
        assert len(drained(stalled)) < body_bytes  # cut short (by a reset), not sent whole
        stalled.close()
    finally:
        exporter_.stop()


def test_stop_closes_every_connection_and_the_port():
    with serving() as (exporter_, port):
        idle = connect_many(port, 20)
        slow = connect_many(port, 5, rcvbuf=4096, request=SLOW_REQUEST)
        wait_for(lambda: exporter_.server is not None and exporter_.server.open_connections() == 25, 10, "25 open")
        started = time.monotonic()
        exporter_.stop()
        assert time.monotonic() - started < 5
        for s in idle + slow:
            drained(s, timeout_s=10)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        close_all(idle + slow)


# -- time: idle connections are closed ------------------------------------------------------------


@pytest.mark.parametrize(
    "sent",
    [b"", b"GET /metrics HTTP/1.1\r\nHost: x\r\n", b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"],
    ids=["nothing", "half a request", "a whole request, then keep-alive"],
)
def test_a_quiet_connection_is_closed_after_the_idle_timeout(sent):
    with serving(idle_timeout_s=1) as (_, port), socket.create_connection(("127.0.0.1", port)) as conn:
        started = time.monotonic()
        conn.sendall(sent)
        conn.settimeout(15)
        received = b""
        while chunk := conn.recv(65536):  # until the server closes (a timeout fails the test)
            received += chunk
        quiet_s = time.monotonic() - started
    assert quiet_s >= 0.9
    if sent.endswith(b"\r\n\r\n"):
        assert received.startswith(b"HTTP/1.1 200") and b"affmon_export_samples_total" in received


def test_at_the_connection_limit_the_quietest_connection_makes_room():
    with serving(connection_limit=8) as (exporter_, port):
        quiet = connect_many(port, 8)
        try:
            wait_for(lambda: exporter_.server is not None and exporter_.server.open_connections() == 8, 10, "8 open")
            with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
                conn.sendall(REQUEST)
                answer = b"".join(iter(lambda: conn.recv(65536), b""))
            assert answer.startswith(b"HTTP/1.1 200")
            assert exporter_.server is not None and exporter_.server.evicted_total >= 1
            quiet[0].settimeout(10)
            assert quiet[0].recv(1) == b""  # the oldest was closed
        finally:
            close_all(quiet)


# -- the queue: a burst of parallel scrapes -----------------------------------------------------


def test_a_burst_of_parallel_scrapes_is_queued_and_answered():
    """80 connections at once. With a listen backlog of 5 the kernel dropped the SYNs past the
    queue and the clients sent them again a second later (TCP's first retransmission is 1 s)."""
    clients = 80
    with serving() as (_, port):
        socks = []
        for _ in range(clients):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            socks.append(s)
        started = time.monotonic()
        connecting = {s.fileno(): s for s in socks}
        poller = select.poll()
        for fd in connecting:
            poller.register(fd, select.POLLOUT)
        while connecting and time.monotonic() - started < 10:
            for fd, _ in poller.poll(50):
                s = connecting.pop(fd)
                poller.unregister(fd)
                assert s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
                s.setblocking(True)
                s.sendall(REQUEST)
        handshakes_s = time.monotonic() - started
        try:
            assert not connecting
            assert handshakes_s < 0.9, f"the last handshake took {handshakes_s:.2f} s: a SYN was dropped"
            for s in socks:
                s.settimeout(30)
                answer = b"".join(iter(lambda s=s: s.recv(65536), b""))
                assert answer.startswith(b"HTTP/1.1 200") and b"affmon_export_samples_total" in answer
        finally:
            close_all(socks)


# -- the renderings: exactly prometheus-client's, shared, bounded ------------------------------------

# What Prometheus 3 sends by default (its scrape protocols, each with its escaping).
PROMETHEUS_3_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;"
    "version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1"
)
ACCEPTS = [
    "",
    "text/plain",
    "application/openmetrics-text;version=1.0.0",
    "text/plain;version=1.0.0;escaping=values",
    PROMETHEUS_HEADERS["Accept"],
    PROMETHEUS_3_ACCEPT,
    "application/openmetrics-text",
    "application/openmetrics-text;version=0.0.1",
    "application/openmetrics-text;version=2.0.0;escaping=allow-utf-8",
    "*/*;q=0.1,application/x-new-1",
]
ENCODINGS = ["", "gzip", "identity", "br, gzip;q=0.5"]
QUERIES = [
    "",
    "name[]=affmon_process_threads",
    "name[]=affmon_export_samples_total&name[]=affmon_process_info",
    "x=1&name[]=affmon_thread_last_cpu&name[]=affmon_process_threads",
    "name%5B%5D=affmon_process_threads&name[]=affmon_thread_wait_ratio",
    "name[]=affmon_process_cpu_seconds",  # a counter's name without _total: no sample of it
    "name[]=nothing_served",
    "name[]=",
    "x=2",
]
METHODS = [("GET", "/metrics"), ("OPTIONS", "/metrics"), ("POST", "/metrics")]
HOSTILE = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=15)


def reference(state: ExportState, environ: dict[str, str]) -> tuple[str, list[tuple[str, str]], bytes]:
    """prometheus-client's own app's answer, serving every thread."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StateCollector(lambda: state, threads=True))
    started: list[tuple[str, list[tuple[str, str]]]] = []
    body = b"".join(make_wsgi_app(registry)(dict(environ), lambda s, h, e=None: started.append((s, h))))
    return started[0][0], started[0][1], body


def plain(body: bytes) -> bytes:
    return gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body  # gzip stamps the time


def media(headers: list[tuple[str, str]]) -> tuple[str, str | None]:
    """The media type and the content encoding."""
    found = dict(headers)
    return found.get("Content-Type", "").split(";")[0], found.get("Content-Encoding")


def shape_request(shape: Shape) -> dict[str, str]:
    """The request prometheus-client's app answers with the shape's body (``name[]=-``: a filter
    that names nothing served)."""
    names = ["-"] if shape.names == () else shape.names or []
    return {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/metrics",
        "QUERY_STRING": "&".join(f"name[]={name}" for name in names),
        "HTTP_ACCEPT": OPENMETRICS_ACCEPT if shape.openmetrics else "",
        "HTTP_ACCEPT_ENCODING": "gzip" if shape.gzip else "",
    }


def named_state(pid: int, name: str) -> ExportState:
    """Two samples of one process called ``name`` (any text: the kernel's comm is any bytes)."""
    return run(*(sample(t, dataclasses.replace(process(pid, thread(pid, 100 * t, 5 * t)), name=name)) for t in (0, 1)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    names=st.lists(HOSTILE, min_size=2, max_size=3),
    steps=st.lists(
        st.one_of(
            st.integers(0, 2).map(lambda i: ("publish", i)),
            st.tuples(
                st.just("get"),
                st.sampled_from(ACCEPTS),
                st.sampled_from(ENCODINGS),
                st.sampled_from(QUERIES),
                st.sampled_from(METHODS),
            ),
        ),
        min_size=1,
        max_size=25,
    ),
)
def test_every_answer_is_prometheus_clients_own_for_the_latest_state(names, steps):
    """The answer to any request is prometheus-client's answer to it: status and body the same,
    in the same format and encoding; and it is, to the byte but for gzip's time stamp,
    prometheus-client's answer to its shape's request, names escaped with underscores."""
    states = [named_state(10 + i, name) for i, name in enumerate(names)]
    current = [states[0]]
    renderer = Renderer(lambda: current[0], threads=True, filtered_shapes=2)
    for step_ in steps:
        if step_[0] == "publish":
            current[0] = states[step_[1] % len(states)]
            continue
        _, accept, encoding, query, (method, path) = step_
        environ = {
            "REQUEST_METHOD": method,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "HTTP_ACCEPT": accept,
            "HTTP_ACCEPT_ENCODING": encoding,
        }
        made = renderer.rendering(environ)
        status, headers, body = reference(current[0], environ)
        assert made.status == status and plain(made.body) == plain(body)
        assert media(made.headers) == media(headers)
        assert ("Content-Length", str(len(made.body))) in made.headers
        shape = shape_of(environ, renderer.served_names)
        if shape is not None:
            status, headers, body = reference(current[0], shape_request(shape))
            assert (made.status, plain(made.body)) == (status, plain(body))
            assert made.headers == [*headers, ("Content-Length", str(len(made.body)))]
        assert len(renderer.cached()) <= 4 + 2  # the four unfiltered shapes, the last two filters


def test_an_accept_header_prometheus_client_cannot_read_is_answered_as_text():
    """prometheus-client compares the version with (1, 0, 0) and raises on "1.a"."""
    state = named_state(10, "python3")
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/metrics",
        "HTTP_ACCEPT": "application/openmetrics-text;version=1.a",
    }
    with pytest.raises(TypeError):
        reference(state, environ)
    made = Renderer(lambda: state, threads=True).rendering(environ)
    assert (made.status, made.body) == reference(state, {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics"})[::2]


def test_every_name_is_a_legacy_prometheus_name_so_escaping_leaves_it_as_it_is():
    """The answer's names are escaped with underscores whatever escaping was asked; that escaping
    changes no legacy name, and every metric and label name affmon serves is one."""
    legacy_metric = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
    legacy_label = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
    for spec in CATALOGUE:
        assert legacy_metric.match(spec.name), spec.name
        assert all(legacy_label.match(label) for label in spec.labels), spec.labels


@pytest.mark.parametrize(
    ("method", "path", "status", "type_"),
    [
        ("GET", "/", "200 OK", "text/html"),
        ("GET", "/favicon.ico", "404 Not Found", "text/plain"),
        ("GET", "/metrics/", "404 Not Found", "text/plain"),
        ("GET", "/anything?name[]=affmon_process_threads", "404 Not Found", "text/plain"),
        ("POST", "/", "404 Not Found", "text/plain"),
    ],
)
def test_only_metrics_is_metrics_and_the_landing_page_links_to_it(method, path, status, type_):
    """As node_exporter: ``/metrics`` serves metrics, ``/`` is a page linking to it, any other
    path is 404; none of them renders the state."""
    state = named_state(10, "python3")
    renderer = Renderer(lambda: state)
    made = renderer.rendering({"REQUEST_METHOD": method, "PATH_INFO": path})
    assert made.status == status and media(made.headers)[0] == type_
    assert ("Content-Length", str(len(made.body))) in made.headers
    assert b"affmon_" not in made.body and renderer.renders_total == renderer.collected_total == 0
    if status == "200 OK":
        assert b'<a href="/metrics">' in made.body


def test_one_render_serves_every_scrape_of_a_state():
    state = run(sample(0, process(10, thread(10, 100))), sample(1, process(10, thread(10, 200))))
    renderer = Renderer(lambda: state)
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "HTTP_ACCEPT_ENCODING": "gzip"}
    first = renderer.rendering(environ)
    assert all(renderer.rendering(environ) is first for _ in range(50))
    assert renderer.renders_total == 1


def test_requests_differing_only_where_the_body_does_not_share_one_body():
    """New query keys, Accept values and encodings, each asked once: four bodies (two formats,
    gzip or not), every family formatted once (the second format takes the first's sample
    lines)."""
    state = run(sample(0, process(10, thread(10, 100))), sample(1, process(10, thread(10, 200))))
    renderer = Renderer(lambda: state, threads=True)
    bodies = set()
    for n in range(200):
        environ = {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": "/metrics",
            "QUERY_STRING": f"flood={n}&pad={'x' * n}",
            "HTTP_ACCEPT": ["text/plain;q=0.{n}", "application/openmetrics-text;version=1.0.0;n={n}"][n % 2].format(
                n=n
            ),
            "HTTP_ACCEPT_ENCODING": ["gzip", f"identity;q=0.{n}"][n // 2 % 2],
        }
        bodies.add(id(renderer.rendering(environ)))
    assert len(bodies) == renderer.renders_total == 4
    assert renderer.formatted_total == len(renderer.served_names)
    assert renderer.collected_total == 1


def test_both_formats_of_a_state_cost_one_collect_and_one_format():
    """Text first or OpenMetrics first, the second format of a state is made from the first's
    sample lines: each family is formatted once a state."""
    states = [
        run(sample(0, process(10, thread(10, 100))), sample(t, process(10, thread(10, 100 * t)))) for t in (1, 2, 3)
    ]
    current = [states[0]]
    renderer = Renderer(lambda: current[0], threads=True)
    accepts = ["text/plain", "application/openmetrics-text;version=1.0.0"]
    for state in states:
        current[0] = state
        for accept in accepts:
            environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "HTTP_ACCEPT": accept}
            assert renderer.rendering(environ).body == reference(state, environ)[2]
        accepts.reverse()
    assert renderer.formatted_total == 3 * len(renderer.served_names)
    assert renderer.collected_total == 3


def test_a_family_whose_lines_differ_between_formats_is_formatted_whole_in_each():
    """A timestamp (milliseconds in text, seconds in OpenMetrics), a ``_created`` sample (moved
    to a family of its own in text) and a ``:`` in a name (escaped in one format only) make a
    family's lines differ: the second format formats it whole. Plain families, escaped help
    and label values included, take the first format's lines."""
    stamped = GaugeMetricFamily("stamped", "doc", labels=["a"])
    stamped.add_metric(["x"], 1.5, timestamp=12.5)
    created = CounterMetricFamily("made", "doc", labels=["a"])
    created.add_metric(["x"], 2, created=100.0)
    colon = GaugeMetricFamily("a:b", "doc", value=2)
    plain = GaugeMetricFamily("plain", 'd\\oc "q"\nline', labels=["l"])
    plain.add_metric(['v"\\\n'], 3)
    metrics = [stamped, created, colon, plain]
    families = _Families(ExportState(), metrics)
    assert families.unshared == {0, 1, 2}

    class Registry:
        def collect(self) -> list:
            return metrics

    encoders = {False: generate_latest, True: openmetrics_latest}
    for first in (False, True):
        second = _Formatted.of(families, first, metrics).other_format()
        assert second.body == encoders[not first](Registry())


def test_new_filters_are_cut_from_the_formatted_families_and_only_the_last_few_kept():
    state = run(sample(0, process(10, thread(10, 100))), sample(1, process(10, thread(10, 200))))
    renderer = Renderer(lambda: state, threads=True, filtered_shapes=3)
    names = sorted(renderer.served_names)
    for n in range(40):
        query = f"name[]={names[n % len(names)]}&name[]={names[(3 * n + 1) % len(names)]}"
        renderer.rendering({"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "QUERY_STRING": query})
    assert renderer.formatted_total == len(names)  # text only, each family once
    assert len(renderer.cached()) == 3


def test_ipv6_loopback_is_served():
    exporter_ = Exporter(ticking(), topology(), interval_s=0.1)
    host, port = exporter_.listen("::1", 0)
    exporter_.start()
    try:
        assert host == "::1"
        wait_for(lambda: scrape(f"http://[::1]:{port}/metrics")[1] is not None, 10, "an answer on [::1]")
    finally:
        exporter_.stop()
