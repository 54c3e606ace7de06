"""Every place the monitor reaches into Textual's private parts, in one module, behind one
switch.

Each override here replaces or reimplements a part of Textual that Textual does not
publish (a name that starts with ``_``, a module such as ``textual._xterm_parser``), as it
is in the Textual releases from ``TEXTUAL_FROM`` up to, not including, ``TEXTUAL_BELOW``;
``pyproject.toml`` asks for that range, and ``tests/tui/test_textual_fast.py`` holds the
two to each other. The rest of ``affmon.tui`` uses Textual's public API only, and runs as
it is on stock Textual with the overrides off (the snapshot tests draw the same with and
without them).

The switch, ``AFFMON_STOCK_TEXTUAL`` in the environment (``AffmonApp``'s
``textual_overrides`` argument sets it for one app):

* unset, empty or ``0``: every override;
* ``1``, or any value that is not a list of the overrides' names: none, stock Textual;
* names, comma-separated (``driver``): every override but those (the way each one's
  worth was measured).

Any Textual outside the range gets none, whatever the switch says.

The overrides, each kept for what it was measured to save (docs/measurements.md, "What
each override of Textual's privates buys", 2-core VM):

* ``driver``: ``QuietLinuxDriver`` in place of Textual's ``LinuxDriver``;
* ``table``: ``LeanTable`` under the monitor's two tables (``table_class``).

A third, a compositor that rendered only the changed rows of a partial update, saved
0.2-0.35 ms of CPU a second with nothing watched and cost 0.4-1.7 ms a second watching one
rank: it is gone.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import signal
import termios
import threading
from codecs import getincrementaldecoder
from collections.abc import Callable, Collection, Mapping
from functools import cache
from importlib.metadata import version
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual._parser import ParseError
from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.cache import LRUCache
from textual.color import Color
from textual.coordinate import Coordinate
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets.data_table import ColumnKey, RowKey

from affmon.tui.widgets.celltable import CellTable

if TYPE_CHECKING:
    from affmon.tui.first_frame import EarlyScreen

SWITCH = "AFFMON_STOCK_TEXTUAL"
TEXTUAL_FROM = (7, 5, 0)  # the first Textual the overrides were checked against
TEXTUAL_BELOW = (8, 3, 0)  # the first they were not

DRIVER, TABLE = "driver", "table"
ALL = frozenset({DRIVER, TABLE})


# -- the switch --------------------------------------------------------------------------


def parse_version(text: str) -> tuple[int, ...]:
    """A version's numbers, "8.2.8" -> (8, 2, 8); a pre-release ("8.3.0a1") counts by its numbers."""
    parts: list[int] = []
    for part in text.split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        parts.append(int(digits.group()))
        if digits.end() < len(part):
            break
    return tuple(parts)


@cache
def textual_version() -> tuple[int, ...]:
    """The installed Textual's version."""
    return parse_version(version("textual"))


def in_range(textual: tuple[int, ...]) -> bool:
    return TEXTUAL_FROM <= textual < TEXTUAL_BELOW


def overrides(
    asked: Collection[str] | None = None,
    environ: Mapping[str, str] | None = None,
    textual: tuple[int, ...] | None = None,
) -> frozenset[str]:
    """The overrides in force: ``asked`` (None: what the switch in ``environ``, the process's
    environment by default, leaves on), none where ``textual`` (the installed Textual by
    default) is outside the range they were written against."""
    if not in_range(textual_version() if textual is None else textual):
        return frozenset()
    if asked is not None:
        return ALL & frozenset(asked)
    value = (os.environ if environ is None else environ).get(SWITCH, "").strip()
    if value in ("", "0"):
        return ALL
    off = {name.strip() for name in value.split(",")}
    return frozenset() if not off <= ALL else ALL - off


# -- driver: the input thread sleeps until there is input -----------------------------------
#
# Worth: Textual's input thread costs the monitor 1.1-1.2 ms of CPU a second watching one
# rank, 1.2-1.8 ms with nothing watched; this one's never woke in those runs (0 ms), and the
# monitor's CPU in all went from 16.9-17.8 to 15.7-17.7 ms a second (one rank) and from
# 4.9-5.8 to 3.7-3.8 (nothing watched). Measured with
# ``SCHEDSTAT=1 RANKS=1 bash bench/cost/tui_threads.sh 30`` (and ``RANKS=0``), the switch
# unset against ``AFFMON_STOCK_TEXTUAL=driver``, alternated, 2 and 3 rounds, 2-core VM.
#
# Textual's ``LinuxDriver`` reads the terminal on a thread that wakes ten times a second
# (``select`` with a 0.1 s timeout) for two things: to give a lone Escape its key once the
# parser's wait for the rest of an escape sequence is over, and to notice its own exit.
# ``QuietLinuxDriver`` waits on the terminal with no timeout while the parser has nothing
# pending (``XTermParser._timeout_time``), and until the parser's own deadline while it has
# (an Escape pressed alone gets its key as soon as before). Its exit event also writes to a
# pipe the thread waits on, so a stop (quit, suspend, a dialog's external command) still
# wakes it at once.
#
# And it fixes what Textual's driver does when the terminal goes (a terminal window closed,
# an ssh connection dropped): its input thread read the ended terminal in a loop (a CPU
# spent, drawing on nothing) or died on EIO; its writer thread died on the first failed
# write, and the exit then waited on its full queue for good (an orphan, holding its memory
# and its loop probes); the SIGCONT that follows a hang-up was taken for a resume after
# Ctrl-Z. Here a terminal that reads as ended (or fails, EIO) stops the input thread, which
# sends the monitor SIGHUP, as the kernel does on a hang-up; writes to it are dropped
# (``HungUpTolerant``); a SIGCONT on a dead terminal resumes nothing. And the first frame
# (``affmon.tui.first_frame``) hands its alternate screen over, where Textual's driver
# would switch to it again (saving the alternate screen's cursor over the shell's: the
# shell's prompt came back at the wrong place on exit).
#
# Everything else is Textual's: what is read goes to the same parser and the same
# ``process_message``.

ALT_SCREEN = "\x1b[?1049h"  # what LinuxDriver writes to switch to the alternate screen


class _WakingEvent(threading.Event):
    """An event that also writes a byte to ``wake_fd`` when it is set."""

    def __init__(self, wake_fd: int) -> None:
        super().__init__()
        self._wake_fd = wake_fd

    def set(self) -> None:
        super().set()
        # full (already woken) or closed (the driver is gone): nothing waits on it
        with contextlib.suppress(OSError):
            os.write(self._wake_fd, b"\0")


def parser_deadline(parser: object) -> float | None:
    """When the parser's wait for the rest of a sequence ends (Textual's clock), or None
    when it waits for nothing."""
    deadline = getattr(parser, "_timeout_time", None)
    return deadline if isinstance(deadline, float | int) else None


def select_timeout(deadline: float | None, now: float) -> float | None:
    """How long the input thread may sleep: until input (None) or until the deadline."""
    return None if deadline is None else max(0.0, deadline - now)


class HungUpTolerant:
    """The terminal file Textual's writer thread writes to, made to outlive a hang-up: a
    write or flush that fails (EIO once the terminal is gone) is dropped, and ``gone`` is
    called, once. Everything else is the file's."""

    def __init__(self, file: Any, gone: Callable[[], None]) -> None:
        self._file = file
        self._gone = gone
        self.hung_up = False

    def _hang_up(self) -> None:
        if not self.hung_up:
            self.hung_up = True
            self._gone()

    def write(self, text: str) -> int:
        if not self.hung_up:
            try:
                return int(self._file.write(text))
            except OSError:
                self._hang_up()
        return len(text)

    def flush(self) -> None:
        if not self.hung_up:
            try:
                self._file.flush()
            except OSError:
                self._hang_up()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


def terminal_alive(fd: int) -> bool:
    """Whether ``fd`` is a terminal that has not hung up (its settings can be read)."""
    try:
        termios.tcgetattr(fd)
    except (termios.error, OSError):
        return False
    return True


class QuietLinuxDriver(LinuxDriver):
    early: ClassVar[EarlyScreen | None] = None  # the first frame's screen, taken over at start
    _skip_alt_screen = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.exit_event = _WakingEvent(self._wake_write)
        self.input_wakeups = 0  # times the input thread woke (a figure for tests)
        self._terminal = HungUpTolerant(self._file, self.terminal_gone)
        self._file = self._terminal  # type: ignore[assignment]  # a file to Textual: what it uses, delegated

    def _sigcont_application(self, *args: Any) -> None:
        """SIGCONT: a resume after Ctrl-Z enters application mode again, but not on a
        terminal that hung up (the kernel sends SIGCONT right after a hang-up's SIGHUP; a
        driver made after the monitor's SIGHUP handler ran has this handler in place again)."""
        if self._terminal.hung_up or not terminal_alive(self.fileno):
            return
        super()._sigcont_application(*args)

    def start_application_mode(self) -> None:
        # The first frame put the terminal on the alternate screen already (the shell's
        # cursor saved): switching again would save the alternate screen's cursor over it.
        self._skip_alt_screen = self.early is not None and self.early.hand_over()
        super().start_application_mode()  # type: ignore[no-untyped-call]

    def write(self, data: str) -> None:
        if self._skip_alt_screen and data == ALT_SCREEN:
            self._skip_alt_screen = False
            return
        super().write(data)

    def close(self) -> None:
        super().close()
        for fd in (self._wake_read, self._wake_write):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._wake_read = self._wake_write = -1

    def terminal_gone(self) -> None:
        """The terminal read end of file or failed (EIO): it hung up. A hang-up sends the
        session SIGHUP, which ends the monitor; this sends it too, for a terminal that hung
        up without one (the monitor not its session's leader, the signal ignored or blocked
        when it came). Without it the thread would wake at once, forever: the terminal
        reads as ready and empty once it is gone."""
        os.kill(os.getpid(), signal.SIGHUP)

    def _drain_wake(self) -> None:
        with contextlib.suppress(OSError):  # empty
            while os.read(self._wake_read, 64):
                pass

    def run_input_thread(self) -> None:
        """Textual's input loop, sleeping until input, the parser's deadline or a stop."""
        fileno = self.fileno
        selector = selectors.SelectSelector()
        selector.register(fileno, selectors.EVENT_READ)
        selector.register(self._wake_read, selectors.EVENT_READ)
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode

        def process(events: list[tuple[selectors.SelectorKey, int]], final: bool = False) -> bool:
            """Feed what the terminal has to the parser; False once the terminal is gone."""
            for key, mask in events:
                if key.fd == fileno and mask & selectors.EVENT_READ:
                    try:
                        raw = os.read(fileno, 1024 * 4)
                    except OSError:  # EIO: the terminal hung up
                        raw = b""
                    if not raw:
                        return False
                    for event in parser.feed(decode(raw, final=final)):
                        self.process_message(event)
            for event in parser.tick():
                self.process_message(event)
            return True

        try:
            while not self.exit_event.is_set():
                events = selector.select(select_timeout(parser_deadline(parser), get_time()))
                self.input_wakeups += 1
                self._drain_wake()
                if not process(events):
                    self.terminal_gone()
                    return
            selector.unregister(fileno)
            process(selector.select(0.1), final=True)
        finally:
            selector.close()
            try:
                for _ in parser.feed(""):
                    pass
            except (EOFError, ParseError):
                pass


def driver_class(chosen: type[Driver], early: EarlyScreen | None = None, on: bool = True) -> type[Driver]:
    """``QuietLinuxDriver`` in place of Textual's ``LinuxDriver`` where ``on``; any other
    choice (another platform, a driver named by ``TEXTUAL_DRIVER``) as it is. ``early``:
    the first frame's screen, which the quiet driver takes over as it is; another driver
    switches screens itself, so the first frame's screen is closed first."""
    if not on or chosen is not LinuxDriver or not hasattr(os, "pipe2"):
        if early is not None:
            early.close()
        return chosen
    if early is None:
        return QuietLinuxDriver
    return type("QuietLinuxDriver", (QuietLinuxDriver,), {"early": early})


# -- table: only the cells that changed are rendered, only their rows painted ---------------
#
# Worth: watching one rank, the monitor's UI thread spent 29.8 ms of CPU a second with
# Textual's ``DataTable`` as it is and 7.2-8.3 with this (its CPU in all 38.1-38.5 against
# 15.7-17.7 ms a second: ``SCHEDSTAT=1 RANKS=1 bash bench/cost/tui_threads.sh 30``, the
# switch unset against ``AFFMON_STOCK_TEXTUAL=table``, alternated, 2 rounds, 2-core VM).
# Its three parts, each taken out in turn from a copy of the tree (the same command, 2
# rounds; the UI thread 7.1-7.3 ms a second with all three):
#
# Textual's ``DataTable`` keys its cell render cache on a counter that every ``update_cell``
# bumps (``_update_count``), so changing one CPU% re-renders every visible cell through Rich
# (``_render_cell``). Here a cell's render is cached on the cell object itself (the
# ``CellTable`` keeps the object already shown when the new cell draws the same), so an
# unchanged cell's render is reused and a changed cell is rendered once. Without it: 10.9-13.8.
#
# Only the rows that changed are painted again: ``update_cell`` repaints the whole widget,
# every line of it down to the blank ones below the last row. ``write_cell`` writes the cell
# itself (``_data``) and ``rows_written`` marks dirty only the lines of the rows that
# changed; Textual keeps the other lines as they were drawn. Without it: 11.0-11.7.
#
# Textual's own caches, keyed on its update counter, are bounded: each tick's renders are
# new entries until they are full (10,000 cells, 1,000 rows and lines a table). Cells are
# cached here; Textual's keep what one screen of rows and lines needs, and are emptied when
# the counter moves (``render_lines``): an entry under an older count is never read again.
# The memory Python traces in the monitor after 600 ticks of the "hogs" recording
# (``python -m bench.cost.tui_memory --ticks 600 --every 100``): 7.0 MiB with the bounds,
# 15.6 MiB without them (a copy of the tree), 29.5 MiB with ``AFFMON_STOCK_TEXTUAL=table``.
#
# A row's line (``_render_line_in_row``) is drawn with what every line of a pass shares
# looked up once: Textual's looks up the columns' widths, the header's style, the table's
# background and the style of the space right of the cells again for each line, and the
# style and background walk every ancestor's styles. Drawing every line of a 30-row table
# whose rows all changed: 189-200 us of CPU a line against 241-252 with Textual's own
# (``python -m bench.cost.table_lines``, twice, 2-core VM). Watched as a whole (the UI
# thread in ``tui_threads.sh``, four ranks and one, alternated) the change was within the
# runs' spread, as were three parts tried before and gone: styles looked up once a pass of
# lines, a row's line assembled without the header's style, the header row's cells cached
# apart.

RENDER_CACHE_CELLS = 4096  # a 160x48 screen shows about 600 cells; the rest are cursor and hover variants
TEXTUAL_CELLS_KEPT = 512
TEXTUAL_ROWS_KEPT = 256
TEXTUAL_LINES_KEPT = 256
ROW_REPAINTS = 16  # more rows changed than this (a re-sort): one repaint of the whole table

Table = TypeVar("Table", bound=CellTable)


class _RowLook:
    """``LeanTable._row_look``: what the lines of one pass share, and the row styles made in it."""

    __slots__ = ("background", "extend_styles", "key", "remaining", "row_styles", "widths")

    def __init__(self, key: tuple[object, ...], widths: list[int], remaining: int, background: Any) -> None:
        self.key = key
        self.widths = widths
        self.remaining = remaining  # blank columns right of the last cell
        self.background = background
        self.row_styles: dict[int, Style] = {}  # by the row's kind: header, fixed, odd, even, other
        self.extend_styles: dict[tuple[object, ...], Style] = {}


class LeanTable(CellTable):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._cell_render_cache = LRUCache(TEXTUAL_CELLS_KEPT)
        self._row_render_cache = LRUCache(TEXTUAL_ROWS_KEPT)
        self._row_renderable_cache = LRUCache(TEXTUAL_ROWS_KEPT)
        self._line_cache = LRUCache(TEXTUAL_LINES_KEPT)
        self._cached_for = self._update_count  # the update count Textual's caches hold renders of
        self._renders: dict[tuple[object, ...], tuple[Text, list[list[Segment]]]] = {}
        self._drawn: dict[tuple[object, ...], list[list[Segment]]] = {}  # by what the cell draws, not where
        self._metas: dict[tuple[int, int, bool], Style] = {}  # ``_meta``
        self._look: _RowLook | None = None  # ``_row_look``
        self.cell_renders = 0  # cells rendered through Rich (a figure for tests)

    def write_cell(self, row: str, column: ColumnKey, value: Text) -> None:
        self._data[RowKey(row)][column] = value  # what update_cell does, without its repaint of every line

    def rows_written(self, rows: list[int]) -> None:
        self._update_count += 1  # Textual's line caches are keyed on it
        if len(rows) > ROW_REPAINTS:
            self.refresh()
        else:
            for i in rows:
                self.refresh_row(i)

    def render_lines(self, crop: Region) -> list[Strip]:
        if self._update_count != self._cached_for:
            self._cached_for = self._update_count
            self._cell_render_cache.clear()
            self._row_render_cache.clear()
            self._row_renderable_cache.clear()
            self._line_cache.clear()
        return super().render_lines(crop)

    def clear(self, columns: bool = False) -> Any:
        self._renders.clear()
        self._drawn.clear()
        return super().clear(columns)

    def notify_style_update(self) -> None:
        self._look = None  # a theme, a class: the styles of every row's line may have changed
        super().notify_style_update()

    def _clear_caches(self) -> None:
        self._look = None  # whatever made Textual drop its renders (a cursor type, zebra stripes, a resize)
        super()._clear_caches()

    def _row_look(self, base_style: Style) -> _RowLook:
        """What every row's line of this pass shares: the columns' widths, the blank space
        right of them and the table's background. Textual's ``_render_line_in_row`` looks
        each up again for each line it renders, with the header's style, which only row
        labels and fixed columns use (that style and the background walk every ancestor's
        styles)."""
        key = (
            self._update_count,
            self.size.width,
            base_style,
            self._pseudo_class_state,
            self.cursor_type,
            self.show_cursor,
            self._show_hover_cursor,
        )
        look = self._look
        if look is None or look.key != key:
            widths = [column.get_render_width(self) for column in self.ordered_columns]
            table_width = sum(widths[self.fixed_columns :]) + self._row_label_column_width
            look = self._look = _RowLook(key, widths, max(0, self.size.width - table_width), self.background_colors[1])
        return look

    def _render_line_in_row(
        self,
        row_key: RowKey,
        line_no: int,
        base_style: Style,
        cursor_location: Coordinate,
        hover_location: Coordinate,
    ) -> tuple[list[list[Segment]], list[list[Segment]]]:
        """Textual's, for a table with no row labels and no fixed columns (the monitor's),
        with what every line of a pass shares looked up once (``_row_look``) and the styles
        of a row's kind and of the space right of its cells made once a pass; any other
        table is Textual's own."""
        if (self._labelled_row_exists and self.show_row_labels) or self.fixed_columns:
            return super()._render_line_in_row(row_key, line_no, base_style, cursor_location, hover_location)
        cursor_type = self.cursor_type
        cache_key = (
            row_key,
            line_no,
            base_style,
            cursor_location,
            hover_location,
            cursor_type,
            self.show_cursor,
            self._show_hover_cursor,
            self._update_count,
            self._pseudo_class_state,
        )
        cached = self._row_render_cache.get(cache_key)
        if cached is not None:
            return cached
        look = self._row_look(base_style)
        found = self._row_locations.get(row_key) if row_key in self._row_locations else None
        row_index = -1 if found is None else found
        if row_index == -1 or row_index < self.fixed_rows:
            kind = -1 if row_index == -1 else -2  # the header, a fixed row
        else:
            kind = row_index % 2 if self.zebra_stripes else -3  # an odd or even row, any row
        row_style = look.row_styles.get(kind)
        if row_style is None:
            row_style = look.row_styles[kind] = self._get_row_style(row_index, base_style)
        should_highlight = self._should_highlight
        render_cell = self._render_cell
        scrollable_row: list[list[Segment]] = []
        for column_index, width in enumerate(look.widths):
            cell_location = Coordinate(row_index, column_index)
            scrollable_row.append(
                render_cell(
                    row_index,
                    column_index,
                    row_style,
                    width,
                    cursor=should_highlight(cursor_location, cell_location, cursor_type),
                    hover=should_highlight(hover_location, cell_location, cursor_type),
                )[line_no]
            )
        if cursor_type == "row":
            hover = should_highlight(hover_location, Coordinate(row_index or 0, 0), cursor_type)
            extend_key: tuple[object, ...] = (kind, row_index == -1, hover, row_index == cursor_location.row)
        else:
            extend_key = (kind,)
        extend_style = look.extend_styles.get(extend_key)
        if extend_style is None:
            extend_style = look.extend_styles[extend_key] = self._extend_style(row_style, look.background, extend_key)
        scrollable_row.append([Segment(" " * look.remaining, extend_style + self._meta(row_index, 0, True))])
        row_pair: tuple[list[list[Segment]], list[list[Segment]]] = ([], scrollable_row)
        self._row_render_cache[cache_key] = row_pair
        return row_pair

    def _extend_style(self, row_style: Style, background: Any, key: tuple[object, ...]) -> Style:
        """The style of the space right of a row's cells, as Textual's ``_render_line_in_row``
        makes it, less the place (added by the caller)."""
        if self.cursor_type == "row":
            _, header, hover, cursor = key
            extend, _ = self._get_styles_to_render_cell(
                header, False, False, hover, cursor, self.show_cursor, self._show_hover_cursor, False, False
            )
            return row_style + extend
        if row_style.bgcolor is not None:
            faded = Color.from_rich_color(row_style.bgcolor).blend(background, factor=0.25)
            return Style.from_color(color=row_style.color, bgcolor=faded.rich_color)
        return Style.from_color(row_style.color, row_style.bgcolor)

    def _meta(self, row: int, column: int, out_of_bounds: bool = False) -> Style:
        """The style that carries a place on screen (what a mouse click reads), made once
        per place: ``Style.from_meta`` marshals its dict each time it is called."""
        key = (row, column, out_of_bounds)
        style = self._metas.get(key)
        if style is None:
            meta: dict[str, object] = {"row": row, "column": column}
            if out_of_bounds:
                meta["out_of_bounds"] = True
            if len(self._metas) >= RENDER_CACHE_CELLS:
                self._metas.clear()  # bounded by the places on screen; a backstop
            style = self._metas[key] = Style.from_meta(meta)
        return style

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> list[list[Segment]]:
        row_key = self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        # What a cell's render depends on besides its content and place.
        look = (base_style, width, cursor, hover, self._show_hover_cursor, self._pseudo_class_state)
        if row_key is None or column_key is None:  # the header row, row labels: Textual's own cache
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        value = self._data[row_key][column_key]
        key = (row_index, column_index, *look)  # the render carries its place (mouse clicks read it)
        hit = self._renders.get(key)
        if hit is not None and hit[0] is value:
            return hit[1]
        drawn_key = (content_key(value), *look)
        drawn = self._drawn.get(drawn_key)
        if drawn is not None:
            lines = _moved(drawn, self._meta(row_index, column_index))
        else:
            lines = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
            if len(self._drawn) >= RENDER_CACHE_CELLS:
                self._drawn.clear()  # keyed by content and look: few distinct ones a table; a backstop
            self._drawn[drawn_key] = lines
            self.cell_renders += 1
        if len(self._renders) >= RENDER_CACHE_CELLS:
            self._renders.clear()  # keyed by position and look: bounded by the screen, this is a backstop
        self._renders[key] = (value, lines)
        return lines


def content_key(cell: object) -> object:
    """What a cell draws (``same_text``'s fields), as a key: two cells with the same key
    render alike at the same width and look."""
    if not isinstance(cell, Text):
        return cell
    return (
        cell.plain,
        tuple(cell.spans),
        cell.style,
        cell.justify,
        cell.overflow,
        cell.no_wrap,
        cell.end,
        cell.tab_size,
    )


def _moved(lines: list[list[Segment]], meta: Style) -> list[list[Segment]]:
    """A cell's render drawn at another place: every segment carries the place in its
    style's meta (``{"row": ..., "column": ...}``: what a mouse click on it reads), which a
    style added last replaces; nothing else of the render depends on where it is."""
    return [
        [Segment(text, style + meta if style is not None else None, control) for text, style, control in line]
        for line in lines
    ]


_lean_tables: dict[type[CellTable], type[CellTable]] = {}


def table_class(cls: type[Table], on: bool) -> type[Table]:
    """``cls`` with ``LeanTable`` under it where ``on`` (a subclass of the same name, made
    once); ``cls`` itself otherwise."""
    if not on:
        return cls
    lean = _lean_tables.get(cls)
    if lean is None:
        lean = _lean_tables[cls] = type(cls.__name__, (LeanTable, cls), {"__module__": cls.__module__})
    return cast("type[Table]", lean)
