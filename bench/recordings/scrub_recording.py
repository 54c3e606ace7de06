"""Rewrite affmon recordings in place so that they keep nothing of the machine they were
recorded on that is not about the job.

    python -m bench.recordings.scrub_recording FILE...

Per sample: the command line of every process that is not watched becomes null (its
name, threads and counters stay: they are the evidence of what else ran on the job's
CPUs), as ``affmon record`` writes without ``--all``; and each GPU's UUID becomes null
(it names one physical board; the index, model and PCI address stay). The header is
kept. A gzip file stays gzip (level 9, no name or time stamp in its header), a plain one
stays plain; the file is replaced atomically (a new file in the same directory, renamed
over the old one, with the old one's mode). Each file is read line by line through
affmon's own reader, so one that is not a recording is refused and left untouched.
Prints, per file, how many command lines and UUIDs it dropped.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import io
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from affmon.core.errors import AffmonError
from affmon.core.model.samples import Sample
from affmon.core.recording.format import header_line, private_sample, read_recording, sample_line

GZIP_MAGIC = b"\x1f\x8b"


def scrub_sample(sample: Sample) -> Sample:
    """``private_sample``, and no GPU UUIDs."""
    sample = private_sample(sample)
    if any(g.uuid is not None for g in sample.gpus):
        sample = dataclasses.replace(sample, gpus=tuple(dataclasses.replace(g, uuid=None) for g in sample.gpus))
    return sample


def _text_lines(raw: io.BufferedIOBase) -> Iterator[str]:
    for line in raw:
        yield line.decode("utf-8").rstrip("\n")


def scrub(path: Path) -> tuple[int, int]:
    """Rewrite ``path``; (command lines dropped, UUIDs dropped)."""
    with open(path, "rb") as f:
        gz = f.read(2) == GZIP_MAGIC
    cmdlines = uuids = 0
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with open(path, "rb") as source, os.fdopen(fd, "wb") as target:
            raw: io.BufferedIOBase = gzip.GzipFile(fileobj=source, mode="rb") if gz else source
            out: io.BufferedIOBase = (
                gzip.GzipFile(filename="", fileobj=target, mode="wb", compresslevel=9, mtime=0) if gz else target
            )
            header, samples = read_recording(_text_lines(raw), path.name)
            out.write((header_line(header.topology, header.host, header.nvml, header.interval_s) + "\n").encode())
            for sample in samples:
                clean = scrub_sample(sample)
                cmdlines += sum(a.cmdline != b.cmdline for a, b in zip(sample.processes, clean.processes, strict=True))
                uuids += sum(a.uuid != b.uuid for a, b in zip(sample.gpus, clean.gpus, strict=True))
                out.write((sample_line(clean) + "\n").encode())
            if out is not target:
                out.close()
        os.chmod(temp, os.stat(path).st_mode & 0o7777)
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise
    return cmdlines, uuids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE")
    args = parser.parse_args()
    for path in args.files:
        try:
            cmdlines, uuids = scrub(path)
        except (AffmonError, OSError) as exc:
            print(f"scrub_recording: {path}: {exc}", file=sys.stderr)
            return 2
        print(f"{path}: {cmdlines} command lines and {uuids} GPU UUIDs dropped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
