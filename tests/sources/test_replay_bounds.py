"""Replaying a recording reads it as it plays: memory stays bounded whatever the file
holds, and a file that is damaged or made up (a corrupt gzip stream, an endless line, a
wall time of 1e20, a clock that runs backwards) is one line naming the fault, never a
traceback or a hang."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from affmon.core.errors import ParseError
from affmon.core.recording.lines import split_lines
from affmon.sources.stream import ReplaySource
from tests.helpers.recording_cli import affmon, one_line_error

HOGS = Path(__file__).parent.parent / "fixtures" / "recordings" / "hogs.jsonl.gz"


def hogs_lines() -> list[str]:
    return gzip.decompress(HOGS.read_bytes()).decode().splitlines()  # a header and 5 samples


def with_sample(lines: list[str], index: int, **fields: float) -> list[str]:
    """``lines`` with sample ``index`` (0 = the first sample) changed."""
    doc = json.loads(lines[1 + index])
    doc["sample"].update(fields)
    return [*lines[: 1 + index], json.dumps(doc), *lines[2 + index :]]


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def play(path: Path) -> tuple[ReplaySource, list[float]]:
    source = ReplaySource(str(path))
    return source, [s.monotonic_s for s in iter(source.next_sample, None)]


# -- line framing ------------------------------------------------------------------------

line_texts = st.lists(
    st.one_of(
        st.text(alphabet=" \t\r", max_size=4),  # blank
        st.text(alphabet=' \t\r{}"ab1é', max_size=30),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(line_texts, st.booleans(), st.lists(st.integers(1, 40), min_size=1, max_size=10))
def test_split_lines_matches_splitting_the_whole_text(lines, final_newline, cuts):
    """Any text cut into chunks anywhere gives the non-blank lines, stripped, with the line
    numbers an editor shows: as splitting the whole text at once would."""
    data = "\n".join(lines).encode() + (b"\n" if final_newline and lines else b"")
    chunks, pos, i = [], 0, 0
    while pos < len(data):
        size = cuts[i % len(cuts)]
        chunks.append(data[pos : pos + size])
        pos, i = pos + size, i + 1
    expected = [(n, t.strip()) for n, t in enumerate(data.decode().split("\n"), start=1) if t.strip(" \t\r")]
    assert list(split_lines(chunks, "f", max_line_bytes=1000)) == expected


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 5), st.integers(1, 64), st.integers(1, 100))
def test_a_line_over_the_cap_is_refused_naming_it(blank_lines, cap, chunk):
    ok = b"x" * cap  # exactly the cap: read
    data = b"\n" * blank_lines + ok + b"\n" + b"y" * (cap + 1) + b"\n"
    got = split_lines((data[i : i + chunk] for i in range(0, len(data), chunk)), "f", max_line_bytes=cap)
    assert next(got) == (blank_lines + 1, "x" * cap)
    with pytest.raises(ParseError, match=rf"^f, line {blank_lines + 2}: longer than"):
        next(got)


def test_a_line_that_is_not_utf8_is_refused_naming_it():
    with pytest.raises(ParseError, match=r"^f, line 2: not UTF-8"):
        list(split_lines([b"{}\n\xff\xfe\n"], "f"))


# -- memory and endless input -----------------------------------------------------------


PEAK_PROBE = """
import sys
from affmon.sources.stream import ReplaySource
source = ReplaySource(sys.argv[1])
played = sum(1 for _ in iter(source.next_sample, None))
peak_kb = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(played, source.info.total_samples, peak_kb)
"""


def test_replaying_a_gzip_of_50_mb_of_blank_lines_keeps_memory_bounded(tmp_path):
    header, *samples = hogs_lines()
    path = tmp_path / "blank.jsonl.gz"
    with gzip.open(path, "wb") as f:
        f.write(header.encode() + b"\n")
        for _ in range(50):
            f.write(b"\n" * (1 << 20))
        f.write("".join(s + "\n" for s in samples).encode())
    assert path.stat().st_size < 1 << 20
    out = subprocess.run([sys.executable, "-c", PEAK_PROBE, str(path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    played, total, peak_kb = out.stdout.split()
    assert (played, total) == ("5", "5")
    # Measured: about 20 MB (Python, affmon, five samples). Split in memory, the 50 MB
    # of text took 850 MB (the text, a list of 50 million lines, and a copy of that list).
    assert int(peak_kb) < 250 * 1024, f"peak RSS {int(peak_kb) // 1024} MB"


def test_an_endless_line_is_one_line_error_with_memory_bounded():
    probe = (
        "import sys\n"
        "from affmon.core.errors import ParseError\n"
        "from affmon.sources.stream import ReplaySource\n"
        "try:\n"
        "    ReplaySource('/dev/zero')\n"
        "except ParseError as exc:\n"
        "    print(exc)\n"
        "print(next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    message, peak_kb = out.stdout.splitlines()
    assert message.startswith("zero, line 1: longer than 67,108,864 bytes")
    assert int(peak_kb) < 400 * 1024, f"peak RSS {int(peak_kb) // 1024} MB"


def test_the_cli_refuses_an_endless_file_in_one_line():
    line = one_line_error(affmon("--replay", "/dev/zero", timeout=300))
    assert "line 1: longer than" in line


# -- damaged and made-up files -----------------------------------------------------------


def test_a_corrupt_deflate_stream_is_one_line(tmp_path):
    whole = gzip.compress("\n".join(hogs_lines()).encode())
    path = tmp_path / "corrupt.jsonl.gz"
    path.write_bytes(whole[:40] + bytes(range(256)) * 8)  # a good gzip header, then garbage
    with pytest.raises(zlib.error):
        gzip.decompress(path.read_bytes())  # what the old reader let through
    line = one_line_error(affmon("--replay", str(path)))
    assert "cannot read it (corrupt gzip data" in line


def test_a_gzip_stream_cut_short_plays_its_whole_samples(tmp_path):
    """As a recording still being written (flushed after each sample) or whose recorder
    was killed: the samples whose lines are whole are played."""
    lines = hogs_lines()
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip framing
    data = b"".join(compressor.compress((line + "\n").encode()) + compressor.flush(zlib.Z_SYNC_FLUSH) for line in lines)
    path = tmp_path / "growing.jsonl.gz"
    path.write_bytes(data)  # no final block, no trailer
    source, played = play(path)
    assert len(played) == 5 and source.exhausted


@pytest.mark.parametrize("index", [0, 1])
def test_a_wall_time_of_1e20_in_the_first_samples_is_refused_in_one_line(tmp_path, index):
    path = write(tmp_path / "future.jsonl", with_sample(hogs_lines(), index, wall_time_s=1e20))
    line = one_line_error(affmon("--replay", str(path)))
    assert line.startswith(f"affmon: future.jsonl, line {index + 2}: wall_time_s 1e+20 is not a time")


def test_a_bad_wall_time_later_on_is_refused_when_reached(tmp_path):
    path = write(tmp_path / "later.jsonl", with_sample(hogs_lines(), 3, wall_time_s=-1.0))
    source = ReplaySource(str(path))
    played = [source.next_sample() for _ in range(3)]
    assert all(s is not None for s in played) and not source.exhausted
    for _ in range(2):  # and it stays refused
        with pytest.raises(ParseError, match=r"^later.jsonl, line 5: wall_time_s -1 is not a time"):
            source.next_sample()


def test_a_clock_that_does_not_move_on_is_refused_naming_the_line(tmp_path):
    lines = hogs_lines()
    second = json.loads(lines[2])["sample"]["monotonic_s"]
    path = write(tmp_path / "backwards.jsonl", with_sample(lines, 2, monotonic_s=second))
    source = ReplaySource(str(path))
    assert source.next_sample() is not None and source.next_sample() is not None
    with pytest.raises(ParseError, match=r"^backwards.jsonl, line 4: monotonic_s .* is not after the previous"):
        source.next_sample()
    path = write(tmp_path / "early.jsonl", with_sample(lines, 1, monotonic_s=second - 100))
    assert "early.jsonl, line 3: monotonic_s" in one_line_error(affmon("--replay", str(path)))


def test_a_huge_gap_between_samples_is_not_played_as_a_wait(tmp_path):
    lines = hogs_lines()
    path = write(tmp_path / "gap.jsonl", with_sample(lines, 2, monotonic_s=1e15))
    path = write(path, with_sample(path.read_text().splitlines(), 3, monotonic_s=2e15))
    path = write(path, with_sample(path.read_text().splitlines(), 4, monotonic_s=3e15))
    source = ReplaySource(str(path))
    paces = []
    while source.next_sample() is not None:
        paces.append(source.pace_s())
    assert len(paces) == 5 and max(paces) <= 10.0  # ten times the recorded 1 s interval at most


def test_a_fifo_is_read_once_and_plays(tmp_path):
    """A stream cannot be read twice to count it: it plays with its length unknown."""
    fifo = tmp_path / "stream.jsonl"
    os.mkfifo(fifo)
    text = "".join(line + "\n" for line in hogs_lines()).encode()

    def feed() -> None:
        with open(fifo, "wb") as f:
            f.write(text)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    source, played = play(fifo)
    writer.join(timeout=60)
    assert len(played) == 5 and source.info.total_samples is None
