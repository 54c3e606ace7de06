"""``affmon export``: serve the watched processes' placement, findings and GPUs on
``/metrics`` for Prometheus (docs/export.md).

Bound to loopback unless ``--listen`` asks for more. Everything that can fail before
serving (a bad ``--listen``, a port in use, a ``--pid`` that does not exist, a recording
that is missing or damaged) fails as one line and exit status 2; SIGTERM stops it cleanly
with status 0. This module imports prometheus-client only when the command runs, so
``affmon --help`` does not need it.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import signal
import sys
import threading
from typing import Any

DEFAULT_LISTEN = "127.0.0.1:9808"
_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", re.IGNORECASE | re.ASCII)


def listen_address(text: str) -> tuple[str, int]:
    """``ADDR:PORT`` -> (host, port). ADDR: an IPv4 address, ``[IPv6]``, a host name, or
    empty for every IPv4 interface (``:9808``). PORT 0 picks a free port."""
    host, sep, port = text.rpartition(":")
    example = f"e.g. {DEFAULT_LISTEN} or [::1]:9808"
    if not sep:
        raise argparse.ArgumentTypeError(f"expected ADDR:PORT, {example}: {text!r}")
    if not (port.isascii() and port.isdigit() and int(port) <= 65535):
        raise argparse.ArgumentTypeError(f"not a port number (0-65535): {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an IPv6 address: {text!r}") from None
    elif host == "":
        host = "0.0.0.0"
    elif ":" in host:
        raise argparse.ArgumentTypeError(f"an IPv6 address goes in brackets, {example}: {text!r}")
    elif all(c.isdigit() or c == "." for c in host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an IPv4 address: {text!r}") from None
    elif not all(_LABEL.fullmatch(label) for label in host.split(".")):
        raise argparse.ArgumentTypeError(f"not a host name or address: {text!r}")
    return host, int(port)


def add_export_parser(subparsers: argparse._SubParsersAction[Any]) -> argparse.ArgumentParser:
    # the same checks and messages as every other command
    from affmon.commands.argtypes import count, pid, seconds, speed
    from affmon.export import MAX_THREADS

    export: argparse.ArgumentParser = subparsers.add_parser(
        "export", help="serve placement, findings and GPUs as Prometheus metrics"
    )
    export.add_argument(
        "--listen",
        type=listen_address,
        default=DEFAULT_LISTEN,
        metavar="ADDR:PORT",
        help=f"where to serve /metrics (default {DEFAULT_LISTEN}, this machine only; :9808 or 0.0.0.0:9808 serves "
        "every IPv4 interface, [::]:9808 every interface)",
    )
    export.add_argument(
        "--interval",
        type=seconds,
        metavar="SECONDS",
        help="sampling interval (default 1; a recording is played at its own pace)",
    )
    export.add_argument("--pid", type=pid, action="append", default=[], help="export PID and its descendants only")
    export.add_argument("--threads", action="store_true", help="also per-thread series (many; see docs/export.md)")
    export.add_argument(
        "--max-threads",
        type=count(1, 1_000_000),
        default=MAX_THREADS,
        metavar="N",
        help=f"with --threads: per-thread series for at most N threads, the busiest over the last interval; "
        f"affmon_export_threads_left_out counts the rest (default {MAX_THREADS})",
    )
    export.add_argument(
        "--replay",
        dest="export_replay",
        metavar="FILE",
        help="serve a recording (affmon record; .gz too) as if live, paced as recorded, from its start again "
        "when it ends (docs/export.md, a fleet on one machine)",
    )
    export.add_argument(
        "--demo",
        dest="export_demo",
        action="store_true",
        help="serve the recording --demo replays (an H200 job starved by CPU hogs, then fixed)",
    )
    export.add_argument(
        "--speed",
        dest="export_speed",
        type=speed,
        default=1.0,
        metavar="X",
        help="with --replay or --demo: play at X times the recorded pace (default 1)",
    )
    export.add_argument(
        "--once",
        dest="export_once",
        action="store_true",
        help="with --replay or --demo: play the recording once, then serve the state it left "
        "(affmon_export_replay_ended 1)",
    )
    return export


def replay_path(args: argparse.Namespace) -> str | None:
    """The recording to serve, None live; the options that do not go with one refused."""
    from affmon.commands.tui import demo_recording
    from affmon.core.errors import AffmonError

    path: str | None = args.export_replay
    if args.export_demo:
        if path is not None:
            raise AffmonError("--demo and --replay do not go together: --demo serves the recording shipped with affmon")
        path = demo_recording()
    if path is None:
        for given, name in ((args.export_once, "--once"), (args.export_speed != 1.0, "--speed")):
            if given:
                raise AffmonError(f"{name} goes with --replay or --demo: it says how a recording is played")
        return None
    if args.pid:
        raise AffmonError("--pid and --replay do not go together: a recording has its own processes")
    if args.interval is not None:
        raise AffmonError("--interval and --replay do not go together: a recording is played at its own pace (--speed)")
    return path


def cmd_export(args: argparse.Namespace) -> int:
    path = replay_path(args)
    if path is not None:
        return _serve_recording(args, path)
    return _serve_live(args)


def _serve(args: argparse.Namespace, exporter: Any, what: str) -> int:
    """Listen, sample, say where on one line, and serve until SIGTERM."""
    from affmon.core.text import term_safe
    from affmon.export.service import format_address

    host, port = args.listen
    bound = exporter.listen(host, port)
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        exporter.start()
        sys.stderr.write(f"affmon export: serving http://{format_address(*bound)}/metrics, {term_safe(what)}\n")
        sys.stderr.flush()
        stop.wait()
    finally:
        exporter.stop()
        signal.signal(signal.SIGTERM, previous)
    return 0


def _serve_recording(args: argparse.Namespace, path: str) -> int:
    from affmon.export.replay import ReplayFeed
    from affmon.export.server import raise_fd_limit
    from affmon.export.service import Exporter

    feed = ReplayFeed(path, args.export_speed, loop=not args.export_once)
    try:
        raise_fd_limit()
        exporter = Exporter(
            feed.sample,
            feed.topology,
            interval_s=feed.info.interval_s,
            threads=args.threads,
            max_threads=args.max_threads,
            nvml_available=feed.header.nvml is not None,
            pace_s=feed.pace_s,
            replay=lambda: feed.status,
        )
        speed = "" if args.export_speed == 1 else f" at x{args.export_speed:g}"
        what = (
            f"replaying {feed.name} ({feed.samples} samples every {feed.info.interval_s:g} s{speed}, "
            f"recorded on {feed.info.host}), {'once' if args.export_once else 'looping'}"
        )
        return _serve(args, exporter, what)
    finally:
        feed.close()


def _serve_live(args: argparse.Namespace) -> int:
    from affmon.actions.journal import PinnedMasks
    from affmon.collect.sampler import Selection
    from affmon.export.server import raise_fd_limit
    from affmon.export.service import Exporter
    from affmon.sources.live import live_sources

    raise_fd_limit()  # the connection limit takes at most half of what is free (affmon.export.server)
    interval = 1.0 if args.interval is None else args.interval
    with live_sources(Selection(pids=tuple(args.pid), others=True), loops=True) as src:
        exporter = Exporter(
            src.sample,
            src.topology,
            interval_s=interval,
            threads=args.threads,
            max_threads=args.max_threads,
            nvml_available=src.gateway is not None and src.gateway.available,
            expected_masks=PinnedMasks(),
        )
        return _serve(args, exporter, f"sampling every {interval:g} s; {src.nvml_status or 'no NVML'}")
