"""``affmon export``: serve the watched processes' placement, findings and GPUs on
``/metrics`` for Prometheus (docs/export.md).

Bound to loopback unless ``--listen`` asks for more. Everything that can fail before
serving (a bad ``--listen``, a port in use, a ``--pid`` that does not exist) fails as
one line and exit status 2; SIGTERM stops it cleanly with status 0. This module imports
prometheus-client only when the command runs, so ``affmon --help`` does not need it.
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
    from affmon.commands.argtypes import count, pid, seconds  # the same checks and messages as every other command
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
        "--interval", type=seconds, default=1.0, metavar="SECONDS", help="sampling interval (default 1)"
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
    return export


def cmd_export(args: argparse.Namespace) -> int:
    from affmon.actions.journal import PinnedMasks
    from affmon.collect.sampler import Selection
    from affmon.core.fmt import term_safe
    from affmon.export.server import raise_fd_limit
    from affmon.export.service import Exporter, format_address
    from affmon.sources.live import live_sources

    raise_fd_limit()  # the connection limit takes at most half of what is free (affmon.export.server)
    host, port = args.listen
    with live_sources(Selection(pids=tuple(args.pid), others=True), loops=True) as src:
        exporter = Exporter(
            src.sample,
            src.topology,
            interval_s=args.interval,
            threads=args.threads,
            max_threads=args.max_threads,
            nvml_available=src.gateway is not None and src.gateway.available,
            expected_masks=PinnedMasks(),
        )
        bound = exporter.listen(host, port)
        stop = threading.Event()
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            exporter.start()
            sys.stderr.write(
                f"affmon export: serving http://{format_address(*bound)}/metrics, "
                f"sampling every {args.interval:g} s; {term_safe(src.nvml_status or 'no NVML')}\n"
            )
            sys.stderr.flush()
            stop.wait()
        finally:
            exporter.stop()
            signal.signal(signal.SIGTERM, previous)
    return 0
