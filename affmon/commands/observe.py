"""``affmon topology``, ``affmon snapshot`` and ``affmon record``."""

from __future__ import annotations

import argparse
import json
import sys
import time

from affmon.collect.sampler import Selection
from affmon.commands.common import live_sources, load_topology
from affmon.core.errors import SourceError
from affmon.core.rates import make_snapshot
from affmon.core.recording import header_line, sample_line
from affmon.core.report import snapshot_json, snapshot_text, topology_text


def cmd_topology(args: argparse.Namespace) -> int:
    topology = load_topology(args.root, args.hwloc_xml)
    if args.json:
        print(json.dumps(topology.to_json(), indent=2))
    else:
        print(topology_text(topology))
    return 0


def cmd_snapshot(args: argparse.Namespace) -> int:
    with live_sources(Selection(pids=tuple(args.pid), all=args.all), args.root or "/") as src:
        first = src.sampler.sample()
        time.sleep(args.interval)
        second = src.sampler.sample()
    snapshot = make_snapshot(first, second, src.topology)
    if args.json:
        print(json.dumps(snapshot_json(snapshot, src.nvml_status), indent=2))
    else:
        print(snapshot_text(snapshot, src.nvml_status, threads=not args.no_threads))
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    """Write a header line, then one sample per interval for ``--duration`` seconds."""
    selection = Selection(pids=tuple(args.pid), all=args.all, others=True)
    try:
        out = sys.stdout if args.file == "-" else open(args.file, "w", encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        raise SourceError(f"cannot write {args.file}: {exc.strerror}") from None
    count = 0
    with out, live_sources(selection) as src:
        out.write(header_line(src.topology, src.host, src.nvml_status, args.interval) + "\n")
        ticks = int(args.duration / args.interval + 1e-9) + 1  # samples at 0, interval, ..., duration
        next_tick = time.monotonic()
        for count in range(1, ticks + 1):
            out.write(sample_line(src.sampler.sample()) + "\n")
            out.flush()
            if count < ticks:
                next_tick += args.interval
                time.sleep(max(0.0, next_tick - time.monotonic()))
    if args.file != "-":
        print(f"recorded {count} samples to {args.file}", file=sys.stderr)
    return 0
