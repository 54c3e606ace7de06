"""The first frame, drawn before Textual loads: its lines from a recorded H200 sample and
from a live process spawned with a known mask, its escaping, its terminal handling (the
alternate screen entered once, handed to Textual's driver or put back), and the whole
start in a real pseudo-terminal: the frame first, then Textual's screen over it, then the
shell's screen back on exit."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import gc
import gzip
import io
import json
import os
import pty
import pwd
import select
import signal
import struct
import subprocess
import sys
import termios
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from affmon.core.fmt import cpus
from affmon.core.recording.format import read_recording
from affmon.sources.stream import LiveSource, SourceInfo
from affmon.tui.first_frame import (
    ENTER,
    LEAVE,
    STARTING,
    EarlyScreen,
    draw_first_frame,
    early_screen,
    first_view,
    frame_lines,
)
from affmon.tui.model.header_line import SEPARATOR, fit, header_segments
from affmon.tui.model.monitor import Monitor
from affmon.tui.model.views import View
from affmon.tui.textual_fast import SWITCH
from bench.cost.first_frame_parts import spied
from tests.helpers.recordings import RECORDINGS, load, monitor
from tests.tui.helpers import is_active

ROOT = Path(__file__).resolve().parent.parent.parent
JOB = 608  # the ResNet job of hogs.jsonl.gz (the escapes test's crafted recording uses it too)
TITLE = "\x1b]0;PWNED\x07"


def first_look(name: str) -> View:
    return monitor(name).first_look(load(name)[1][0])


def test_the_header_is_the_header_widgets_line_and_the_watched_processes_follow():
    view = first_look("hogs")
    lines = frame_lines(view, 140, 40)
    clock = time.strftime("%H:%M:%S", time.localtime(view.header.wall_time_s))
    header = SEPARATOR.join(t for _, t, _ in fit(header_segments(view.header, paused=False, clock_text=clock), 138))
    assert lines[0] == " " + header
    assert clock in lines[0]  # the clock is on the line at 140 columns: the sample's time
    assert lines[1].split() == ["PID", "COMMAND", "MASK", "THR", "USER"]
    watched = [p for p in view.processes if p.watched]
    assert len(watched) >= 2  # the job and its DataLoader workers
    rows = lines[2 : 2 + len(watched)]
    for p in watched:
        row = next(r for r in rows if r.split()[0] == str(p.pid))
        assert p.name in row and str(p.threads) in row.split()
    job = view.process(JOB)
    assert job is not None and job.mask is not None
    assert cpus(job.mask, 9) in next(r for r in rows if r.split()[0] == str(JOB))
    assert lines[-1].strip() == STARTING
    assert all(len(line) <= 140 for line in lines)


def test_a_small_terminal_gets_what_fits_and_the_count_of_the_rest():
    view = first_look("hogs")
    watched = sum(1 for p in view.processes if p.watched)
    height = 6  # header, column names, room for two lines, blank, STARTING
    lines = frame_lines(view, 50, height)
    assert len(lines) == height
    assert all(len(line) <= 50 for line in lines)
    assert lines[3] == f" … {watched - 1} more"  # one row, then what did not fit
    assert lines[-1].strip() == STARTING[:48].strip()


def test_no_training_process_says_so_as_the_table_would():
    view = first_look("hogs")
    view = dataclasses.replace(view, processes=())
    lines = frame_lines(view, 140, 40)
    assert any("no training process found" in line for line in lines)
    assert not any(line.split()[:1] == ["PID"] for line in lines)


def crafted_sample_lines() -> list[str]:
    with gzip.open(RECORDINGS / "hogs.jsonl.gz", "rt", encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()][:2]
    header, record = lines
    header["host"] = f"{TITLE}host"
    header["nvml"] = "NVML: \x1b[5mblink\u202e"
    for p in record["sample"]["processes"]:
        if p["pid"] == JOB:
            p["name"], p["user"] = f"{TITLE}\u202etrain", "\x1b[31mroot"
    return [json.dumps(line) for line in lines]


def test_names_from_other_users_reach_the_terminal_escaped():
    header, samples = read_recording(crafted_sample_lines(), "crafted")
    info = SourceInfo(header.host or "?", header.nvml, 1.0)
    view = Monitor(header.topology, info).first_look(next(iter(samples)))
    lines = frame_lines(view, 200, 50)
    assert not any(is_active(ch) for line in lines for ch in line)
    text = " ".join(lines)
    assert "]0;PWNED" in text and "?train" in text  # shown, with each control as "?"
    assert "?[31mro…" in text  # the user, escaped, cut to the column's 8


@contextlib.contextmanager
def pinned_child() -> Iterator[int]:
    """A python process of one thread with its mask set to CPU 0 (set before this yields)."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import os, time; os.sched_setaffinity(0, {0}); print(flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        child.stdout.readline()  # its mask is set
        yield child.pid
    finally:
        child.kill()
        child.wait()


def test_a_live_process_with_a_known_mask_is_on_the_frame():
    with pinned_child() as pid:
        source = LiveSource((pid,), 1.0, loops=False)
        try:
            view = first_view(source)
            assert view is not None and not view.measured
            lines = frame_lines(view, 120, 30, pid)
            row = next(line for line in lines if line.split()[:1] == [str(pid)]).split()
            assert row[1].startswith("python") and row[2:] == ["0", "1", pwd.getpwuid(os.getuid()).pw_name[:8]]
            assert source.next_sample() is not None  # the sample is still the first tick's
        finally:
            source.close()


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_command_hands_the_first_view_to_the_app_and_keeps_no_hold_on_it(monkeypatch):
    """The app drops the first view once it has shown it; the command that made it must not
    hold it either, or every thread's sample and rates of the first tick stay for the run."""
    from affmon import cli
    from affmon.tui import app as app_module
    from affmon.tui import first_frame

    drawn: list[weakref.ref[View]] = []
    draw = first_frame.draw_first_frame

    def drawing(source: LiveSource, screen: EarlyScreen | None, watched_pid: int | None) -> View | None:
        view = draw(source, screen, watched_pid)
        assert view is not None
        drawn.append(weakref.ref(view))
        return view

    held: list[bool] = []

    def run(app: app_module.AffmonApp) -> None:
        assert app._first_view is drawn[0]()  # handed over
        app._first_view = None  # as the app does once it has shown it
        gc.collect()
        held.append(drawn[0]() is not None)

    monkeypatch.setattr(first_frame, "draw_first_frame", drawing)
    monkeypatch.setattr(app_module.AffmonApp, "run", run)
    monkeypatch.setattr(sys, "stdin", Terminal())
    monkeypatch.setattr(sys, "stdout", Terminal())
    with pinned_child() as pid:
        assert cli.main(["--pid", str(pid)]) == 0
    assert held == [False]


def test_nothing_is_drawn_where_textual_would_not_draw_on_a_terminal(monkeypatch, tmp_path):
    log = (tmp_path / "stderr").open("w")
    monkeypatch.setattr(sys, "__stderr__", log)  # ``affmon 2>log``: Textual's driver writes there
    with pinned_child() as pid:
        source = LiveSource((pid,), 1.0, loops=False)
        try:
            early = early_screen()
            view = draw_first_frame(source, early, pid)
        finally:
            source.close()
    log.close()
    assert view is not None and view.process(pid) is not None  # the app still shows it at once
    assert early is None and (tmp_path / "stderr").read_text() == ""


class Pipe:
    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)

    def written(self) -> str:
        out = b""
        while True:
            try:
                chunk = os.read(self.read_fd, 65536)
            except BlockingIOError:
                return out.decode()
            if not chunk:
                return out.decode()
            out += chunk

    def close(self) -> None:
        os.close(self.read_fd)
        os.close(self.write_fd)


@pytest.fixture
def pipe():
    p = Pipe()
    yield p
    p.close()


def test_the_screen_is_entered_once_and_put_back_when_no_driver_took_it(pipe):
    screen = EarlyScreen(pipe.write_fd)
    assert screen.draw(["one", "two"])
    assert pipe.written() == ENTER + "\x1b[1;1Hone\x1b[K\x1b[2;1Htwo\x1b[K"
    assert screen.draw(["three"])
    assert pipe.written() == "\x1b[1;1Hthree\x1b[K"  # not entered again
    screen.close()
    assert pipe.written() == LEAVE
    screen.close()
    assert pipe.written() == ""  # once


def test_a_driver_that_takes_it_over_is_told_once_and_nothing_is_drawn_after(pipe):
    screen = EarlyScreen(pipe.write_fd)
    assert not EarlyScreen(pipe.write_fd).hand_over()  # nothing drawn: the driver switches itself
    screen.draw(["one"])
    pipe.written()
    assert screen.hand_over()
    assert not screen.hand_over()  # after a suspend the driver switches to it again itself
    assert not screen.draw(["late"])
    screen.close()
    assert pipe.written() == ""  # the driver puts the terminal back, not this


def test_a_terminal_that_cannot_be_written_draws_nothing_and_raises_nothing(pipe):
    screen = EarlyScreen(pipe.write_fd)
    os.close(pipe.read_fd)
    pipe.read_fd = os.open(os.devnull, os.O_RDONLY)  # for the fixture's close
    assert not screen.draw(["one"])  # EPIPE
    screen.close()


def read_some(master: int, timeout_s: float) -> bytes | None:
    """What the monitor wrote to its terminal within ``timeout_s`` (b"" for nothing yet);
    None once it has closed it (EIO: every descriptor of the other side is closed)."""
    ready, _, _ = select.select([master], [], [], timeout_s)
    if not ready:
        return b""
    try:
        return os.read(master, 65536) or None
    except OSError:
        return None


def run_in_pty(args: list[str], env: dict[str, str], until: str, size: tuple[int, int] = (40, 140)) -> tuple[str, int]:
    """Run ``affmon ARGS`` on a pseudo-terminal of ``size`` (rows, columns), read what it
    writes until ``until`` shows, press q, and read the rest: (the byte stream, exit status)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "affmon", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    os.close(slave)
    out = b""
    sent = False
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            chunk = read_some(master, 0.2)
            if chunk is None:
                break
            out += chunk
            if not sent and until in out.decode("utf-8", "replace"):
                time.sleep(0.3)
                os.write(master, b"q")
                sent = True
            if proc.poll() is not None and not chunk:
                break
        else:
            pytest.fail(f"no exit within 120 s; read {len(out)} bytes")
        return out.decode("utf-8", "replace"), proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def monitor_env(stock_textual: bool = False) -> dict[str, str]:
    """The environment the monitor runs in: with the overrides of Textual's privates
    (``affmon.tui.textual_fast``), or on stock Textual."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEXTUAL") and k != SWITCH}
    env["TERM"] = "xterm-256color"
    if stock_textual:
        env[SWITCH] = "1"
    return env


def test_in_a_terminal_the_frame_comes_first_and_textual_draws_over_it():
    with pinned_child() as pid:
        out, status = run_in_pty(["--pid", str(pid)], monitor_env(), until="Quit")
    assert status == 0
    assert out.startswith(ENTER)  # the first thing written: the alternate screen, the frame
    frame_row = out.index(f"{pid}  python")
    textual = out.index("Processes")  # the process pane's border title: Textual's screen
    assert out.index(STARTING) < textual and frame_row < textual
    assert out.count("\x1b[?1049h") == 1  # Textual's driver did not switch again
    assert out.count("\x1b[?1049l") == 1 and out.rindex("\x1b[?1049l") > textual  # back on exit, once
    assert out.rindex("\x1b[?25h") > out.rindex("\x1b[?1049l")  # the cursor shown again


def test_on_stock_textual_the_frame_is_put_back_before_textuals_driver_switches_screens():
    """Textual's own driver (the ``driver`` override off) does not take the first frame's
    screen over: the frame leaves the alternate screen first (the shell's screen shows for a
    moment), so Textual's switch saves the shell's cursor, not the frame's."""
    with pinned_child() as pid:
        out, status = run_in_pty(["--pid", str(pid)], monitor_env(stock_textual=True), until="Quit")
    assert status == 0
    assert out.startswith(ENTER)
    textual = out.index("Processes")
    first_leave = out.index(LEAVE)
    assert out.index(STARTING) < first_leave < out.index("\x1b[?1049h", len(ENTER)) < textual
    assert out.count("\x1b[?1049h") == 2 and out.count("\x1b[?1049l") == 2
    assert out.rindex("\x1b[?1049l") > textual and out.rindex("\x1b[?25h") > out.rindex("\x1b[?1049l")


def test_when_the_monitor_fails_after_the_frame_the_terminal_is_put_back():
    env = {**monitor_env(), "TEXTUAL_DRIVER": "affmon_no_such_module:Driver"}
    out, status = run_in_pty([], env, until="\x00never")
    assert status != 0
    assert out.startswith(ENTER)
    assert out.count(LEAVE) == 1 and out.index(LEAVE) > out.index(STARTING)


def test_ctrl_c_on_the_first_frame_puts_the_terminal_back():
    """In a terminal of its own (a session whose controlling terminal it is, so Ctrl+C is
    a SIGINT): Ctrl+C as soon as the first frame is drawn, before Textual has loaded."""
    pid, master = pty.fork()
    if pid == 0:  # the child: the monitor on the pseudo-terminal
        try:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
            os.chdir(ROOT)
            os.execve(sys.executable, [sys.executable, "-m", "affmon"], monitor_env())
        finally:
            os._exit(127)
    out = b""
    sent_at: float | None = None
    quit_sent = False
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if sent_at is not None and not quit_sent and time.monotonic() - sent_at > 5:
                os.write(master, b"q")  # the Ctrl+C came after Textual took the terminal: a key there
                quit_sent = True
            chunk = read_some(master, 0.1)
            if chunk is None:
                break
            out += chunk
            if sent_at is None and STARTING.encode() in out:
                os.write(master, b"\x03")
                sent_at = time.monotonic()
    finally:
        os.close(master)
        reaped, status = os.waitpid(pid, os.WNOHANG)
        while reaped == 0 and time.monotonic() < deadline + 10:  # it closes the terminal as it exits
            time.sleep(0.05)
            reaped, status = os.waitpid(pid, os.WNOHANG)
        if reaped == 0:  # still running: the test fails below, and leaves nothing behind
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
    text = out.decode("utf-8", "replace")
    assert sent_at is not None, text
    started = text.find("\x1b[?1000h")  # Textual's driver enables the mouse as it starts
    if started < 0:  # interrupted before Textual ran: the frame's screen puts the terminal back
        assert os.waitstatus_to_exitcode(status) == 130  # interrupted, as a shell reports it
        assert text.count(ENTER) == 1 and text.count(LEAVE) == 1 and text.rindex(LEAVE) > text.index(STARTING)
    else:  # (a loaded machine: Textual was up first) its driver puts it back
        assert os.waitstatus_to_exitcode(status) == 0 and text.rindex("\x1b[?1049l") > started
    assert text.count("\x1b[?1049h") == 1
    assert "Traceback" not in text


# Loaded by the monitor's first tick or by Textual's screen, never before the first frame:
# the journal's reader and the pinner, the planner (the sizing of a job), the rules and
# their tracker and the monitor's state over ticks (one sample shows no finding), Textual
# and Rich; nor what a live monitor never needs: the recording format (a replay's), the
# fleet view's model (the command line's parser needs only its defaults).
LATER = (
    "affmon.actions.",
    "affmon.tui.pinner",
    "affmon.core.plan.planner",
    "affmon.core.plan.need",
    "affmon.core.rules.evaluate",
    "affmon.core.rules.cpu",
    "affmon.core.rules.memory",
    "affmon.core.rules.threads",
    "affmon.core.rules.tick",
    "affmon.tui.model.monitor",
    "affmon.core.recording.format",
    "affmon.fleet.model",
    "textual",
    "rich",
)


def test_the_first_frame_loads_only_what_it_draws(tmp_path: Path) -> None:
    parts = spied(str(tmp_path / "parts.json"), timeout_s=120)  # the monitor, until its first frame
    modules = parts["modules"]
    assert parts["drew"]
    assert "affmon.tui.model.first_look" in modules and "affmon.sources.live" in modules  # what it drew with
    assert not [m for m in modules if m.startswith(LATER)]
