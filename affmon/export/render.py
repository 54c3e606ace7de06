"""The exporter's WSGI application: prometheus-client's own ``make_wsgi_app``, run once per
published state and request shape, its bodies shared by every connection that sends them.

Why not call prometheus-client's app per request: formatting is the costly part of a
scrape. With ``--threads`` on a process of 2,001 threads the text body is 1.5 MB and takes
0.2 s of CPU to format, 0.3 s as gzipped OpenMetrics (docs/export.md). Per request, fifty
parallel scrapers format it fifty times over, and every client that never reads its answer
pins a private copy. Here the app runs once for each state the sampler publishes and each
request shape (what prometheus-client's app reads: method, path, query, ``Accept``,
``Accept-Encoding``), so its content negotiation, gzip and escaping stay its own. The body
goes to the server as a read-only file over the same bytes (``wsgi.file_wrapper``): a
connection holds a position in the body, not a copy (``io.BytesIO`` initialised from
``bytes`` shares them until written to).

The renderings of the last ``shapes`` shapes are kept; a new shape takes the place of the
one rendered longest ago, so a client varying its headers cannot grow the cache. Every
rendering still held by a connection stays listed in ``alive`` until the last connection
lets go, so the server can bound what slow readers hold (``affmon.export.server``).
"""

from __future__ import annotations

import io
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, make_wsgi_app

from affmon.export import MAX_THREADS
from affmon.export.collector import StateCollector
from affmon.export.state import ExportState

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

# Everything prometheus-client's app reads from a request (exposition.make_wsgi_app).
_SHAPE = ("REQUEST_METHOD", "PATH_INFO", "QUERY_STRING", "HTTP_ACCEPT", "HTTP_ACCEPT_ENCODING")
_BLOCK_BYTES = 64 * 1024


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


def _render(app: WSGIApplication, environ: WSGIEnvironment, state: ExportState) -> Rendering:
    started: list[tuple[str, list[tuple[str, str]]]] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: object = None) -> Callable[[bytes], None]:
        started.append((status, list(headers)))
        return lambda _: None

    chunks = app(environ, start_response)
    body = b"".join(chunks)
    status, headers = started[-1]
    return Rendering(status, [*headers, ("Content-Length", str(len(body)))], body, state)


class Renderer:
    """The WSGI app. ``latest`` returns the state to serve."""

    def __init__(
        self,
        latest: Callable[[], ExportState],
        *,
        threads: bool = False,
        max_threads: int = MAX_THREADS,
        shapes: int = 4,
        on_request: Callable[[], None] | None = None,
    ) -> None:
        self._latest = latest
        self._on_request = on_request  # told of every request (the sampler paces itself by them)
        self._threads = threads
        self._max_threads = max_threads
        self._shapes = shapes
        self._render_lock = threading.Lock()  # held for a whole render
        self._books_lock = threading.Lock()  # held for a lookup: the server's loop never waits for a render
        self._app: tuple[ExportState, WSGIApplication] | None = None
        self._cache: dict[tuple[str, ...], Rendering] = {}
        self._alive: weakref.WeakSet[Rendering] = weakref.WeakSet()
        self.renders_total = 0

    def _app_for(self, state: ExportState) -> WSGIApplication:
        if self._app is None or self._app[0] is not state:
            registry = CollectorRegistry(auto_describe=False)
            registry.register(StateCollector(lambda: state, threads=self._threads, max_threads=self._max_threads))
            self._app = (state, make_wsgi_app(registry))
        return self._app[1]

    def rendering(self, environ: WSGIEnvironment) -> Rendering:
        """The response to this request: the cached one when it is of the latest state or was
        made after the request arrived (it waited for that render), else rendered now."""
        shape = tuple(str(environ.get(key, "")) for key in _SHAPE)
        arrived_s = time.monotonic()
        with self._books_lock:
            hit = self._cache.get(shape)
        if hit is not None and hit.state is self._latest():  # no wait for a render of another shape
            return hit
        with self._render_lock:  # one render at a time: requests that wait for it are sent it
            state = self._latest()
            with self._books_lock:
                hit = self._cache.get(shape)
            if hit is not None and (hit.state is state or hit.made_s >= arrived_s):
                return hit
            made = _render(self._app_for(state), environ, state)
            with self._books_lock:
                self.renders_total += 1
                if hit is None and len(self._cache) >= self._shapes:  # the shape rendered longest ago makes room
                    del self._cache[min(self._cache, key=lambda key: self._cache[key].made_s)]
                self._cache[shape] = made
                self._alive.add(made)
            return made

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
            self._cache = {shape: r for shape, r in self._cache.items() if r.state is state}

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
