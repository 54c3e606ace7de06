"""The running exporter: a sampling thread that publishes a new ``ExportState`` every
interval, and prometheus-client's HTTP server that formats whatever was published last.

Sampling is off the request path: a scrape never waits for /proc or NVML (an NVML call
can block for tens of milliseconds, a hung GPU for much longer). The sampler schedules
its next tick only after the current one finished, so ticks never overlap; a tick that
overran its interval is followed at once by the next, without a burst to catch up. A
tick that fails is counted (``affmon_export_sample_errors_total``) and the last good
state stays served; ``affmon_export_last_sample_timestamp_seconds`` then stops moving.
"""

from __future__ import annotations

import errno
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

from affmon.core.cpuset import CpuSet
from affmon.core.errors import AffmonError
from affmon.core.samples import Sample
from affmon.core.topology import Topology
from affmon.export.collector import StateCollector
from affmon.export.state import ExportState, failed, step


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


def _no_masks() -> Mapping[int, CpuSet]:
    return {}


class Exporter:
    """``sample`` is the sampler (``Sampler.sample``), called only on the sampling thread."""

    def __init__(
        self,
        sample: Callable[[], Sample],
        topology: Topology,
        *,
        interval_s: float = 1.0,
        threads: bool = False,
        nvml_available: bool = False,
        expected_masks: Callable[[], Mapping[int, CpuSet]] = _no_masks,
    ) -> None:
        self._sample = sample
        self._topology = topology
        self.interval_s = interval_s
        self._expected_masks = expected_masks
        self._state = ExportState(nvml_available=nvml_available)
        self.registry = CollectorRegistry()
        self.registry.register(StateCollector(lambda: self._state, threads=threads))
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None
        self._server: WSGIServer | None = None
        self._last_error: str | None = None

    @property
    def state(self) -> ExportState:
        """The state the next scrape renders (swapped whole by the sampling thread)."""
        return self._state

    def tick(self) -> None:
        """Take one sample and publish the next state (or count the failure)."""
        try:
            sample = self._sample()
            state = step(self._state, sample, self._topology, self._expected_masks(), time.process_time())
        except Exception as exc:  # the exporter must outlive one bad tick; it says so once
            self._state = failed(self._state)
            message = f"affmon export: sampling failed: {type(exc).__name__}: {exc}"
            if message != self._last_error:
                sys.stderr.write(message + "\n")
                self._last_error = message
            return
        self._state = state
        self._last_error = None

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.tick()
            next_at = max(next_at + self.interval_s, time.monotonic())
            self._stop.wait(next_at - time.monotonic())

    def listen(self, host: str, port: int) -> tuple[str, int]:
        """Bind and serve; the address really bound (port 0 picks a free one). A bind
        that fails is an ``AffmonError`` naming the address and why."""
        try:
            server, _ = start_http_server(port, host, registry=self.registry)
        except OSError as exc:
            raise AffmonError(f"--listen {format_address(host, port)}: cannot listen: {_why(exc)}") from None
        self._server = server
        bound = server.server_address
        return str(bound[0]), int(bound[1])

    def start(self) -> None:
        """Start sampling (the first sample at once, the first rates one interval later)."""
        self._sampler = threading.Thread(target=self._run, name="affmon-export-sampler", daemon=True)
        self._sampler.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._sampler is not None:
            self._sampler.join(timeout_s)
            self._sampler = None
