"""The exporter's WSGI application: prometheus-client's encoders, run once per published state
and family, their bodies shared by every connection that is sent them.

Why not call prometheus-client's app per request: formatting is the costly part of a
scrape. With ``--threads`` on a process of 2,001 threads the text body is 1.5 MB and takes
0.2 s of CPU to format, 0.3 s as gzipped OpenMetrics (docs/export.md). Per request, fifty
parallel scrapers format it fifty times over, and every client that never reads its answer
pins a private copy.

Here a request is first reduced to its shape (``affmon.export.shapes``: text or
OpenMetrics, gzip or not, the ``name[]`` filter), so that requests differing only where the
body does not share one answer. The first request of a state collects the state's families
and formats each of them once, by prometheus-client's own encoder for its format
(``generate_latest`` of a registry holding that family alone), into the unfiltered body:
the families joined in the collector's order, as the encoders format a whole registry
(OpenMetrics then adds ``# EOF``). The other format is made from it: both encoders write a
sample's line alike (where they would not, the family is formatted whole), so each family
is its header lines in that format (``# HELP``, ``# TYPE``, formatted from the family
without its samples) followed by its sample lines as formatted. A ``name[]`` filter joins
slices of a body; gzip is prometheus-client's (``gzip.compress``). A state thus costs one
collect and one format, whatever is asked of it, and a flood of new shapes costs joins and
gzips. For 2,000 threads, every one served: collecting takes 45 ms of CPU, formatting 90 ms
as text and 140 ms as OpenMetrics, the other format under 1 ms, gzip 20 ms (docs/export.md,
"Request shapes").

Collecting and formatting hold one lock, the render lock (they hold the interpreter lock
too, so two at once would take as long as one after the other); joining and gzip (zlib
lets the interpreter lock go) hold only a lock of their shape, so requests of a shape that
arrive while its body is made wait for it and are sent it. Requests that are not for
metrics render nothing, as node_exporter answers them: ``/`` is a landing page linking to
``/metrics``, any other path is 404, and another method on ``/metrics`` is answered by
prometheus-client's app (405, or the allowed methods to ``OPTIONS``).

The body goes to the server as a read-only file over the same bytes
(``wsgi.file_wrapper``): a connection holds a position in the body, not a copy
(``io.BytesIO`` initialised from ``bytes`` shares them until written to). The bodies of the
four unfiltered shapes are kept, and those of the last ``filtered_shapes`` filters; each is
replaced when its shape is asked of a newer state, so a client varying its filters cannot
grow the cache. Every rendering still held by a connection stays listed in ``alive`` until
the last connection lets go, so the server can bound what slow readers hold
(``affmon.export.server``).
"""

from __future__ import annotations

import copy
import gzip
import io
import itertools
import re
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric

from affmon.export import MAX_THREADS
from affmon.export.catalogue import CATALOGUE
from affmon.export.collector import StateCollector
from affmon.export.shapes import METRICS_PATH, OPENMETRICS_ACCEPT, Shape, shape_of
from affmon.export.state import ExportState

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

_BLOCK_BYTES = 64 * 1024
FILTERED_SHAPES = 8
# prometheus-client's encoders and content types: for no Accept, and for OpenMetrics 1.0.0.
_TEXT, _TEXT_TYPE = choose_encoder("")
_OPENMETRICS, _OPENMETRICS_TYPE = choose_encoder(OPENMETRICS_ACCEPT)
_EOF = b"# EOF\n"
LANDING_PAGE = (
    b"<!DOCTYPE html>\n<html><head><title>affmon export</title></head><body>\n"
    b"<h1>affmon export</h1>\n<p>CPU placement of GPU training jobs, for Prometheus.</p>\n"
    b'<p><a href="/metrics">Metrics</a></p>\n</body></html>\n'
)


class Rendering:
    """One response: status, headers and body, the state it shows and when it was made
    (``monotonic``, after the render)."""

    __slots__ = ("__weakref__", "body", "headers", "made_s", "state", "status")

    def __init__(self, status: str, headers: list[tuple[str, str]], body: bytes, state: ExportState) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.state = state
        self.made_s = time.monotonic()


class BodyReader(io.BytesIO):
    """The file handed to ``wsgi.file_wrapper``: reads the shared body, keeps its rendering
    alive until the server closes it (body sent, or connection closed)."""

    def __init__(self, rendering: Rendering) -> None:
        super().__init__(rendering.body)
        self.rendering: Rendering | None = rendering

    def close(self) -> None:
        self.rendering = None
        super().close()


def _answer(app: WSGIApplication, environ: WSGIEnvironment, state: ExportState) -> Rendering:
    """What ``app`` answers to ``environ``, as a rendering."""
    started: list[tuple[str, list[tuple[str, str]]]] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: object = None) -> Callable[[bytes], None]:
        started.append((status, list(headers)))
        return lambda _: None

    body = b"".join(app(environ, start_response))
    status, headers = started[-1]
    return Rendering(status, [*headers, ("Content-Length", str(len(body)))], body, state)


class _One:
    """A registry of one family, for prometheus-client's encoders."""

    def __init__(self, metric: Metric) -> None:
        self._metric = metric

    def collect(self) -> list[Metric]:
        return [self._metric]


def _format(metric: Metric, openmetrics: bool) -> bytes:
    if openmetrics:
        return bytes(_OPENMETRICS(_One(metric))).removesuffix(_EOF)
    return bytes(_TEXT(_One(metric)))


# Sample names both encoders write alike (prometheus-client escapes ``:`` in one of them).
_PLAIN_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# Samples the text encoder moves out of their family, into a gauge family of their own.
_OPENMETRICS_ONLY = ("_created", "_gsum", "_gcount")


def _headless(metric: Metric) -> Metric:
    headless = copy.copy(metric)
    headless.samples = []
    return headless


def _same_lines(metric: Metric, names: frozenset[str]) -> bool:
    """Whether both encoders write this family's sample lines alike, so that one format's lines
    serve the other: plain names, and no timestamp (milliseconds in text, seconds in
    OpenMetrics), exemplar, native histogram, missing value or OpenMetrics-only sample."""
    moved = {metric.name + suffix for suffix in _OPENMETRICS_ONLY}
    if any(not _PLAIN_NAME.fullmatch(name) or name in moved for name in names):
        return False
    return all(
        s.timestamp is None and s.exemplar is None and s.native_histogram is None and s.value is not None
        for s in metric.samples
    )


class _Families:
    """One state's families, collected once, and what each format needs of them besides their
    sample lines: each family's header lines in both formats (``# HELP``, ``# TYPE``, ``# UNIT``,
    formatted by the encoders from the family without its samples), its sample names, and the
    families a format must format whole (their lines differ between formats) or a filter may
    cut (several sample names, or a unit that prometheus-client's restricted registry drops);
    none of affmon's is either, and only those are kept."""

    def __init__(self, state: ExportState, metrics: list[Metric]) -> None:
        self.state = state
        self.names = [frozenset(sample.name for sample in metric.samples) for metric in metrics]
        self.headers = {om: [_format(_headless(metric), om) for metric in metrics] for om in (False, True)}
        self.unshared = {i for i, metric in enumerate(metrics) if not _same_lines(metric, self.names[i])}
        self.cuttable = {i for i, metric in enumerate(metrics) if len(self.names[i]) > 1 or metric.unit}
        self.kept = {i: metrics[i] for i in self.unshared | self.cuttable}


class _Formatted:
    """One state's families in one format, joined into the unfiltered body (where they stay; a
    filtered body joins slices of it)."""

    def __init__(self, families: _Families, openmetrics: bool, pieces: list[bytes]) -> None:
        self.families = families
        self.state = families.state
        self.openmetrics = openmetrics
        self.body = b"".join([*pieces, _EOF] if openmetrics else pieces)
        self._spans = list(itertools.pairwise(itertools.accumulate((len(piece) for piece in pieces), initial=0)))

    @classmethod
    def of(cls, families: _Families, openmetrics: bool, metrics: list[Metric]) -> _Formatted:
        """Every family formatted by prometheus-client's encoder."""
        return cls(families, openmetrics, [_format(metric, openmetrics) for metric in metrics])

    def other_format(self) -> _Formatted:
        """The same families in the other format: each family's header lines in that format,
        then its sample lines as they are here (both encoders write them alike); a family
        whose lines differ is formatted whole."""
        families, om = self.families, not self.openmetrics
        pieces = []
        for i, (start, end) in enumerate(self._spans):
            if i in families.unshared:
                pieces.append(_format(families.kept[i], om))
            else:
                lines_start = start + len(families.headers[self.openmetrics][i])
                pieces.append(families.headers[om][i] + self.body[lines_start:end])
        return _Formatted(families, om, pieces)

    def filtered(self, names: tuple[str, ...]) -> list[bytes | memoryview]:
        """The body for a ``name[]`` filter, in parts: each family whose samples it names, as
        prometheus-client's restricted registry keeps them (a family none of whose samples is
        named is left out, even one with no samples at all)."""
        wanted = set(names)
        view = memoryview(self.body)
        parts: list[bytes | memoryview] = []
        for i, (start, end) in enumerate(self._spans):
            if not self.families.names[i] & wanted:
                continue
            if i not in self.families.cuttable:  # one sample name, no unit: the family whole
                parts.append(view[start:end])
                continue
            metric = self.families.kept[i]
            cut = Metric(metric.name, metric.documentation, metric.type)
            cut.samples = [sample for sample in metric.samples if sample.name in wanted]
            parts.append(_format(cut, self.openmetrics))
        return [*parts, _EOF] if self.openmetrics else parts


class _Maker:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0


class Renderer:
    """The WSGI app. ``latest`` returns the state to serve."""

    def __init__(
        self,
        latest: Callable[[], ExportState],
        *,
        threads: bool = False,
        max_threads: int = MAX_THREADS,
        filtered_shapes: int = FILTERED_SHAPES,
        on_request: Callable[[], None] | None = None,
    ) -> None:
        self._latest = latest
        self._on_request = on_request  # told of every request (the sampler paces itself by them)
        self._threads = threads
        self._max_threads = max_threads
        self._filtered_shapes = filtered_shapes
        # The sample names served: a name[] filter selects among these (one family each).
        self.served_names = frozenset(spec.name for spec in CATALOGUE if threads or not spec.per_thread)
        self._client_app = make_wsgi_app(CollectorRegistry(auto_describe=False))  # renders nothing
        self._render_lock = threading.Lock()  # held to collect and format
        self._books_lock = threading.Lock()  # held for a lookup: the server's loop never waits for a render
        self._formatted: dict[bool, _Formatted] = {}  # the newest state's, by format (OpenMetrics or not)
        self._makers: dict[Shape, _Maker] = {}
        self._cache: OrderedDict[Shape, Rendering] = OrderedDict()  # filtered shapes least recently asked first
        self._alive: weakref.WeakSet[Rendering] = weakref.WeakSet()
        self.renders_total = 0  # bodies made
        self.formatted_total = 0  # families formatted with their samples by an encoder
        self.collected_total = 0  # states' families collected

    @contextmanager
    def _making(self, shape: Shape) -> Iterator[None]:
        """Held while a body of ``shape`` is made: one maker per shape at a time."""
        with self._books_lock:
            maker = self._makers.setdefault(shape, _Maker())
            maker.users += 1
        try:
            with maker.lock:
                yield
        finally:
            with self._books_lock:
                maker.users -= 1
                if not maker.users:
                    del self._makers[shape]

    def _formatted_for(self, openmetrics: bool) -> _Formatted:
        """The latest state's families in that format, made now if they were not (under the
        render lock: collecting and formatting hold the interpreter lock, so two at once take
        as long): from the other format's where it was made for the state, else collected
        and formatted. The state is read under the lock, so a request that waited for it while
        a newer state was made is sent that one: no state is formatted after a newer one."""
        with self._render_lock:
            state = self._latest()
            done = self._formatted.get(openmetrics)
            if done is not None and done.state is state:
                return done
            other = self._formatted.get(not openmetrics)
            if other is not None and other.state is state:
                done = other.other_format()
                self.formatted_total += len(other.families.unshared)
            else:
                collector = StateCollector(lambda: state, threads=self._threads, max_threads=self._max_threads)
                metrics = list(collector.collect())
                self.collected_total += 1
                done = _Formatted.of(_Families(state, metrics), openmetrics, metrics)
                self.formatted_total += len(metrics)
            self._formatted = {openmetrics: done}
            if other is not None and other.state is state:
                self._formatted[not openmetrics] = other
            return done

    def _make(self, shape: Shape) -> Rendering:
        formatted = self._formatted_for(shape.openmetrics)
        body = formatted.body if shape.names is None else b"".join(formatted.filtered(shape.names))
        headers = [("Content-Type", _OPENMETRICS_TYPE if shape.openmetrics else _TEXT_TYPE)]
        if shape.gzip:
            body = gzip.compress(body)  # as prometheus-client compresses
            headers.append(("Content-Encoding", "gzip"))
        return Rendering("200 OK", [*headers, ("Content-Length", str(len(body)))], body, formatted.state)

    def _keep(self, shape: Shape, made: Rendering) -> None:
        """Cache ``made`` (under the books lock); past ``filtered_shapes`` filters, the one asked
        for longest ago makes room."""
        self._cache[shape] = made
        self._cache.move_to_end(shape)
        self._alive.add(made)
        filtered = [key for key in self._cache if key.filtered]
        for key in filtered[: max(0, len(filtered) - self._filtered_shapes)]:
            del self._cache[key]

    def rendering(self, environ: WSGIEnvironment) -> Rendering:
        """The response to this request: the cached one of its shape when it is of the latest
        state or was made after the request arrived (it waited for that body), else made now."""
        shape = shape_of(environ, self.served_names)
        if shape is None:
            return self._not_metrics(environ)
        arrived_s = time.monotonic()
        with self._books_lock:
            hit = self._cache.get(shape)
            if hit is not None:
                self._cache.move_to_end(shape)
        if hit is not None and hit.state is self._latest():
            return hit
        with self._making(shape):
            state = self._latest()
            with self._books_lock:
                hit = self._cache.get(shape)
            if hit is not None and (hit.state is state or hit.made_s >= arrived_s):
                return hit
            made = self._make(shape)
            with self._books_lock:
                self.renders_total += 1
                self._keep(shape, made)
            return made

    def _not_metrics(self, environ: WSGIEnvironment) -> Rendering:
        """The answer to a request that is not a ``GET`` of ``/metrics``."""
        path, state = environ.get("PATH_INFO"), self._latest()
        if path == METRICS_PATH:
            return _answer(self._client_app, environ, state)
        if path == "/" and environ.get("REQUEST_METHOD") in ("GET", "HEAD"):
            headers = [("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(len(LANDING_PAGE)))]
            return Rendering("200 OK", headers, LANDING_PAGE, state)
        body = b"404 page not found\n"
        headers = [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]
        return Rendering("404 Not Found", headers, body, state)

    def alive(self) -> list[Rendering]:
        """Every rendering still cached or held by a connection."""
        with self._books_lock:
            return list(self._alive)

    def current(self) -> list[Rendering]:
        """The cached renderings of the latest state: what the next normal scrape is sent."""
        state = self._latest()
        with self._books_lock:
            return [r for r in self._cache.values() if r.state is state]

    def drop_stale(self) -> None:
        """Forget cached renderings of earlier states (kept only for requests that waited for
        them, to spare a render)."""
        state = self._latest()
        with self._books_lock:
            for shape in [shape for shape, r in self._cache.items() if r.state is not state]:
                del self._cache[shape]

    def cached(self) -> list[Rendering]:
        """The renderings kept for the next requests of their shape."""
        with self._books_lock:
            return list(self._cache.values())

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if self._on_request is not None:
            self._on_request()
        made = self.rendering(environ)
        start_response(made.status, made.headers)
        wrapper = environ.get("wsgi.file_wrapper")
        if wrapper is None:  # a server without one: a plain body (still not a copy)
            return [made.body]
        wrapped: Iterable[bytes] = wrapper(BodyReader(made), _BLOCK_BYTES)
        return wrapped
