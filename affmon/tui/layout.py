"""The monitor's layout decisions that need no terminal: how tall the process pane is,
from which sizes the panes show, and what an empty table says. Pure, so the sizes a
newcomer's terminal has (80x24 to 200x50) are tested without one."""

from __future__ import annotations

from affmon.tui.model.table import TableOptions
from affmon.tui.model.views import View

FOOTER_COMPACT_BELOW = 120  # columns: the footer drops its padding so ? and q stay on screen
DETAIL_FROM_ROWS = 28  # terminal rows from which the detail pane shows (the "-medium" breakpoint)
MAIN_MIN_ROWS = 6  # the process pane's least height (border, header, three rows)
DETAIL_MIN_ROWS = 8  # the detail pane's least height when shown
TALL_FROM_ROWS = 44  # terminal rows from which the history plots show (the "-tall" breakpoint)
PLOT_DETAIL_ROWS = 16  # the detail pane's least height where its plot shows


def pane_heights(
    available: int, table_rows: int, side_rows: int, detail_rows: int, detail_least: int = DETAIL_MIN_ROWS
) -> int:
    """The process pane's height; the detail pane takes the rest of ``available``.

    The pane wants its table's rows plus its header and border, or the core map's lines,
    whichever is more; the detail pane wants ``detail_rows``. When both fit, the pane gets
    what it wants and the detail pane every row left (a table of 4 rows no longer keeps 18
    blank ones while a finding is cut mid-sentence below). When they do not, the detail
    pane gets what it wants unless that leaves the pane less than half (or its least).
    ``detail_least``: where the history plot shows (a tall terminal), it needs rows to read."""
    want_main = max(table_rows + 3, side_rows + 2, MAIN_MIN_ROWS)
    want_detail = max(detail_rows + 2, detail_least)
    if want_main + want_detail <= available:
        return want_main
    return max(MAIN_MIN_ROWS, min(want_main, max(available - want_detail, available // 2)))


def empty_message(view: View, options: TableOptions, watched_pid: int | None) -> str:
    """Why the process table has no row: a filter that matches nothing, a ``--pid`` that
    exited, or nothing that looks like training (a blank table said none of it)."""
    o = options
    if o.filter_text.strip():
        return f"nothing matches the filter {o.filter_text.strip()!r}: / edits it, Esc clears it"
    if watched_pid is not None and o.training_only and view.process(watched_pid) is None:
        return f"PID {watched_pid} has exited: nothing left to watch (a shows every process; q quits)"
    if o.training_only:
        return "no training process found (none holds a GPU or looks like a trainer): a shows every process"
    return "no process sampled"
