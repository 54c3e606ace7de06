"""End to end in a real terminal: tmux runs ``python -m affmon --pid X`` on a busy
process pinned to one CPU, at 160x48 and at 80x24; the screen shows it; ``r`` then Enter
re-pins it for real (checked with sched_getaffinity on every thread); ``u`` then Enter puts
it back. And ``affmon --demo`` at 80x24, as a newcomer first runs it."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.live import usable_cpus, workload
from tests.helpers.tmux import Tmux, tmux_server

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (tests/run installs it)")


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    with tmux_server("test") as t:
        yield t


def masks(pid: int) -> dict[int, frozenset[int]]:
    found = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that just exited
            found[int(tid)] = frozenset(os.sched_getaffinity(int(tid)))
    return found


@pytest.mark.parametrize(("width", "height"), [(160, 48), (80, 24)])
def test_repin_and_undo_for_real_in_tmux(tmux: Tmux, tmp_path: Path, width: int, height: int):
    cpus = usable_cpus()
    if len(cpus) < 2:
        pytest.skip("needs two usable CPUs to move a process between")
    # Two busy threads on one CPU want two: the suggestion must be wider, whatever else runs.
    with workload("--cpus", str(cpus[0]), "--busy", "2", "--sleepers", "1", "--seconds", "120") as w:
        pid = w["pid"]
        assert set(masks(pid).values()) == {frozenset({cpus[0]})}
        command = (
            f"cd {ROOT} && env -u COLUMNS -u LINES XDG_STATE_HOME={tmp_path / 'state'} TERM=xterm-256color "
            f"{sys.executable} -m affmon --pid {pid} --interval 0.5"
        )
        tmux.run("new-session", "-d", "-s", "e2e", "-x", str(width), "-y", str(height), command)
        # Its row in the table (after the pane's border) with a CPU% measured: the first look
        # (one sample, and the plain frame drawn before it) shows the row before any rate.
        screen = tmux.wait_for(
            lambda s: re.search(rf"[│┃]\s*{pid}\b +python\S* +\d+\.?\d*\b", s) is not None, f"PID {pid} measured"
        )
        assert "affmon" in screen and "MASK" in screen and "FINDINGS" in screen  # the columns that fit 80 too
        # Drawn at the pane's size, not at a COLUMNS or LINES the test process may carry.
        lines = screen.splitlines()
        assert max(len(line.rstrip()) for line in lines) > width - 4 and len(lines) >= height - 1, screen

        tmux.keys("r")
        screen = tmux.wait_for(lambda s: "suggested CPUs" in s, "the re-pin dialog")
        assert set(masks(pid).values()) == {frozenset({cpus[0]})}  # nothing changes before Enter
        suggested = re.search(r"suggested CPUs (\S+)", screen)
        assert suggested is not None
        tmux.keys("Enter")
        screen = tmux.wait_for(lambda s: "pinned to CPUs" in s or "not pinned" in s, "the pin result")
        assert "pinned to CPUs" in screen, screen
        wanted = frozenset(_cpulist(suggested.group(1)))
        assert wanted != {cpus[0]}
        assert set(masks(pid).values()) == {wanted}

        tmux.keys("Enter")  # close the result
        tmux.wait_for(lambda s: "pinned to CPUs" not in s, "the dialog to close")
        tmux.keys("u")
        tmux.wait_for(lambda s: "Undo the last pin" in s, "the undo dialog")
        tmux.keys("Enter")
        tmux.wait_for(lambda s: "undone" in s, "the undo result")
        assert set(masks(pid).values()) == {frozenset({cpus[0]})}
        tmux.keys("Enter")
        tmux.keys("q")
        deadline = time.monotonic() + 10
        while "e2e" in tmux.run("list-sessions") and time.monotonic() < deadline:
            time.sleep(0.2)


def _cpulist(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        out.update(range(int(first), int(last or first) + 1))
    return out


def test_the_live_monitor_runs_without_openssl_loaded(tmux: Tmux, tmp_path: Path):
    """asyncio loads OpenSSL when imported, and so does secrets (through hashlib's
    libcrypto): 6.6 MiB of RSS together. The monitor, which uses no TLS and no hash, loads
    neither. Read from the running monitor's own memory map."""
    control = subprocess.run(
        [sys.executable, "-c", "import asyncio, secrets, sys; print('_ssl' in sys.modules, '_hashlib' in sys.modules)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert control.stdout.strip() == "True True"  # plain imports of them do load it here
    command = (
        f"cd {ROOT} && exec env -u COLUMNS -u LINES XDG_STATE_HOME={tmp_path / 'state'} TERM=xterm-256color "
        f"{sys.executable} -m affmon --interval 0.5 --pid {os.getpid()}"  # a plain python: watched when named
    )
    tmux.run("new-session", "-d", "-s", "e2e", "-x", "120", "-y", "30", command)
    # Textual's screen (its footer of keys), not the plain first frame drawn before it loads
    tmux.wait_for(lambda s: "Quit" in s and "COMMAND" in s and "MASK" in s, "the process table")
    pid = int(tmux.run("display-message", "-p", "-t", "e2e", "#{pane_pid}").strip())
    maps = Path(f"/proc/{pid}/maps").read_text()
    assert "affmon" in Path(f"/proc/{pid}/cmdline").read_text()  # the monitor itself, not a shell
    assert "_ssl" not in maps and "libssl" not in maps and "libcrypto" not in maps
    tmux.keys("q")
    deadline = time.monotonic() + 10
    while "e2e" in tmux.run("list-sessions") and time.monotonic() < deadline:
        time.sleep(0.2)


@pytest.mark.parametrize("stock_textual", ["0", "1"], ids=["overrides", "stock-textual"])
def test_the_demo_at_80x24_in_tmux(tmux: Tmux, stock_textual: str):
    """What a newcomer's first command shows in an 80x24 terminal: the banner, the GPU on one
    line, help and quit in the footer, Enter's detail, the help, and q to leave. With the
    overrides of Textual's privates (``affmon.tui.textual_fast``) and on stock Textual."""
    command = (
        f"cd {ROOT} && env -u COLUMNS -u LINES TERM=xterm-256color AFFMON_STOCK_TEXTUAL={stock_textual} "
        f"{sys.executable} -m affmon --demo --speed 4"
    )
    tmux.run("new-session", "-d", "-s", "e2e", "-x", "80", "-y", "24", command)
    screen = tmux.wait_for(lambda s: "python3 rank" in s, "the demo's rank")
    lines = screen.splitlines()
    assert "DEMO" in screen and "hogs" in screen
    footer = lines[-1]
    assert "? Help" in footer and "q Quit" in footer, footer
    gpu = [line for line in lines if "GPU0" in line]
    assert len(gpu) == 1 and "x16" in gpu[0], gpu  # one line: "x16" did wrap onto the next
    assert all(len(line) <= 80 for line in lines)
    header = next(line for line in lines if "PID" in line and "COMMAND" in line)
    assert "FINDINGS" in header and "USER" not in header  # the columns that fit, no sideways scroll
    tmux.keys("Enter")
    screen = tmux.wait_for(lambda s: "Selected process" in s and "mask" in s, "the detail, full size")
    tmux.keys("Escape")
    tmux.wait_for(lambda s: "COMMAND" in s, "the table again")
    tmux.keys("?")
    screen = tmux.wait_for(lambda s: "never kills" in s or "Keys" in s, "the help")
    tmux.keys("Escape")
    tmux.wait_for(lambda s: "COMMAND" in s, "the table after the help")
    tmux.keys("q")
    deadline = time.monotonic() + 10
    while "e2e" in tmux.run("list-sessions") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "e2e" not in tmux.run("list-sessions")
