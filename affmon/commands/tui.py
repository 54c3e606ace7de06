"""``affmon`` with no subcommand: the TUI, live or replaying a recording.

Everything that can fail before drawing (a PID that does not exist, a replay file that
is missing or not a recording, no terminal) fails here as one line and exit status 2,
the arguments checked first so a mistake is named even when the output is piped.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import signal
import sys
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

from affmon.core.errors import AffmonError

if TYPE_CHECKING:
    from textual.app import App

    from affmon.core.rules.base import ExpectedMasks
    from affmon.tui.pinner import Pinner

EXIT_USAGE = 2


def demo_recording() -> str:
    """The real H200 run shipped inside the package (affmon/data/README.md)."""
    from importlib.resources import files

    return str(files("affmon") / "data" / "demo.jsonl.gz")


def import_asyncio_without_tls() -> None:
    """Import asyncio as on a Python built without ``ssl``. asyncio imports ``ssl`` when it
    is imported, and that loads OpenSSL (libssl, libcrypto): 3.8 MiB of the monitor's
    memory, measured as RSS on a two-core VM, for TLS that the monitor never uses.
    ``ssl`` is marked missing while asyncio loads (it then leaves its TLS support out, as
    it does where Python has none) and importable again afterwards for anything else.
    Nothing is done when either is imported already."""
    if "asyncio" in sys.modules or "ssl" in sys.modules:
        return
    sys.modules["ssl"] = None  # type: ignore[assignment]  # what "import ssl" raises ImportError on
    try:
        import asyncio  # noqa: F401
    finally:
        del sys.modules["ssl"]


# What ends the monitor from outside: kill, a terminal that goes away (an ssh connection that
# drops, a tmux window closed), Ctrl-\ (Ctrl-C is a key Textual reads).
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


@contextlib.contextmanager
def _tunes_end_first(app: App[Any]) -> Iterator[None]:
    """An ending signal first stops any tune the monitor runs (``T``) and waits until it has
    put its trial back, then ends the monitor: killed with a trial in force, the job would be
    left on it, the others moved off its CPUs, nothing on screen to say so."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            # The terminal hung up: the kernel sends SIGCONT next, which Textual's driver takes
            # for a resume after Ctrl-Z and enters application mode again on the dead
            # terminal. Its new writer thread died on the first write, its queue filled, and
            # the exit waited on it forever. Python runs pending handlers in signal order, so
            # this one (1) comes before SIGCONT's (18).
            signal.signal(signal.SIGCONT, signal.SIG_DFL)
        tune = sys.modules.get("affmon.actions.tune")  # loaded by the first T: no tune ran without it
        if tune is not None:
            tune.abort_running()
        app.exit(return_code=128 + signum)

    previous = {s: signal.signal(s, handler) for s in ENDING_SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def readonly(args: argparse.Namespace) -> bool:
    """``--readonly``, or ``AFFMON_READONLY`` set to anything but empty or 0: an admin's way
    to make looking the default on a shared node (in the environment every login gets)."""
    return bool(getattr(args, "readonly", False)) or os.environ.get("AFFMON_READONLY", "") not in ("", "0")


class _PinnedLater:
    """The journal's pins in force (``PinnedMasks``), its reader loaded at the first call:
    the monitor's first tick, after the first frame."""

    def __init__(self) -> None:
        self._read: Callable[[], ExpectedMasks] | None = None

    def __call__(self) -> ExpectedMasks:
        if self._read is None:
            from affmon.actions.journal import PinnedMasks

            self._read = PinnedMasks()
        return self._read()


def _pinner(args: argparse.Namespace) -> Pinner:
    from affmon.tui.pinner import ReadOnlyPinner, ReplayPinner, SystemPinner

    if args.replay is not None:
        return ReplayPinner()
    return ReadOnlyPinner() if readonly(args) else SystemPinner()


def cmd_tui(args: argparse.Namespace) -> int:
    from affmon.sources.stream import LiveSource, ReplaySource, Source

    source: Source
    live: LiveSource | None = None  # the first frame is drawn from a live source's first sample
    if getattr(args, "demo", False):
        if args.replay is not None:
            raise AffmonError(
                "--demo and --replay do not go together: --demo replays the recording shipped with affmon"
            )
        args.replay = demo_recording()
    restart: Callable[[], Source] | None = None
    if args.replay is not None:
        if args.tui_pid:
            raise AffmonError("--pid and --replay do not go together: a recording has its own processes")
        source = ReplaySource(args.replay, args.speed)
        restart = functools.partial(ReplaySource, args.replay, args.speed)  # R: the recording from its start
        interval = None
    else:
        source = live = LiveSource(tuple(args.tui_pid), args.tui_interval, expected_masks=_PinnedLater())
        interval = args.tui_interval

    if not (sys.stdout.isatty() and sys.stdin.isatty()):
        source.close()
        sys.stderr.write(
            "affmon: the monitor needs a terminal (standard input and output are not both one); "
            "for text use `affmon snapshot` or `affmon diagnose`\n"
        )
        return EXIT_USAGE
    if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
        # Inherited (nohup, a parent that ignores it): the monitor would outlive its
        # terminal, sampling and probing for a screen no one has. It ends as it does after
        # Textual has loaded, where its own handler takes the signal.
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    from affmon.tui import heap

    heap.at_start()
    first, early = None, None
    try:
        if live is not None:
            # The first sample, shown as plain text before Textual loads (a few hundred ms
            # of CPU, a second and more on a loaded machine); Textual's screen then draws over it.
            from affmon.tui.first_frame import draw_first_frame, early_screen

            early = early_screen()
            first = draw_first_frame(live, early, args.tui_pid[0] if args.tui_pid else None)
        pinner = _pinner(args)  # after the first frame: its journal and planner are not in it
        import_asyncio_without_tls()
        from affmon.tui.app import AffmonApp

        focus = args.tui_pid[0] if args.tui_pid else None
        app = AffmonApp(
            source,
            pinner,
            interval,
            focus_pid=focus,
            restart=restart,
            demo=bool(getattr(args, "demo", False)),
            first_view=first,
            early=early,
        )
        app.settle_heap = True
        first = None  # the app drops it once shown; held here, it would stay for the whole run
        with _tunes_end_first(app):
            app.run()
    finally:
        if early is not None:
            early.close()
        source.close()
    return 0
