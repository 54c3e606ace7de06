"""The running exporter: a sampling thread that publishes a new ``ExportState`` every
interval, and an HTTP server (``affmon.export.server``) that sends prometheus-client's
rendering of whatever was published last (``affmon.export.render``).

Sampling is off the request path: a scrape never waits for /proc or NVML (an NVML call
can block for tens of milliseconds, a hung GPU for much longer). The sampler schedules
its next tick only after the current one finished, so ticks never overlap; a tick that
overran its interval is followed at once by the next, without a burst to catch up. A
tick that fails is counted (``affmon_export_sample_errors_total``) and the last good
state stays served; ``affmon_export_last_sample_timestamp_seconds`` then stops moving.

Serving a recording (``affmon.export.replay``), the sampler follows the recording's pace
(``pace_s``) instead of the scrapes', and a sample of None (a replay played once that
ended) leaves the state as it is, but for its ``ReplayStatus``.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from prometheus_client import CollectorRegistry, ProcessCollector

from affmon.core.model.samples import Sample
from affmon.core.model.topology import Topology
from affmon.core.rules.base import ExpectedMasks
from affmon.core.text import term_safe
from affmon.export import MAX_THREADS
from affmon.export.collector import StateCollector
from affmon.export.pace import Pace
from affmon.export.render import Renderer
from affmon.export.server import CONNECTION_LIMIT, HELD_BYTES_LIMIT, IDLE_TIMEOUT_S, MetricsServer, format_address
from affmon.export.state import ExportState, ReplayStatus, failed, step

__all__ = ["Exporter", "format_address"]


def _no_masks() -> ExpectedMasks:
    return {}


def own_process(collector: ProcessCollector) -> dict[str, float]:
    """The exporter's ``process_*`` values as prometheus-client reads them (``/proc/self``);
    empty where it cannot."""
    return {s.name: s.value for metric in collector.collect() for s in metric.samples}


class Exporter:
    """``sample`` is the sampler (``Sampler.sample``), called only on the sampling thread.
    ``pace_s`` and ``replay``: a recording's pace and status (``ReplayFeed``); None live.
    The last three limits are the HTTP server's (``affmon.export.server``)."""

    def __init__(
        self,
        sample: Callable[[], Sample | None],
        topology: Topology,
        *,
        interval_s: float = 1.0,
        threads: bool = False,
        max_threads: int = MAX_THREADS,
        nvml_available: bool = False,
        expected_masks: Callable[[], ExpectedMasks] = _no_masks,
        pace_s: Callable[[], float] | None = None,
        replay: Callable[[], ReplayStatus] | None = None,
        connection_limit: int = CONNECTION_LIMIT,
        idle_timeout_s: int = IDLE_TIMEOUT_S,
        held_bytes_limit: int = HELD_BYTES_LIMIT,
    ) -> None:
        self._sample = sample
        self._topology = topology
        self.interval_s = interval_s
        self._expected_masks = expected_masks
        self._pace_s = pace_s
        self._replay = replay
        self._state = ExportState(nvml_available=nvml_available, replay=None if replay is None else replay())
        # The latest state as a registry, for a caller that formats or serves it another way;
        # the HTTP server renders through ``renderer``, once per state and request shape.
        self.registry = CollectorRegistry()
        self.registry.register(StateCollector(lambda: self._state, threads=threads, max_threads=max_threads))
        self.pace = Pace(interval_s)
        self._pace_lock = threading.Lock()
        self.renderer = Renderer(
            lambda: self._state, threads=threads, max_threads=max_threads, on_request=self._scraped
        )
        self._limits = {
            "connection_limit": connection_limit,
            "idle_timeout_s": idle_timeout_s,
            "held_bytes_limit": held_bytes_limit,
        }
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by a scrape, and by stop()
        self._sampler: threading.Thread | None = None
        self.server: MetricsServer | None = None
        self._last_error: str | None = None
        self._own = ProcessCollector(registry=None)

    @property
    def state(self) -> ExportState:
        """The state the next scrape renders (swapped whole by the sampling thread)."""
        return self._state

    def tick(self) -> None:
        """Take one sample and publish the next state (or count the failure)."""
        try:
            sample = self._sample()
            if sample is None:  # a replay that ended: its last state stays, the same value
                status = self._replay_status()
                if status != self._state.replay:
                    self._state = replace(self._state, replay=status)
                return
            state = step(
                self._state,
                sample,
                self._topology,
                self._expected_masks(),
                time.process_time(),
                own_process(self._own),
            )
        except Exception as exc:  # the exporter must outlive one bad tick; it says so once
            self._state = failed(self._state)
            message = f"affmon export: sampling failed: {type(exc).__name__}: {exc}"
            if message != self._last_error:
                sys.stderr.write(term_safe(message) + "\n")  # export's output is not escaped as a whole
                self._last_error = message
            return
        self._state = replace(state, replay=self._replay_status())
        self._last_error = None

    def _replay_status(self) -> ReplayStatus | None:
        return None if self._replay is None else self._replay()

    def _scraped(self) -> None:
        with self._pace_lock:
            self.pace.scraped(time.monotonic())
        self._wake.set()  # the sampler looks at its pace again (a first scrape after a long idle)

    def _run(self) -> None:
        """Sample at the pace scrapes come (``affmon.export.pace``), from ``--interval`` up
        to a bounded background interval; a tick that overran is followed at once. A
        recording is sampled at its own pace, from the end of one tick to the next."""
        last = time.monotonic()
        self.tick()
        if self._pace_s is not None:
            while not self._stop.wait(self._pace_s()):
                self.tick()
            return
        while not self._stop.is_set():
            with self._pace_lock:
                wait = self.pace.next_interval(time.monotonic())
            remaining = last + wait - time.monotonic()
            if remaining > 0:
                self._wake.clear()
                self._wake.wait(min(remaining, self.interval_s))  # re-read the pace at least each --interval
                continue
            last = time.monotonic()
            self.tick()

    def listen(self, host: str, port: int) -> tuple[str, int]:
        """Bind and serve; the address really bound (port 0 picks a free one). A bind
        that fails is an ``AffmonError`` naming the address and why."""
        self.server = MetricsServer(self.renderer, host, port, **self._limits)
        return self.server.address

    def start(self) -> None:
        """Start sampling (the first sample at once, the first rates one interval later)."""
        self._sampler = threading.Thread(target=self._run, name="affmon-export-sampler", daemon=True)
        self._sampler.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self.server is not None:
            self.server.stop(timeout_s)
            self.server = None
        if self._sampler is not None:
            self._sampler.join(timeout_s)
            self._sampler = None
