"""The monitor's own cost at 1 Hz next to htop's, in real terminals, on threads that wake, same run.

Starts the waking population of bench/workloads/waking.py (2,000 threads in 10 processes by default,
each thread waking every 0.5 s for a few tens of microseconds, plus a training-like python
process of 12 threads, 3 of them busy-ish; ``--ranks N``: N training-like ranks of
bench/workloads/ranks.py in its place; ``--processes 0``: nothing but the ranks), then, each in its
own 140x40 pane of a private tmux server: ``affmon --interval 1`` (the TUI) and ``htop -d 10``
(htop's delay is in tenths of a second: 1 s; run with an empty configuration directory, so
with its default meters). Both run together for ``--seconds`` (60) after ``--warmup`` (8).

Measured for each over that window:

* CPU: utime + stime (and the reaped children's) of the pane's process, from
  ``/proc/PID/stat`` at the start and the end, as a share of one core;
* RSS: ``VmRSS`` from ``/proc/PID/status`` at the end;
* refreshes achieved: every 0.25 s the script captures both panes (``tmux capture-pane``)
  and counts the changes of a clock each one draws when it refreshes: affmon's header shows
  the HH:MM:SS of its newest sample, htop its ``Uptime: HH:MM:SS`` meter. A 1 Hz tool that
  keeps up changes its clock about once a second; one that falls behind, less. affmon's
  header drops its clock when the line is too long for the pane (a long "no NVML (...)"
  warning on a machine without a GPU does that at 140 columns); where the clock was missing
  from more than a tenth of the captures, the count is of changes of the whole screen
  (marked "screen"), each new screen counted once it has been captured twice in a row (a
  capture of a half-drawn screen is not a refresh); a lower bound: a refresh that changes
  nothing on the screen is not seen. CPU per refresh is the window's CPU divided by the count.

* RSS at the start of the window too: the monitor's memory must stay flat over a run;
* the first frame with data (``--first-frames``, 5 launches a run, before the window):
  both tools launched together (one new tmux window after the other, the order
  alternating), each timed from its own launch until its pane shows data: for affmon the
  clock on its header or a process row (in its table, after the border, or in the plain
  first frame it draws before Textual has loaded), for htop a line of its process list
  (PID, user, priority, nice). Both are launched and read through one tmux control-mode
  client (``tmux -C``), which hears each pane's output as it is written: a pane is read
  (``capture-pane``, a request on the open client, no process started) as soon as it has
  written, and the time taken is that of its output, to about a millisecond (a
  ``tmux capture-pane`` started every 20 ms would resolve a first frame of 0.1 s to a fifth
  of itself, and take CPU from the two launches it times). The figure
  is the median of the launches and its ratio. Also timed: affmon's full screen (Textual's, its
  footer of keys on it), when keys start to work. Each launch's ratio is printed too (the
  two tools were launched together). affmon's bytecode is compiled first, as
  ``pip install`` does (with ``PYTHONDONTWRITEBYTECODE`` set, a checkout would compile
  every module from source at every launch).

``--glances PATH`` runs glances (``PATH -t 1``: a 1 s refresh, its default screen) in a
third pane through the same window, for its CPU and RSS beside affmon's (glances is on
PyPI; a throwaway venv does: ``python -m venv /tmp/glancesvenv && /tmp/glancesvenv/bin/pip
install glances``, then ``--glances /tmp/glancesvenv/bin/glances``).

``--floor`` runs ``bench/cost/textual_floor.py`` in another pane through the same window: a
Textual app that only redraws a clock each second (and a footer), the least a Textual
monitor at 1 Hz costs, for its CPU beside affmon's and htop's; and it times the floor's
first frame too, each launch of affmon and htop followed by one of the floor and htop.

``--sleeping`` adds a second population: the same number of threads that never wake (the
case measured before). Each population runs ``--repeat`` times (3), the populations taking
turns, because the machine may be shared: the summary gives the median and range of the
ratios, affmon's refreshes a minute and the load average at the end of each run. Needs tmux
and htop (Debian: ``apt-get install tmux htop``).

    python -m bench.cost.tui_cost [--seconds 60] [--repeat 3] [--threads 2000] [--processes 10] [--sleeping]
                             [--population-as others|python] [--ranks 4]
                             [--first-frames 5] [--glances /tmp/glancesvenv/bin/glances] [--floor]
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import os
import re
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from bench.workloads.waking import (
    Population,
    Shape,
    StartError,
    activity,
    add_arguments,
    check_arguments,
    task_counters,
)

ROOT = Path(__file__).resolve().parent.parent.parent
TICKS = os.sysconf("SC_CLK_TCK")
POLL_S = 0.25
FIRST_TIMEOUT_S = 30.0
WIDTH, HEIGHT = 140, 40
# affmon: the first HH:MM:SS on its header (the first line drawn); htop: its uptime meter.
AFFMON_CLOCK = re.compile(r"\b(\d\d:\d\d:\d\d)\b")
HTOP_CLOCK = re.compile(r"Uptime: ((?:\d+ days?, )?\d\d:\d\d:\d\d)")
# the process table's border, then a PID and a name; or the first frame's indented PID and name
AFFMON_ROW = re.compile(r"^(?:[│┃|]\s*|\s{1,8})\d+ +\S")
FLOOR_CLOCK = re.compile(r"floor +│ +\d\d:\d\d:\d\d")
AFFMON_KEYS = re.compile(r"\bq Quit\b")  # the footer: Textual's screen is up and takes keys
HTOP_ROW = re.compile(r"^\s*\d+ +\S+ +(?:RT|-?\d+) +-?\d+ ")  # PID USER PRI NI


def cpu_seconds(pid: int) -> float:
    """CPU time of a process and its reaped children (utime, stime, cutime, cstime)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / TICKS


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def affmon_clock(screen: str) -> str | None:
    """The clock on affmon's header: the first non-blank line's first HH:MM:SS."""
    header = next((line for line in screen.splitlines() if line.strip()), "")
    m = AFFMON_CLOCK.search(header)
    return m[1] if m else None


def htop_clock(screen: str) -> str | None:
    m = HTOP_CLOCK.search(screen)
    return m[1] if m else None


def affmon_has_data(screen: str) -> bool:
    """Its header's clock (absent from the "taking the first samples" line) or a process row."""
    return affmon_clock(screen) is not None or any(AFFMON_ROW.match(line) for line in screen.splitlines())


def affmon_has_keys(screen: str) -> bool:
    return AFFMON_KEYS.search(screen) is not None


def floor_has_data(screen: str) -> bool:
    """The floor's clock line (``bench/cost/textual_floor.py``)."""
    return FLOOR_CLOCK.search(screen) is not None


def htop_has_data(screen: str) -> bool:
    return any(HTOP_ROW.match(line) for line in screen.splitlines())


def refreshes(screens: list[str], clock: Callable[[str], str | None]) -> tuple[int, str]:
    """(refreshes seen, how): changes of the clock, or of the whole screen where the clock
    is missing from more than a tenth of the captures."""
    clocks = [clock(screen) for screen in screens]
    if sum(c is None for c in clocks) <= len(clocks) / 10:
        return changes(clocks), "clock"
    return changes(settled(screens)), "screen"


def changes(clocks: Iterable[str | None]) -> int:
    """How many times the clock read differs from the one read before it (unreadable
    captures, None, are skipped: a half-drawn screen is not a refresh)."""
    count, last = 0, None
    for clock in clocks:
        if clock is None:
            continue
        if last is not None and clock != last:
            count += 1
        last = clock
    return count


def settled(screens: list[str]) -> list[str | None]:
    """Each capture, or None where the next capture differs from it: a screen caught half
    drawn is replaced 0.25 s later, and must not count as a refresh of its own."""
    return [screen if screen == after else None for screen, after in pairwise(screens)]


class Tmux:
    """A private tmux server (its own socket), so that no other tmux session is touched."""

    def __init__(self) -> None:
        self.socket = f"affmon-bench-{os.getpid()}"

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True)

    def start(self, session: str, command: str) -> int:
        done = self.run(
            "new-session", "-d", "-s", session, "-x", str(WIDTH), "-y", str(HEIGHT), "-c", str(ROOT), command
        )
        if done.returncode:
            raise OSError(f"tmux new-session failed: {done.stderr.strip()}")
        return int(self.run("display-message", "-p", "-t", session, "#{pane_pid}").stdout.strip())

    def capture(self, session: str) -> str:
        return self.run("capture-pane", "-p", "-t", session).stdout

    def stop(self, session: str) -> None:
        self.run("kill-session", "-t", session)

    def close(self) -> None:
        self.run("kill-server")


def quoted(text: str) -> str:
    """``text`` as one word of a tmux command (single quotes, inside which tmux expands
    nothing and ``;`` ends no command)."""
    if "'" in text or "\n" in text:
        raise ValueError(f"cannot quote for tmux: {text!r}")
    return f"'{text}'"


class Control:
    """A tmux control-mode client (``tmux -C attach``) on a session of its own, ``first``:
    commands go down its standard input and their output comes back between ``%begin`` and
    ``%end`` lines; between them, notifications, among which ``%output %PANE ...`` each time
    a pane of the session writes. The first frames are launched as windows of that session
    and read through it."""

    SESSION = "first"

    def __init__(self, tmux: Tmux) -> None:
        tmux.start(self.SESSION, "exec sleep 86400")
        self._proc = subprocess.Popen(
            ["tmux", "-L", tmux.socket, "-C", "attach", "-t", self.SESSION],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
        )
        self._pending = b""
        self.wrote: dict[str, float] = {}  # pane -> when its latest output was heard
        # past the attach's own reply (a block like a command's) and its notifications
        token = f"ready-{os.getpid()}"
        self._send(f"display-message -p {token}")
        while self._reply("display-message") != [token]:
            pass

    def _line(self, deadline: float) -> bytes | None:
        """The next line from tmux; None once ``deadline`` (monotonic) passes first."""
        assert self._proc.stdout is not None
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._proc.stdout], [], [], left)[0]:
                return None
            data = os.read(self._proc.stdout.fileno(), 1 << 16)
            if not data:
                raise OSError("the tmux control client ended")
            self._pending += data
        line, self._pending = self._pending.split(b"\n", 1)
        return line

    def _heard(self, line: bytes) -> None:
        if line.startswith(b"%output "):
            self.wrote[line.split(b" ", 2)[1].decode()] = time.monotonic()

    def command(self, text: str, timeout_s: float = 10.0) -> list[str]:
        """Run one tmux command; its output lines."""
        self._send(text)
        return self._reply(text, timeout_s)

    def _send(self, text: str) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write(text.encode() + b"\n")

    def _reply(self, text: str, timeout_s: float = 10.0) -> list[str]:
        """The output of the block that answers the next command sent (``text`` names it in
        errors). A block whose last field (flags) is not 1 answers a command the server ran
        for this client of its own accord (seen when a window is made): passed over."""
        deadline = time.monotonic() + timeout_s
        out: list[str] | None = None
        ours = False
        while True:
            line = self._line(deadline)
            if line is None:
                raise OSError(f"tmux did not answer {text!r} within {timeout_s:g} s")
            if out is None:
                if line.startswith(b"%begin "):
                    out, ours = [], line.rsplit(b" ", 1)[-1] == b"1"
                else:
                    self._heard(line)
            elif line.startswith((b"%end ", b"%error ")):
                if not ours:
                    out = None
                elif line.startswith(b"%error "):
                    raise OSError(f"tmux {text!r}: {' '.join(out)}")
                else:
                    return out
            else:
                out.append(line.decode("utf-8", "replace"))

    def listen(self, timeout_s: float) -> None:
        """Take the notifications that come within ``timeout_s``, returning at the first."""
        line = self._line(time.monotonic() + timeout_s)
        while line is not None:
            self._heard(line)
            line = self._line(time.monotonic()) if b"\n" in self._pending else None

    def launch(self, name: str, command: str) -> str:
        """``command`` in a new 140x40 window of the session; its pane's id."""
        where = f"-t {self.SESSION}: -n {quoted(name)} -c {quoted(str(ROOT))}"
        out = self.command(f"new-window -d -P -F '#{{pane_id}}' {where} {quoted(command)}")
        return out[0].strip()

    def screen(self, pane: str) -> str:
        return "\n".join(self.command(f"capture-pane -p -t {pane}"))

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


@dataclass(frozen=True)
class Tool:
    cpu_share: float  # of one core
    rss_mib: float  # at the end of the window
    refreshes: int
    counted_by: str  # "clock" or "screen"
    rss_start_mib: float = float("nan")  # at its start

    def cpu_ms_per_refresh(self, seconds: float) -> float:
        return self.cpu_share * seconds * 1e3 / self.refreshes if self.refreshes else float("nan")


@dataclass(frozen=True)
class Row:
    shape: Shape
    run: int
    seconds: float
    affmon: Tool
    htop: Tool
    workload: str
    header: str
    first_frames: dict[str, list[float]]  # "affmon", "htop": seconds from launch to data, per launch
    others: tuple[tuple[str, Tool], ...] = ()  # ("glances -t 1", ...), ("textual floor", ...): CPU and RSS only
    load: str = ""  # /proc/loadavg's 1, 5 and 15 minute averages at the end of the window

    def other(self, prefix: str) -> Tool | None:
        return next((tool for name, tool in self.others if name.startswith(prefix)), None)


def first_frames(tmux: Tmux, commands: dict[str, str], launches: int) -> dict[str, list[float]]:
    """Seconds from launch until each tool's pane shows data (``has_data``), per launch,
    and until affmon's shows its keys ("affmon keys"); both launched together, the one
    started first alternating; NaN where none came within ``FIRST_TIMEOUT_S``. With a
    "floor" command, each launch is followed by one of the floor and htop together,
    timed the same way ("floor", "htop beside floor")."""
    found: dict[str, list[float]] = {}
    pairs = [({"affmon": commands["affmon"], "htop": commands["htop"]}, "")]
    if "floor" in commands:
        pairs.append(({"floor": commands["floor"], "htop": commands["htop"]}, " beside floor"))
    control = Control(tmux)
    try:
        for launch in range(launches):
            for pair, suffix in pairs:
                for probe, seconds in _time_launch(control, pair, launch % 2 == 1).items():
                    found.setdefault(probe if probe != "htop" else "htop" + suffix, []).append(seconds)
    finally:
        control.close()
        tmux.stop(Control.SESSION)
    return found


def _time_launch(control: Control, commands: dict[str, str], reverse: bool) -> dict[str, float]:
    """Each probe's time from its tool's launch to the output after which its pane first
    showed what the probe looks for."""
    probes: dict[str, tuple[str, Callable[[str], bool]]] = {
        "affmon": ("affmon", affmon_has_data),
        "affmon keys": ("affmon", affmon_has_keys),
        "floor": ("floor", floor_has_data),
        "htop": ("htop", htop_has_data),
    }
    probes = {k: v for k, v in probes.items() if v[0] in commands}
    order = list(reversed(commands)) if reverse else list(commands)
    started: dict[str, float] = {}
    panes: dict[str, str] = {}
    control.wrote.clear()
    for name in order:
        started[name] = time.monotonic()
        panes[name] = control.launch(f"first-{name}", commands[name])
    seen: dict[str, float] = {}
    try:
        while len(seen) < len(probes) and time.monotonic() - min(started.values()) < FIRST_TIMEOUT_S:
            control.listen(0.1)
            for name, pane in panes.items():
                heard = control.wrote.pop(pane, None)
                waiting = [p for p, (tool, _) in probes.items() if tool == name and p not in seen]
                if heard is None or not waiting:
                    continue
                screen = control.screen(pane)
                for probe in waiting:
                    if probes[probe][1](screen):
                        seen[probe] = heard - started[name]
    finally:
        for pane in panes.values():
            with contextlib.suppress(OSError):  # a tool that ended has no window left
                control.command(f"kill-window -t {pane}")
    time.sleep(1.0)  # both gone before the next launch
    return {probe: seen.get(probe, float("nan")) for probe in probes}


FLOOR_NAME = "textual floor"


def measure(
    shape: Shape, run: int, seconds: float, warmup: float, launches: int, glances: str | None, floor: bool = False
) -> Row:
    tmux = Tmux()
    config = tempfile.mkdtemp(prefix="htop-config-")
    commands = {
        "affmon": f"exec {sys.executable} -m affmon --interval 1",
        "htop": f"exec env XDG_CONFIG_HOME={config} htop -d 10",
    }
    if floor:
        commands["floor"] = f"exec {sys.executable} -m bench.cost.textual_floor"
    compileall.compile_dir(ROOT / "affmon", quiet=1)  # as pip install does: bytecode, not source, at launch
    try:
        with Population(shape, seconds=warmup + seconds + 120 + launches * FIRST_TIMEOUT_S) as population:
            frames = first_frames(tmux, commands, launches)
            pids = {name: tmux.start(name, command) for name, command in commands.items()}
            if glances is not None:
                pids["glances"] = tmux.start("glances", f"exec {glances} -t 1")
            time.sleep(warmup)
            before = {k: cpu_seconds(p) for k, p in pids.items()}
            rss_before = {k: rss_mib(p) for k, p in pids.items()}
            counters, t0 = task_counters(population.all_pids()), time.monotonic()
            screens: dict[str, list[str]] = {"affmon": [], "htop": []}
            while time.monotonic() - t0 < seconds:
                for name, shots in screens.items():
                    shots.append(tmux.capture(name))
                time.sleep(POLL_S)
            elapsed = time.monotonic() - t0
            after = {k: cpu_seconds(p) for k, p in pids.items()}
            workload = activity(counters, task_counters(population.all_pids()), elapsed).line()
            rss = {k: rss_mib(p) for k, p in pids.items()}
            header = next((line for line in tmux.capture("affmon").splitlines() if line.strip()), "").strip()
    finally:
        tmux.close()
        shutil.rmtree(config, ignore_errors=True)
    clocks = {"affmon": affmon_clock, "htop": htop_clock}
    tools = {
        k: Tool((after[k] - before[k]) / elapsed, rss[k], *refreshes(screens[k], clocks[k]), rss_before[k])
        for k in screens
    }
    others = tuple(
        (name, Tool((after[key] - before[key]) / elapsed, rss[key], 0, "-", rss_before[key]))
        for key, name in (("glances", "glances -t 1"), ("floor", FLOOR_NAME))
        if key in pids
    )
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return Row(shape, run, elapsed, tools["affmon"], tools["htop"], workload, header, frames, others, load)


def divide(a: float, b: float) -> float:
    return a / b if b else float("nan")


def ratios(row: Row) -> tuple[float, float]:
    """affmon / htop: CPU share, and CPU per refresh."""
    per_refresh = divide(row.affmon.cpu_ms_per_refresh(row.seconds), row.htop.cpu_ms_per_refresh(row.seconds))
    return divide(row.affmon.cpu_share, row.htop.cpu_share), per_refresh


def median(values: Iterable[float]) -> float:
    known = [v for v in values if v == v]  # NaN: no data within FIRST_TIMEOUT_S
    return statistics.median(known) if known else float("nan")


def first_frame_ratio(row: Row) -> float:
    return divide(median(row.first_frames["affmon"]), median(row.first_frames["htop"]))


def table(rows: list[Row]) -> list[str]:
    lines = [
        f"{'threads, run':<21} {'tool':<22} {'CPU % of a core':>15} {'RSS MiB':>8} {'start':>6} {'refreshes':>17} "
        f"{'CPU ms/refresh':>15} {'first data s':>12}"
    ]
    for row in rows:
        tools = [("affmon --interval 1", row.affmon, "affmon"), ("htop -d 10", row.htop, "htop")]
        tools += [(name, tool, "") for name, tool in row.others]
        for name, tool, key in tools:
            label = f"{row.shape.label()}, {row.run}" if tool is row.affmon else ""
            first = median(row.first_frames[key]) if key else float("nan")
            counted = f"{tool.refreshes:6d}/{row.seconds:<3.0f} {tool.counted_by:<6}" if key else ""
            per_refresh = f"{tool.cpu_ms_per_refresh(row.seconds):15.1f}" if key else ""
            lines.append(
                f"{label:<21} {name:<22} {100 * tool.cpu_share:15.1f} {tool.rss_mib:8.0f} {tool.rss_start_mib:6.0f} "
                f"{counted:>17} {per_refresh:>15} {first:12.2f}"
            )
        ratio, refresh_ratio = ratios(row)
        lines.append(
            f"{'':<21} {'ratio affmon / htop':<22} {ratio:15.2f} {'':8} {'':6} {'':17} {refresh_ratio:15.2f} "
            f"{first_frame_ratio(row):12.2f}"
        )
        glances, floor = row.other("glances"), row.other(FLOOR_NAME)
        if glances is not None:
            lines.append(
                f"{'':<21} {'RSS affmon / glances':<22} {'':15} {divide(row.affmon.rss_mib, glances.rss_mib):8.2f}"
            )
        if floor is not None:
            lines.append(f"{'':<21} {'ratio floor / htop':<22} {divide(floor.cpu_share, row.htop.cpu_share):15.2f}")
    return lines


def summary(rows: list[Row]) -> list[str]:
    """Per population: the median and range of the ratios over its runs."""
    lines = []
    for label in dict.fromkeys(row.shape.label() for row in rows):
        runs = [ratios(row) for row in rows if row.shape.label() == label]
        cpu, per_refresh = sorted(r[0] for r in runs), sorted(r[1] for r in runs)
        shown = [row for row in rows if row.shape.label() == label]
        per_minute = sorted(row.affmon.refreshes * 60 / row.seconds for row in shown)
        lines.append(
            f"{label}: affmon / htop over {len(runs)} runs: CPU {statistics.median(cpu):.2f} "
            f"({cpu[0]:.2f}-{cpu[-1]:.2f}), CPU per refresh {statistics.median(per_refresh):.2f} "
            f"({per_refresh[0]:.2f}-{per_refresh[-1]:.2f}); affmon's refreshes a minute "
            f"{per_minute[0]:.0f}-{per_minute[-1]:.0f}; load average at the end of each run: "
            f"{', '.join(row.load for row in shown)}"
        )
        frames = {k: [s for row in shown for s in row.first_frames[k]] for k in ("affmon", "htop")}
        if frames["affmon"]:
            a, h = median(frames["affmon"]), median(frames["htop"])
            spread = {k: f"{min(v):.2f}-{max(v):.2f}" for k, v in frames.items() if any(x == x for x in v)}
            keys = [s for row in shown for s in row.first_frames.get("affmon keys", [])]
            floors = [s for row in shown for s in row.first_frames.get("floor", [])]
            if floors:
                beside = median(s for row in shown for s in row.first_frames["htop beside floor"])
                lines.append(
                    f"{label}: a Textual app that draws a clock (the floor), launched with htop the same way: "
                    f"{median(floors):.2f} s, htop {beside:.2f} s, ratio {divide(median(floors), beside):.2f}"
                )
            lines.append(
                f"{label}: first frame with data over {len(frames['affmon'])} launches: affmon {a:.2f} s "
                f"({spread.get('affmon', '-')}), htop {h:.2f} s ({spread.get('htop', '-')}), ratio {divide(a, h):.2f}; "
                f"affmon's full screen (keys work) {median(keys):.2f} s, {divide(median(keys), h):.2f} of htop's first"
            )
            each = [divide(x, y) for x, y in zip(frames["affmon"], frames["htop"], strict=True)]
            lines.append(
                f"{label}: first frame, each launch affmon / htop (launched together): "
                f"{' '.join(f'{r:.2f}' for r in each)}; the worst {max(each):.2f}"
            )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap)
    ap.add_argument("--seconds", type=float, default=60.0, help="the measured window")
    ap.add_argument("--warmup", type=float, default=8.0, help="seconds both run before the window")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each population, the populations alternating")
    ap.add_argument("--first-frames", type=int, default=5, help="launches a run timed to their first frame with data")
    ap.add_argument("--glances", metavar="PATH", help="a glances executable, run beside them for its CPU and RSS")
    ap.add_argument("--floor", action="store_true", help="also run a Textual app that only redraws a clock (its CPU)")
    a = ap.parse_args()
    check_arguments(ap, a)
    if a.seconds <= 0 or a.warmup < 0 or a.repeat < 1 or a.first_frames < 0:
        ap.error("--seconds must be positive, --warmup and --first-frames not negative and --repeat at least 1")
    if a.glances is not None and shutil.which(a.glances) is None:
        ap.error(f"--glances {a.glances}: not an executable")
    for tool in ("tmux", "htop"):
        if shutil.which(tool) is None:
            print(f"tui_cost: {tool} is not installed (Debian: apt-get install {tool})", file=sys.stderr)
            sys.exit(2)
    shapes = [Shape.from_args(a)] + ([Shape.from_args(a, sleeping=True)] if a.sleeping and a.processes else [])
    rows = []
    try:
        for run in range(1, a.repeat + 1):
            for shape in shapes:
                rows.append(measure(shape, run, a.seconds, a.warmup, a.first_frames, a.glances, a.floor))
    except (StartError, OSError, ValueError) as e:
        print(f"tui_cost: {e}", file=sys.stderr)
        sys.exit(2)
    print(
        f"{shapes[0].describe()}; {os.cpu_count()} CPUs; {a.seconds:g} s measured after {a.warmup:g} s warm-up; "
        f"{WIDTH}x{HEIGHT} tmux panes; screens read every {POLL_S:g} s; first frames: {a.first_frames} launches a run, "
        "read as each pane writes"
    )
    for row in rows:
        if row.shape.processes or row.shape.ranks:
            print(f"{row.shape.label()}, {row.run}: {row.workload}; load average {row.load}")
    print(f"affmon's header at the end of the last run: {rows[-1].header[:110]}")
    print("\n".join(table(rows) + summary(rows)))


if __name__ == "__main__":
    main()
