"""The monitor's first frame, drawn before Textual has loaded.

Python and Textual take a few hundred milliseconds of CPU to load, and on the machines
affmon is for (their CPUs already short) that is a second or more before anything shows.
The first sample is read by then. So the monitor draws what one sample shows as plain
text at once: the header line (the same segments as the header widget's), the watched
processes with their masks, thread counts and users (every rate needs an interval, so
none is shown), or why there are none. Textual's first screen then draws over it.

``EarlyScreen`` owns the terminal until Textual's driver takes it: it switches to the
alternate screen (saving the cursor, as Textual's driver would), hides the cursor and
turns off line wrapping, and draws each line at its row. The monitor's driver
(``affmon.tui.textual_fast.QuietLinuxDriver``) asks ``hand_over`` when it starts: the
alternate screen is on already, so it does not switch again (a second switch would save
the alternate screen's cursor over the shell's, and the shell's prompt would come back at
the wrong place on exit); from then on the driver restores everything on exit. Where
Textual never takes over (an error while it loads), or its own driver does (the overrides
off, another driver), ``close`` puts the terminal back as it was first.

Nothing here imports Textual or Rich: the frame costs the sample's formatting only.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Sequence

from affmon.core.fmt import cpus
from affmon.core.text import cut, term_safe
from affmon.sources.stream import LiveSource
from affmon.tui.layout import empty_message
from affmon.tui.model.first_look import first_look
from affmon.tui.model.header_line import SEPARATOR, clock_text, fit, header_segments
from affmon.tui.model.table import TableOptions, TableRow, table_rows
from affmon.tui.model.views import View, shown_role

# alternate screen (the cursor saved), cursor hidden, no line wrapping (a line cut at the
# terminal's edge, never wrapped onto the next), cleared
ENTER = "\x1b[?1049h\x1b[?25l\x1b[?7l\x1b[H\x1b[2J"
LEAVE = "\x1b[?7h\x1b[?25h\x1b[?1049l"  # wrapping and the cursor back, the shell's screen and cursor
STARTING = "starting the monitor…  rates, findings and keys come with it"
# (label, width, right-aligned); COMMAND takes what the others leave
COLUMNS = (("PID", 7, True), ("COMMAND", 0, False), ("MASK", 9, False), ("THR", 3, True), ("USER", 8, False))
COMMAND_LEAST = 12


def early_screen() -> EarlyScreen | None:
    """A screen on the terminal Textual's driver will draw on (standard error), where that
    is a terminal. Made before anything is drawn, so that whoever holds it can always put
    the terminal back (a Ctrl+C may come at any point)."""
    terminal = sys.__stderr__
    if terminal is None or not terminal.isatty():
        return None
    return EarlyScreen(terminal.fileno())


def draw_first_frame(source: LiveSource, screen: EarlyScreen | None, watched_pid: int | None) -> View | None:
    """The first sample's view, drawn on ``screen`` (where there is one and its terminal's
    size can be read)."""
    view = first_view(source)
    if view is not None and screen is not None:
        try:
            width, height = os.get_terminal_size(screen.fd)
        except OSError:
            return view
        screen.draw(frame_lines(view, width, height, watched_pid))
    return view


def first_view(source: LiveSource) -> View | None:
    """What the first sample shows (``first_look``, as the monitor's own); None when it
    could not be read (the monitor's first tick reads it again and says why)."""
    try:
        sample = source.first_sample()
    except Exception:  # the first tick raises it again, where the monitor shows it
        return None
    return first_look(source.topology, source.info, sample)


def _cell(text: str, width: int, right: bool) -> str:
    text = cut(text, width)
    return text.rjust(width) if right else text.ljust(width)


def _name(row: TableRow) -> str:
    """The tree, the name, and the role of a launcher or a rank that holds a GPU."""
    p = row.process
    assert p is not None
    role = shown_role(p)
    return row.prefix + p.name + (f" {role}" if role else "")


def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
    return " " + "  ".join(_cell(c, w, right) for c, w, (_, _, right) in zip(cells, widths, COLUMNS, strict=True))


def frame_lines(view: View, width: int, height: int, watched_pid: int | None = None) -> list[str]:
    """The first frame as plain lines, at most ``height`` of at most ``width`` characters.
    Every name from outside is escaped (``term_safe``): by the views, or here."""
    width, height = max(1, width), max(1, height)
    now = clock_text(view.header)
    segments = fit(header_segments(view.header, paused=False, clock_text=now), max(1, width - 2))
    lines = [" " + SEPARATOR.join(text for _, text, _ in segments)]
    options = TableOptions()
    rows = [row for row in table_rows(view, options) if row.process is not None]
    if not rows:
        lines += ["", "  " + term_safe(empty_message(view, options, watched_pid))]
    else:
        names = [_name(row) for row in rows]
        fixed = sum(w + 2 for label, w, _ in COLUMNS if label != "COMMAND")
        command = max(COMMAND_LEAST, min(max(map(len, names)), width - fixed - 2))
        widths = [w or command for _, w, _ in COLUMNS]
        lines.append(_line([label for label, _, _ in COLUMNS], widths))
        room = max(0, height - len(lines) - 2)  # the last two lines: a blank one and STARTING
        shown = rows if len(rows) <= room else rows[: max(0, room - 1)]
        for row, name in zip(shown, names, strict=False):
            p = row.process
            assert p is not None
            mask = cpus(p.mask, 9) + ("*" if p.mask_varies else "")
            lines.append(_line((str(p.pid), name, mask, str(p.threads), term_safe(p.user or "?")), widths))
        if len(shown) < len(rows):
            lines.append(f" … {len(rows) - len(shown)} more")
    lines += ["", "  " + STARTING]
    return [line[:width] for line in lines[:height]]


class EarlyScreen:
    """The terminal on ``fd`` until Textual's driver takes it (see the module's text)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._lock = threading.Lock()
        self._entered = False  # the alternate screen is on
        self._handed_over = False

    def _write(self, text: str) -> None:
        data = text.encode("utf-8", "replace")
        while data:
            data = data[os.write(self.fd, data) :]

    def draw(self, lines: list[str]) -> bool:
        """Draw ``lines`` from the top of the alternate screen; False (nothing written) once
        the driver has taken the terminal, or where the terminal cannot be written."""
        with self._lock:
            if self._handed_over:
                return False
            frame = "".join(f"\x1b[{row};1H{line}\x1b[K" for row, line in enumerate(lines, 1))
            enter = "" if self._entered else ENTER
            self._entered = True  # from before the write: a Ctrl+C during it still puts it back
            try:
                self._write(enter + frame)
            except OSError:
                return False
            return True

    def hand_over(self) -> bool:
        """Textual's driver takes the terminal from here on; True, the first time only,
        when the alternate screen is on already (the driver then does not switch to it
        again; after a suspend it does)."""
        with self._lock:
            on = self._entered and not self._handed_over
            self._handed_over = True
            return on

    def close(self) -> None:
        """Put the terminal back as it was, unless the driver took it (it does that itself)."""
        with self._lock:
            if self._entered and not self._handed_over:
                with contextlib.suppress(OSError):
                    self._write(LEAVE)
            self._entered = False
            self._handed_over = True
