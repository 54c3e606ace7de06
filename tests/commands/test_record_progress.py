"""``record`` on a terminal says where it is (samples, size, time) on one line it rewrites
and clears; at the end it says the file's size and what an hour of it costs, and how to
have it compressed."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.pty_read import read_pty


def test_the_end_says_the_size_and_the_hourly_rate(tmp_path: Path) -> None:
    plain, packed = tmp_path / "r.jsonl", tmp_path / "r.jsonl.gz"
    for path in (plain, packed):
        out = subprocess.run(
            [sys.executable, "-m", "affmon", "record", str(path), "--duration", "1", "--interval", "0.5"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        (line,) = out.stderr.splitlines()
        size = path.stat().st_size
        said = r"\(([\d.]+) (B|KiB|MiB); about ([\d.]+) (KiB|MiB|GiB) an hour at 0.5 s(.*)\)"
        m = re.fullmatch(rf"recorded 3 samples to {re.escape(str(path))} {said}", line)
        assert m, line
        shown = float(m.group(1)) * {"B": 1, "KiB": 1024, "MiB": 1 << 20}[m.group(2)]
        assert abs(shown - size) <= max(0.05 * size, 1024)
        hourly = float(m.group(3)) * {"KiB": 1024, "MiB": 1 << 20, "GiB": 1 << 30}[m.group(4)]
        assert abs(hourly - size / 3 * 7200) <= 0.05 * hourly  # a sample's share, 7,200 samples an hour
        assert ("a FILE ending in .gz is written compressed" in m.group(5)) == (path == plain)


def test_on_a_terminal_a_progress_line_is_rewritten_then_cleared(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    pid, fd = pty.fork()
    if pid == 0:  # the child: stderr is the terminal
        os.execv(
            sys.executable,
            [sys.executable, "-m", "affmon", "record", str(path), "--duration", "1.5", "--interval", "0.5"],
        )
    seen = read_pty(fd, time.monotonic() + 120)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, seen
    text = seen.decode()
    steps = re.findall(r"\rrecording: (\d) of 4 samples, [\d.]+ (?:B|KiB|MiB), \d+ s of 1.5 s", text)
    assert steps == ["1", "2", "3", "4"], text
    assert re.search(r"\r +\rrecorded 4 samples to ", text), text  # cleared before the last line
