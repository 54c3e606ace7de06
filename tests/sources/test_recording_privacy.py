"""What a recording keeps, and how its file is made: only the watched processes' command
lines (every one with ``--all``), a new file of mode 0600 that is never written through
a symbolic link or into an existing file's inode, gzip for ``.gz``; and the recordings
shipped with affmon follow the same rule."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from affmon.commands.tui import demo_recording
from affmon.core.recording.format import private_sample, read_recording
from affmon.sources.stream import ReplaySource
from tests.helpers.recording_cli import affmon, one_line_error

SHIPPED = [
    Path(demo_recording()),
    *sorted((Path(__file__).parent.parent / "fixtures" / "recordings").glob("*.jsonl.gz")),
]


@contextmanager
def sleeper(marker: str) -> Iterator[int]:
    """A python process whose command line ends with ``marker``; its PID."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", marker])
    try:
        deadline = time.monotonic() + 30
        while marker.encode() not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():  # exec'd
            assert time.monotonic() < deadline
            time.sleep(0.01)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def processes(path: Path) -> dict[int, list[dict[str, Any]]]:
    """Every sample's process entries, by PID."""
    opener: Any = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    json.loads(lines[0])["affmon_recording"]  # a header
    found: dict[int, list[dict[str, Any]]] = {}
    for line in lines[1:]:
        for p in json.loads(line)["sample"]["processes"]:
            found.setdefault(p["pid"], []).append(p)
    return found


# -- the shipped recordings --------------------------------------------------------------


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_recordings_keep_no_command_line_of_an_unwatched_process(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        _, samples = read_recording(f, path.name)
        samples = list(samples)
    assert len(samples) >= 5
    unwatched = [p for s in samples for p in s.processes if not p.watched and not p.kernel]
    assert unwatched, "the recording still shows what else ran"
    assert all(p.cmdline is None and p.name for p in unwatched)
    assert all(p.cmdline for s in samples for p in s.processes if p.watched), "the job's command lines stay"
    assert all(g.uuid is None for s in samples for g in s.gpus), "no GPU serial of the recording machine"


def test_private_sample_drops_only_unwatched_command_lines():
    with gzip.open(SHIPPED[1], "rt", encoding="utf-8") as f:
        _, samples = read_recording(f, "r")
        sample = next(samples)
    other = next(p for p in sample.processes if not p.watched and not p.kernel)
    kernel = next(p for p in sample.processes if p.kernel)
    assert kernel.cmdline == ""
    leaky = dataclasses.replace(
        sample,
        processes=tuple(
            dataclasses.replace(p, cmdline="agent --token=s3cret") if p.pid == other.pid else p
            for p in sample.processes
        ),
    )
    got = private_sample(leaky)
    assert got == sample  # the made-up command line gone, nothing else changed
    assert next(p for p in got.processes if p.pid == other.pid).name == other.name
    assert private_sample(sample) is sample


# -- affmon record on this machine -------------------------------------------------------


def test_record_writes_only_the_watched_processes_command_lines_to_a_0600_file(tmp_path):
    out_path = tmp_path / "run.jsonl"
    with sleeper("watched-job-7f3a") as job, sleeper("--env={'TOKEN':'other-tenant-9c1e'}") as other:
        out = affmon("record", str(out_path), "--pid", str(job), "--duration", "0.2", "--interval", "0.1")
        assert out.returncode == 0, out.stderr
        assert stat.S_IMODE(out_path.stat().st_mode) == 0o600
        text = out_path.read_text()
        assert "other-tenant-9c1e" not in text and "watched-job-7f3a" in text
        found = processes(out_path)
        assert all(p["watched"] and "watched-job-7f3a" in p["cmdline"] for p in found[job])
        assert found[other], "the other process is still sampled, as contention evidence"
        assert all(not p["watched"] and p["cmdline"] is None and p["name"].startswith("python") for p in found[other])

        every = tmp_path / "every.jsonl"
        out = affmon("record", str(every), "--pid", str(job), "--all", "--duration", "0.1", "--interval", "0.1")
        assert out.returncode == 0, out.stderr
        assert stat.S_IMODE(every.stat().st_mode) == 0o600
        assert all("other-tenant-9c1e" in p["cmdline"] for p in processes(every)[other])


def test_record_refuses_an_existing_file_without_force(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text("keep me\n")
    line = one_line_error(affmon("record", str(path), "--duration", "0.1", "--interval", "0.1"))
    assert str(path) in line and "--force" in line
    assert path.read_text() == "keep me\n"


def test_record_force_replaces_the_file_and_never_writes_the_old_inode(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text("old\n")
    path.chmod(0o644)
    elsewhere = tmp_path / "linked"
    os.link(path, elsewhere)  # the old inode, by another name
    out = affmon("record", str(path), "--force", "--duration", "0.1", "--interval", "0.1")
    assert out.returncode == 0, out.stderr
    assert elsewhere.read_text() == "old\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text().splitlines()[0])["affmon_recording"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["linked", "run.jsonl"]  # no temporary file left


@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
def test_record_never_writes_through_a_symbolic_link(tmp_path, force):
    target = tmp_path / "target"
    target.write_text("precious\n")
    dangling = tmp_path / "nowhere"
    for link, points_to in ((tmp_path / "link", target), (tmp_path / "dangling", dangling)):
        link.symlink_to(points_to)
        args = ["record", str(link), "--duration", "0.1", "--interval", "0.1"] + (["--force"] if force else [])
        line = one_line_error(affmon(*args))
        assert "symbolic link" in line or "exists" in line
        assert link.is_symlink()
    assert target.read_text() == "precious\n" and not dangling.exists()


def test_record_to_a_gz_name_writes_gzip_that_replays(tmp_path):
    path = tmp_path / "run.jsonl.gz"
    out = affmon("record", str(path), "--duration", "0.2", "--interval", "0.1")
    assert out.returncode == 0, out.stderr
    assert path.read_bytes()[:2] == b"\x1f\x8b" and stat.S_IMODE(path.stat().st_mode) == 0o600
    source = ReplaySource(str(path))
    try:
        assert source.info.total_samples == 3
        assert sum(1 for _ in iter(source.next_sample, None)) == 3
    finally:
        source.close()
