"""The process table: launcher -> ranks -> DataLoader workers as a tree, one row per
process (and per thread with ``t``). Each row has a key ("p:PID", "t:PID:TID"); the
table itself holds rows by position (``CellTable``), so a process that comes or goes or
a sort that moves rows rewrites only the cells that differ, and the cursor is put back on
the same key, so selection never jumps. A row equal to the one shown at its position last
tick is not formatted again.

Cells are Rich ``Text`` (never markup) made from rows whose names ``views`` has escaped."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual import events

from affmon.core import fmt
from affmon.tui.model.table import TableRow
from affmon.tui.model.views import ProcessRow, ThreadRow
from affmon.tui.palette import Palette
from affmon.tui.widgets.celltable import Cells, CellTable

# (key, label, width); numbers are right-aligned by the cell text.
COLUMNS = (
    ("pid", "PID", 7),
    ("command", "COMMAND", 20),
    ("cpu", "CPU%", 5),
    ("wait", "WAIT", 4),
    ("ran", "RAN ON", 9),
    ("mask", "MASK", 9),
    ("findings", "FINDINGS", 20),
    ("gpu", "GPU", 3),
    ("thr", "THR", 3),
    ("sw", "SW/s", 5),
    ("mig", "MIG/s", 5),
    ("nodes", "NODE", 4),
    ("user", "USER", 8),
)
NAVIGATION_KEYS = frozenset({"up", "down", "pageup", "pagedown", "home", "end"})
WAIT_WARN = 0.10  # findings.Thresholds.starved_warn / starved_bad: the same colours
WAIT_BAD = 0.25


def _right(text: str, style: str = "") -> Text:
    return Text(text, style=style, justify="right", no_wrap=True)


def wait_style(ratio: float | None, p: Palette, busy: bool = True) -> str:
    """The findings' colours for a wait ratio; none for a thread that hardly wanted a CPU
    (a thread that ran 0.1% of the time and waited for half of it is not starved)."""
    if ratio is None or not busy:
        return p.muted
    return f"bold {p.error}" if ratio >= WAIT_BAD else p.warning if ratio >= WAIT_WARN else ""


def findings_text(row: ProcessRow, p: Palette) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    for i, mark in enumerate(row.findings):
        if i:
            text.append(" ")
        style = p.severity(mark.severity)
        text.append(fmt.short_code(mark.code), style=style if mark.inherited else f"bold {style}")
    return text


def process_cells(row: TableRow, p: Palette, job_colors: dict[int, str]) -> list[Text]:
    proc = row.process
    assert proc is not None
    color = job_colors.get(proc.job_pid or -1, "")
    name = Text(no_wrap=True, overflow="ellipsis")
    name.append(row.prefix, style=p.disabled)
    name.append(proc.name, style=f"bold {color}" if proc.role == "rank" else color)
    if proc.role == "launcher" or (proc.role == "rank" and proc.gpus):
        name.append(f" {proc.role}", style=p.muted)
    mask = fmt.cpus(proc.mask, 9) + ("*" if proc.mask_varies else "")
    return [
        _right(str(proc.pid), f"bold {p.severity(proc.worst)}" if proc.worst is not None else ""),
        name,
        _right(fmt.cpu_percent(proc.cpu_percent)),
        _right(fmt.ratio_percent(proc.wait_ratio), wait_style(proc.wait_ratio, p)),
        Text(fmt.cpus(proc.ran_on_cpus, 9) if proc.ran_on_cpus else "-", no_wrap=True),
        Text(mask, no_wrap=True),
        findings_text(proc, p),
        Text(",".join(map(str, proc.gpus)) or "", no_wrap=True),
        _right(str(proc.threads)),
        _right(fmt.per_s(proc.switches_per_s)),
        _right(fmt.per_s(proc.migrations_per_s)),
        Text(fmt.nodes(proc.ran_on_nodes) if proc.ran_on_cpus else "-", no_wrap=True),
        Text((proc.user or "?")[:8], no_wrap=True),
    ]


def thread_cells(row: TableRow, p: Palette) -> list[Text]:
    t: ThreadRow | None = row.thread
    assert t is not None
    dim = p.muted
    name = Text(no_wrap=True, overflow="ellipsis")
    name.append(row.prefix, style=p.disabled)
    name.append(f"{t.name} ", style=dim)
    name.append(t.state, style=p.disabled)
    return [
        _right(str(t.tid), dim),
        name,
        _right(fmt.cpu_percent(t.cpu_percent), dim),
        _right(fmt.ratio_percent(t.wait_ratio), wait_style(t.wait_ratio, p, t.busy) or dim),
        Text(f"psr {fmt.node(t.psr)}", style=dim, no_wrap=True),
        Text(fmt.cpus(t.mask, 9), style=dim, no_wrap=True),
        Text(""),
        Text(""),
        Text(""),
        _right(fmt.per_s(t.switches_per_s), dim),
        _right(fmt.per_s(t.migrations_per_s), dim),
        Text(""),
        Text(""),
    ]


class ProcessTable(CellTable):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self._keys: list[str] = []
        self._rows: list[TableRow] = []
        self._style: tuple[Palette, dict[int, str]] | None = None
        self.user_moved = False  # until the person moves the cursor, it follows the top row

    def on_key(self, event: events.Key) -> None:
        if event.key in NAVIGATION_KEYS:
            self.user_moved = True

    def on_click(self) -> None:
        self.user_moved = True

    def on_mount(self) -> None:
        for key, label, width in COLUMNS:
            self.add_column(label, width=width, key=key)

    @property
    def selected_key(self) -> str | None:
        if not self._keys or self.cursor_row < 0 or self.cursor_row >= len(self._keys):
            return None
        return self._keys[self.cursor_row]

    def show(self, rows: Sequence[TableRow], p: Palette, job_colors: dict[int, str], select: str | None = None) -> None:
        """Lay out ``rows``; keep the cursor on ``select`` (default: the current key)."""
        wanted = select or (self.selected_key if self.user_moved else (rows[0].key if rows else None))
        if self._style != (p, job_colors):
            self._style, self._rows = (p, dict(job_colors)), []
        old, shown = self._rows, self._shown
        cells: list[Cells] = []
        for i, r in enumerate(rows):
            if i < len(old) and i < len(shown) and old[i] == r:
                cells.append(shown[i])  # the same row at the same place: nothing to format
            else:
                cells.append(tuple(process_cells(r, p, job_colors) if r.process else thread_cells(r, p)))
        self.put_rows(cells)
        self._rows, self._keys = list(rows), [r.key for r in rows]
        if wanted is not None and wanted != self.selected_key:
            self.select_key(wanted)

    def select_key(self, key: str) -> bool:
        try:
            index = self._keys.index(key)
        except ValueError:
            return False
        self.move_cursor(row=index, animate=False, scroll=True)
        return True
