"""``affmon topology``, ``affmon snapshot`` and ``affmon record``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import TextIO

from affmon.collect.fs import is_dir
from affmon.collect.gather_tarball import extracted_root, is_archive
from affmon.collect.sampler import Selection
from affmon.commands.report import snapshot_json, snapshot_text, topology_text
from affmon.core.errors import SourceError
from affmon.core.model.rates import make_snapshot
from affmon.core.recording.format import header_line, private_sample, sample_line
from affmon.core.text import term_safe
from affmon.sources.live import live_sources, load_topology
from affmon.sources.record import open_output

SYSFS_CPU_DIR = "sys/devices/system/cpu"


def cmd_topology(args: argparse.Namespace) -> int:
    """The topology of this machine, of a sysfs tree (a directory, or the ``.tar.bz2``
    that ``hwloc-gather-topology`` writes) or of an hwloc XML file. What the reader left
    unknown and why goes to stderr, one ``warning:`` line each."""
    if args.root is not None and is_archive(args.root):
        with extracted_root(args.root) as root:
            if not is_dir(root, SYSFS_CPU_DIR):
                raise SourceError(
                    f"--root {term_safe(args.root)}: the archive holds no {SYSFS_CPU_DIR}: not a gathered Linux tree"
                )
            topology = load_topology(root)
    else:
        topology = load_topology(args.root, args.hwloc_xml)
    for note in topology.notes:
        print(f"warning: {term_safe(note)}", file=sys.stderr)
    if args.json:
        print(json.dumps(topology.to_json(), indent=2))
    else:
        print(topology_text(topology))
    return 0


def cmd_snapshot(args: argparse.Namespace) -> int:
    with live_sources(Selection(pids=tuple(args.pid), all=args.all), args.root or "/", loops=True) as src:
        first = src.sample()
        time.sleep(args.interval)
        second = src.sample()
    snapshot = make_snapshot(first, second, src.topology)
    if args.json:
        print(json.dumps(snapshot_json(snapshot, src.nvml_status), indent=2))
    else:
        if src.notice:
            print(f"note: {src.notice}")
        print(snapshot_text(snapshot, src.nvml_status, threads=not args.no_threads))
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    """Write a header line, then one sample per interval for ``--duration`` seconds. The
    other processes on the machine are sampled too, as evidence of what shares the
    watched ones' CPUs, but only the watched processes' command lines are written
    (every one with ``--all``); the file is new and private (``affmon.sources.record``).
    Each rank's (and ``--pid`` process's) loop window rides along under its process, so a
    replay computes the loop breakdown again."""
    selection = Selection(pids=tuple(args.pid), all=args.all, others=True)
    count = 0
    progress = Progress(sys.stderr) if sys.stderr is not None and sys.stderr.isatty() else None
    with live_sources(selection, loops=True) as src:
        out = open_output(args.file, force=args.force)
        try:
            out.write(header_line(src.topology, src.host, src.nvml_status, args.interval) + "\n")
            ticks = int(args.duration / args.interval + 1e-9) + 1  # samples at 0, interval, ..., duration
            start = next_tick = time.monotonic()
            for count in range(1, ticks + 1):
                sample = src.sample()
                out.write(sample_line(sample if args.all else private_sample(sample)) + "\n")
                out.flush()
                if progress is not None:
                    progress.show(
                        f"recording: {count} of {ticks} samples, {_size(out.size())}, "
                        f"{time.monotonic() - start:.0f} s of {args.duration:g} s"
                    )
                if count < ticks:
                    next_tick += args.interval
                    out.wait(max(0.0, next_tick - time.monotonic()))
        except BaseException:
            if progress is not None:
                progress.clear()
            out.close(quiet=True)
            raise
        size = out.size()
        compressed = out.compressed
        out.close()
        size = out_size_after_close(args.file, size)
    if progress is not None:
        progress.clear()
    if args.file != "-":
        said = f"recorded {count} samples to {term_safe(args.file)}"
        if size is not None and count:
            per_hour = size / count * 3600 / args.interval  # a sample's share of the file, an hour of them
            said += f" ({_size(size)}; about {_size(per_hour)} an hour at {args.interval:g} s"
            said += ")" if compressed else "; a FILE ending in .gz is written compressed)"
        print(said, file=sys.stderr)
    return 0


class Progress:
    """One line on a terminal, rewritten in place (``\\r``), cleared at the end."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.width = 0

    def show(self, text: str) -> None:
        self.stream.write("\r" + text.ljust(self.width))
        self.stream.flush()
        self.width = max(self.width, len(text))

    def clear(self) -> None:
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0


def _size(size: float | None) -> str:
    if size is None:
        return "size unknown"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def out_size_after_close(path: str, before: int | None) -> int | None:
    """The file's size once closed (a gzip stream's trailer is written at close)."""
    if path == "-" or before is None:
        return before
    try:
        return os.stat(path).st_size
    except OSError:
        return before
