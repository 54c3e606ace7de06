"""``Ticker``: the one thread that runs the monitor's ticks, when it is told to.

A Textual worker and a timer for each tick cost the UI thread 0.4-0.8 ms a tick (a worker's
task, its executor hand-off and its state messages; a timer's task), as much as drawing a
quiet screen. This thread lives as long as the app: ``after(delay)`` or ``now()`` sets when
the next tick is due; the thread sleeps until then, runs it and calls ``done`` with what
it returned and its error (None, None when it went well and returned nothing), from the
thread: one hand-over a tick, so the app is woken once for the tick's result and its end.
The app answers ``acknowledge()`` once it has handled that, and until then the ticker is
``busy`` (no tick starts twice, and a restart or a test knows a tick is still landing).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

Result = TypeVar("Result")

_IDLE, _CLAIMED, _RUNNING, _LANDING = "idle", "claimed", "running", "landing"


class Ticker(Generic[Result]):
    def __init__(
        self,
        run: Callable[[], Result],
        done: Callable[[Result | None, BaseException | None], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._run = run
        self._done = done
        self._clock = clock
        self._cv = threading.Condition()
        self._due: float | None = None  # when the next tick starts (the clock's time)
        # idle; claimed (``now`` asked, not started yet); running; landing (ended, its end not
        # acknowledged yet)
        self._state = _IDLE
        self._closed = False
        self._thread: threading.Thread | None = None

    @property
    def busy(self) -> bool:
        """A tick is asked for at once, runs, or has ended without the app's acknowledgement."""
        with self._cv:
            return self._state != _IDLE

    def now(self) -> bool:
        """A tick at once, unless one is asked for or running already (False then)."""
        with self._cv:
            if self._state != _IDLE or self._closed:
                return False
            self._state = _CLAIMED
            self._set_due(self._clock())
            return True

    def after(self, delay_s: float) -> None:
        """The next tick ``delay_s`` from now, in place of any that was due."""
        with self._cv:
            if not self._closed:
                self._set_due(self._clock() + max(0.0, delay_s))

    def cancel(self) -> bool:
        """No tick due any more; True when one is running or landing all the same (it ends as usual)."""
        with self._cv:
            self._due = None
            if self._state == _CLAIMED:
                self._state = _IDLE
            return self._state != _IDLE

    def acknowledge(self) -> None:
        """The app has handled the end of the last tick."""
        with self._cv:
            if self._state == _LANDING:
                self._state = _IDLE
            self._cv.notify_all()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the thread; a tick under way finishes first (up to ``timeout_s``)."""
        with self._cv:
            self._closed = True
            self._due = None
            self._cv.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def _set_due(self, at: float) -> None:
        self._due = at
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="affmon-ticker", daemon=True)
            self._thread.start()
        self._cv.notify_all()

    def _startable(self) -> float | None:
        """Seconds until the due tick may start (<= 0: now), or None while none may."""
        if self._due is None or self._state not in (_IDLE, _CLAIMED):
            return None
        return self._due - self._clock()

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._closed:
                    wait = self._startable()
                    if wait is not None and wait <= 0:
                        break
                    self._cv.wait(wait)
                if self._closed:
                    return
                self._due = None
                self._state = _RUNNING
            result: Result | None = None
            error: BaseException | None = None
            try:
                result = self._run()
            except Exception as exc:  # the app shows it; the thread lives on for the next tick
                error = exc
            with self._cv:
                self._state = _LANDING
            self._done(result, error)
