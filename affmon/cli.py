"""Command line: ``affmon topology`` and ``affmon snapshot``.

Every failure the user can cause (a PID that does not exist, a root that is not a
tree, a bad XML file, an unknown option) ends as one line on stderr and exit status 2;
no traceback reaches the user.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import NoReturn

from affmon import __version__
from affmon.core.errors import AffmonError, SourceError
from affmon.core.topology import Topology

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """argparse prints usage plus the error; we print one line, like every other error."""
        sys.stderr.write(f"affmon: {message} (see affmon --help)\n")
        raise SystemExit(EXIT_USAGE)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value > 3600:
        raise argparse.ArgumentTypeError(f"must be between 0 and 3600 seconds: {text!r}")
    return value


def _pid(text: str) -> int:
    if not text.isdigit() or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"not a process id: {text!r}")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="affmon",
        description="Where GPU training processes' threads run, against NUMA nodes, caches and GPU locality.",
    )
    parser.add_argument("--version", action="version", version=f"affmon {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    topo = sub.add_parser("topology", help="the machine's CPUs, cores, caches, NUMA nodes and GPUs")
    source = topo.add_mutually_exclusive_group()
    source.add_argument("--root", metavar="DIR", help="read a recorded tree that mimics / (sys/, proc/)")
    source.add_argument("--hwloc-xml", metavar="FILE", help="read hwloc XML v2 (lstopo --of xml)")
    topo.add_argument("--json", action="store_true", help="print JSON")

    snap = sub.add_parser("snapshot", help="two samples of the watched processes' threads, as rates")
    snap.add_argument("--pid", type=_pid, action="append", default=[], help="watch PID and its descendants")
    snap.add_argument("--all", action="store_true", help="watch every process, not only training ones")
    snap.add_argument("--interval", type=_positive_float, default=1.0, metavar="SECONDS")
    snap.add_argument("--root", metavar="DIR", help="read /proc and /sys under DIR")
    snap.add_argument("--no-threads", action="store_true", help="text output: processes only")
    snap.add_argument("--json", action="store_true", help="print JSON")
    return parser


def load_topology(root: str | None = None, hwloc_xml: str | None = None) -> Topology:
    if hwloc_xml is not None:
        from affmon.collect.hwloc_xml import read_hwloc_xml

        return read_hwloc_xml(hwloc_xml)
    from affmon.collect.sysfs_topology import read_topology

    if root is not None and not os.path.isdir(root):
        raise SourceError(f"--root {root}: not a directory")
    return read_topology(root or "/")


def _cmd_topology(args: argparse.Namespace) -> int:
    topology = load_topology(args.root, args.hwloc_xml)
    if args.json:
        print(json.dumps(topology.to_json(), indent=2))
    else:
        from affmon.core.report import topology_text

        print(topology_text(topology))
    return 0


def _cmd_snapshot(args: argparse.Namespace) -> int:
    from affmon.collect.sampler import Sampler, Selection
    from affmon.core.rates import make_snapshot
    from affmon.core.report import snapshot_json, snapshot_text
    from affmon.nvml import NvmlGateway

    root = args.root or "/"
    topology = load_topology(root)
    gateway = None
    status = None
    if root == "/":  # NVML describes this machine, not a recorded one
        gateway = NvmlGateway()
        gateway.open()
        status = gateway.status
    sampler = Sampler(root, Selection(pids=tuple(args.pid), all=args.all), gpu_source=gateway)
    sampler.check_pids()
    try:
        first = sampler.sample()
        time.sleep(args.interval)
        second = sampler.sample()
    finally:
        if gateway is not None:
            gateway.close()
    snapshot = make_snapshot(first, second, topology)
    if args.json:
        print(json.dumps(snapshot_json(snapshot, status), indent=2))
    else:
        print(snapshot_text(snapshot, status, threads=not args.no_threads))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        args = parser.parse_args(["snapshot", *(argv if argv is not None else sys.argv[1:])])
    try:
        if args.command == "topology":
            return _cmd_topology(args)
        return _cmd_snapshot(args)
    except AffmonError as exc:
        sys.stderr.write(f"affmon: {exc}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (affmon ... | head): exit quietly, as ps does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
