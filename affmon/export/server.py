"""The exporter's HTTP server: waitress, bounded so that no client can starve the sampler
or keep another client from its answer. Measured in docs/export.md, "The network".

* **Connections.** At most ``connection_limit`` open at once, and never more than half of
  the descriptors free when the server starts, so the sampler (``/proc``, NVML) keeps the
  rest whatever the clients do. At the limit a new connection is not left in the queue:
  the connection quiet longest is closed to make room (an idle keep-alive, a client that
  never sent a request, a reader that stopped reading); one with a request in service or
  with request bytes waiting unread is never chosen.
* **Idle time.** A connection that neither sends nor receives a byte for ``idle_timeout_s``
  is closed, a reader that stopped reading included (waitress's own timeout only marks such
  a connection, which then waits for a writability that never comes).
* **Memory.** A body is shared by every connection sending it (``affmon.export.render``),
  so a worker thread never waits for a reader. Bodies of earlier states still held by
  connections are capped at ``held_bytes_limit``: above it, their connections are closed,
  oldest body first. The kernel's send buffer is fixed at 256 KiB a connection (autotuned,
  it grows to 4 MiB for a reader that does not read). Request headers are capped at 16 KiB
  and request bodies at 8 KiB, and nothing spills to a temporary file (a read-only root
  may have none).
* **Pipelining.** At most ``PIPELINED_LIMIT`` requests read ahead on one connection; the
  next ones are parsed once the answers to those were sent. (waitress answers a connection's
  requests one at a time, each behind the other connections' next one, but parses every
  request one 8 KiB read brought: up to about two hundred short ones.)
* **Queue.** A listen backlog of 1024 (the kernel caps it at ``net.core.somaxconn``), so a
  burst of connections waits in the kernel instead of losing its SYN and retrying a second
  later.

The event loop uses ``poll``: ``select`` fails on descriptors above 1023, which exist once
the descriptor limit is raised.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import resource
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any, cast

from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.buffers import ReadOnlyFileBasedBuffer
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import TcpWSGIServer

from affmon.core.errors import AffmonError
from affmon.export.render import BodyReader, Renderer, Rendering

CONNECTION_LIMIT = 100
IDLE_TIMEOUT_S = 10
HELD_BYTES_LIMIT = 64 << 20
BACKLOG = 1024
PIPELINED_LIMIT = 4  # requests read ahead on one connection
SEND_BUFFER = 256 << 10  # per connection (the kernel doubles it for its bookkeeping)
_LOOP_TIMEOUT_S = 1.0


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _why(exc: OSError) -> str:
    if isinstance(exc, socket.gaierror):
        return "no such host or address"
    reasons = {
        errno.EADDRINUSE: "the port is in use (another exporter?)",
        errno.EADDRNOTAVAIL: "not an address of this machine",
        errno.EACCES: "permission denied (ports below 1024 need CAP_NET_BIND_SERVICE)",
    }
    return reasons.get(exc.errno or 0, exc.strerror or str(exc))


def raise_fd_limit() -> int:
    """Raise the soft limit on open files to the hard one (any process may); the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError):
            return soft
    return hard


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def fd_connection_limit(wanted: int, soft_limit: int, open_now: int) -> int:
    """At most half of the descriptors still free: the other half stays the sampler's."""
    if soft_limit == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, (soft_limit - open_now) // 2))


def _bind(host: str, port: int) -> socket.socket:
    """The first address ``getaddrinfo`` gives, as prometheus-client's server chose it (an IPv6
    socket keeps the system's dual-stack default)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, sockaddr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
    except OSError:
        sock.close()
        raise
    return sock


def _unread(channel: HTTPChannel) -> bool:
    if channel.socket is None:
        return False
    try:
        return bool(channel.socket.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except OSError:  # nothing waiting (EAGAIN), or a broken connection
        return False


def _drop(channel: HTTPChannel) -> None:
    """Close at the loop's next turn. ``will_close`` alone waits for the socket to be
    writable, which a reader that stopped reading never makes it; after ``shutdown`` poll
    reports it at once. A connection with an answer still unsent is reset, which frees what
    the kernel holds for it; a quiet one gets an orderly end."""
    channel.will_close = True
    if channel.socket is not None:
        with contextlib.suppress(OSError):
            if channel.total_outbufs_len:
                channel.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            channel.socket.shutdown(socket.SHUT_RDWR)


def _busy(channel: HTTPChannel) -> bool:
    """A request in service, or waiting for one ahead of it."""
    return bool(channel.requests) or bool(getattr(channel, "waiting", b""))


def _held_by(channel: HTTPChannel) -> Iterator[Rendering]:
    for buffer in list(channel.outbufs):
        file = getattr(buffer, "file", None) if isinstance(buffer, ReadOnlyFileBasedBuffer) else None
        if isinstance(file, BodyReader) and file.rendering is not None:
            yield file.rendering


class _Waiting(HTTPRequestParser):
    """Stands in for the requests a connection wrote past ``PIPELINED_LIMIT``: keeps their bytes,
    unparsed and in order, on the connection until the requests ahead are answered."""

    def __init__(self, adj: Adjustments, channel: _BoundedChannel) -> None:
        super().__init__(adj)
        self._channel = channel

    def received(self, data: bytes) -> int:
        self._channel.waiting += data
        return len(data)


class _BoundedChannel(HTTPChannel):
    """waitress's connection, with at most ``PIPELINED_LIMIT`` requests read ahead. waitress
    parses every request of what one read brought and reads no more until they are answered;
    here a request past the limit is not parsed: its bytes wait (at most one read's, 8 KiB)
    until the answers ahead of it are sent, as the requests still in the kernel do. Every
    method here runs on the event-loop thread."""

    waiting = b""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # waitress makes each request's parser by calling ``parser_class(adj)``.
        self.parser_class = cast("type[HTTPRequestParser]", self._parser)

    def _parser(self, adj: Adjustments) -> HTTPRequestParser:
        if len(self.requests) >= PIPELINED_LIMIT:  # under waitress's lock on the requests
            return _Waiting(adj, self)
        return HTTPRequestParser(adj)

    def readable(self) -> bool:
        """As waitress (when every answer was sent), once the waiting bytes are parsed."""
        ready = bool(super().readable())
        if ready and self.waiting:
            data, self.waiting = self.waiting, b""
            self.request = None  # the stand-in
            self.received(data)
            ready = bool(super().readable())
        return ready


class _BoundedServer(TcpWSGIServer):
    """waitress's TCP server with eviction at the connection limit and a cap on held bodies.
    Every method here runs on the event-loop thread."""

    channel_class = _BoundedChannel
    renderer: Renderer
    held_bytes_limit: int
    evicted_total = 0

    def channels(self) -> list[HTTPChannel]:
        return list(cast("dict[int, HTTPChannel]", self.active_channels).values())

    def _open(self) -> list[HTTPChannel]:
        return [c for c in self.channels() if not c.will_close]

    def _evictable(self) -> HTTPChannel | None:
        """The connection quiet longest: no request in service and no byte waiting unread (a
        request that arrived since the last poll is not quiet)."""
        quiet = sorted((c for c in self._open() if not _busy(c)), key=lambda c: c.last_activity)
        return next((c for c in quiet if not _unread(c)), None)

    def _room(self) -> bool:
        return len(self._open()) < self.adj.connection_limit or self._evictable() is not None

    def readable(self) -> bool:
        now = time.time()
        if now >= self.next_channel_cleanup:
            self.next_channel_cleanup = int(now) + self.adj.cleanup_interval
            self.maintenance(int(now))
        self._cap_held_bodies()
        return bool(self.accepting) and self._room()

    def handle_accept(self) -> None:
        if len(self._open()) >= self.adj.connection_limit:
            victim = self._evictable()
            if victim is None:
                return
            _drop(victim)
            self.evicted_total += 1
        super().handle_accept()

    def maintenance(self, now: int) -> None:
        """Close the connections quiet for ``channel_timeout`` (waitress's rule: none with a
        request in service), stalled readers included."""
        cutoff = now - self.adj.channel_timeout
        for channel in self._open():
            if not _busy(channel) and channel.last_activity < cutoff:
                _drop(channel)

    def set_socket_options(self, conn: socket.socket) -> None:
        super().set_socket_options(conn)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)

    def _cap_held_bodies(self) -> None:
        """Over the cap, close the connections holding bodies of earlier states, oldest first;
        the latest state's bodies are what every normal scrape is sent, and stay."""
        alive = self.renderer.alive()
        held = sum(len(r.body) for r in alive)
        if held <= self.held_bytes_limit:
            return
        self.renderer.drop_stale()
        current = {id(r) for r in self.renderer.current()}
        holders: dict[int, list[HTTPChannel]] = {}
        for channel in self._open():
            for rendering in _held_by(channel):
                holders.setdefault(id(rendering), []).append(channel)
        for rendering in sorted(alive, key=lambda r: r.made_s):
            if held <= self.held_bytes_limit:
                break
            if id(rendering) in current:
                continue
            for channel in holders.get(id(rendering), []):
                _drop(channel)
                self.evicted_total += 1
            held -= len(rendering.body)


class MetricsServer:
    """Serves ``renderer`` on ``host:port`` from a thread of its own until ``stop``."""

    def __init__(
        self,
        renderer: Renderer,
        host: str,
        port: int,
        *,
        connection_limit: int = CONNECTION_LIMIT,
        idle_timeout_s: int = IDLE_TIMEOUT_S,
        held_bytes_limit: int = HELD_BYTES_LIMIT,
        threads: int = 4,
    ) -> None:
        try:
            sock = _bind(host, port)
        except OSError as exc:
            raise AffmonError(f"--listen {format_address(host, port)}: cannot listen: {_why(exc)}") from None
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.connection_limit = fd_connection_limit(connection_limit, soft, open_fds())
        adj = Adjustments(
            sockets=[sock],
            threads=threads,
            backlog=BACKLOG,
            connection_limit=self.connection_limit,
            channel_timeout=idle_timeout_s,
            cleanup_interval=max(1, idle_timeout_s // 4),
            max_request_header_size=16 << 10,
            max_request_body_size=8 << 10,
            inbuf_overflow=64 << 10,  # above the largest request body: never a temporary file
            outbuf_high_watermark=1 << 40,  # bodies are shared, not copied: a worker never waits for a reader
            outbuf_overflow=1 << 41,
            asyncore_use_poll=True,
            log_socket_errors=False,
            ident="affmon",
        )
        logging.getLogger("waitress").setLevel(logging.ERROR)  # not a line per full queue or reset peer
        self._map: dict[int, Any] = {}  # waitress's socket map: the listener, its trigger, the connections
        server = _BoundedServer(
            renderer,
            map=self._map,
            _sock=sock,
            adj=adj,
            bind_socket=False,
            sockinfo=(sock.family, sock.type, sock.proto, sock.getsockname()),
        )
        server.renderer = renderer
        server.held_bytes_limit = held_bytes_limit
        self._server = server
        self._sock = sock
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="affmon-export-http", daemon=True)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        bound = self._sock.getsockname()
        return str(bound[0]), int(bound[1])

    @property
    def evicted_total(self) -> int:
        return self._server.evicted_total

    def open_connections(self) -> int:
        return len(self._server.channels())

    def _loop(self) -> None:
        while not self._stopping.is_set():
            wasyncore.loop(timeout=_LOOP_TIMEOUT_S, map=self._map, use_poll=True, count=1)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop accepting, close every connection, wait for the workers."""
        self._stopping.set()
        self._server.pull_trigger()
        self._thread.join(timeout_s)
        for channel in self._server.channels():
            channel.handle_close()
        self._server.close()
        self._server.task_dispatcher.shutdown(cancel_pending=True, timeout=int(timeout_s))
