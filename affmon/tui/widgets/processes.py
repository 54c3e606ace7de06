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
from affmon.core.text import term_safe
from affmon.tui.model.process_detail import DetailedRow
from affmon.tui.model.table import TableRow
from affmon.tui.model.views import ProcessRow, ThreadRow, loop_word, shown_role
from affmon.tui.palette import Palette
from affmon.tui.widgets.celltable import Cells, CellTable

# (key, label, width); numbers are right-aligned by the cell text. COMMAND and FINDINGS
# widths are their least: ``fit_columns`` gives them what the other columns leave.
COLUMNS = (
    ("pid", "PID", 7),
    ("command", "COMMAND", 20),
    ("cpu", "CPU%", 5),
    ("wait", "WAIT", 4),
    ("ran", "RAN ON", 9),
    ("mask", "MASK", 9),
    ("findings", "FINDINGS", 14),
    ("loop", "LOOP", 8),
    ("gpu", "GPU", 3),
    ("thr", "THR", 3),
    ("sw", "SW/s", 5),
    ("mig", "MIG/s", 5),
    ("nodes", "NODE", 4),
    ("user", "USER", 8),
)
# Columns kept first when the table is too narrow for all of them; the rest go from the
# end of this list (USER first), so the table never needs a sideways scroll.
KEEP_ORDER: tuple[str, ...] = (
    "pid",
    "command",
    "cpu",
    "wait",
    "findings",
    "mask",
    "ran",
    "loop",
    "gpu",
    "thr",
    "sw",
    "mig",
    "nodes",
    "user",
)
ALWAYS = frozenset({"pid", "command", "cpu", "wait", "findings"})
OPTIONAL = frozenset({"loop", "gpu"})  # shown only where a row has one (a loop probed, a GPU used)
CELL_PADDING = 1  # DataTable's, on each side of a cell
FINDINGS_MAX = 20  # "STARV CONTEND GPUSTV"
COMMAND_FIRST = 26  # a worker's name under a rank: "│  ├─ pt_data_worker rank"
SORT_MARKS = {False: "▼", True: "▲"}
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


def fit_columns(
    width: int,
    needs: dict[str, int],
    present: frozenset[str],
    sort: str | None = None,
    reverse: bool = False,
) -> tuple[tuple[str, str, int], ...]:
    """The columns that fit ``width`` cells, in table order, as (key, label, width).

    ``needs``: the widest cell of a flexible column (COMMAND, FINDINGS) this tick;
    ``present``: optional columns with content (LOOP only when a loop was probed, GPU
    only when a process uses one: a CPU-only machine shows no empty column). Columns
    are kept in ``KEEP_ORDER`` while they fit; COMMAND then takes the room left up to its
    widest name (a deep tree's names are not cut to "p…"), FINDINGS up to ``FINDINGS_MAX``.
    The sorted column's label carries ▼ (▲ reversed)."""
    sizes = {key: w for key, _, w in COLUMNS}
    # The flexible columns first take what their content needs (FINDINGS all of it, up to
    # FINDINGS_MAX; COMMAND up to COMMAND_FIRST), then optional columns what is left, then
    # COMMAND the rest up to its widest name.
    spare = max(0, width - sum(sizes[k] + 2 * CELL_PADDING for k in ALWAYS))
    for key, most in (("findings", FINDINGS_MAX), ("command", COMMAND_FIRST)):
        grow = min(spare, max(0, min(most, needs.get(key, 0)) - sizes[key]))
        sizes[key] += grow
        spare -= grow
    candidates = [k for k in KEEP_ORDER if k not in OPTIONAL or k in present]
    used = 0
    kept: list[str] = []
    for key in candidates:
        cost = sizes[key] + 2 * CELL_PADDING
        if key in ALWAYS or used + cost <= width:
            kept.append(key)
            used += cost
    room = max(0, width - used)
    sizes["command"] += min(room, max(0, needs.get("command", 0) - sizes["command"]))
    out = []
    for key, label, _ in COLUMNS:
        if key in kept:
            if key == sort:
                label += SORT_MARKS[reverse]
            out.append((key, label, sizes[key]))
    return tuple(out)


def name_text(row: TableRow, p: Palette, job_colors: dict[int, str]) -> Text:
    """The tree, the name in its job's colour, its role, and the scheduler that placed it."""
    proc = row.process
    assert proc is not None
    color = job_colors.get(proc.job_pid or -1, "")
    name = Text(no_wrap=True, overflow="ellipsis")
    name.append(row.prefix, style=p.disabled)
    name.append(proc.name, style=f"bold {color}" if proc.role == "rank" else color)
    role = shown_role(proc)
    if role:
        name.append(f" {role}", style=p.muted)
    context = proc.context if isinstance(proc, DetailedRow) else None
    if context:  # a rank's environment wrote it: escaped like a name
        name.append(f" [{term_safe(context)}]", style=p.muted)
    return name


def row_loop(proc: ProcessRow) -> str | None:
    """The LOOP column's word for a process whose training loop is probed; None otherwise."""
    return loop_word(proc.loop) if isinstance(proc, DetailedRow) else None


def loop_style(word: str | None, p: Palette) -> str:
    """GPU is where a training loop should wait; data and cpu-wait are the CPU side's fault."""
    return {"GPU": p.success, "data": p.warning, "cpu-wait": p.warning, "CPU": p.warning}.get(word or "", p.muted)


def process_cells(row: TableRow, p: Palette, job_colors: dict[int, str]) -> list[Text]:
    """Every column's cell, in ``COLUMNS`` order (the table shows those that fit)."""
    proc = row.process
    assert proc is not None
    name = name_text(row, p, job_colors)
    mask = fmt.cpus(proc.mask, 9) + ("*" if proc.mask_varies else "")
    return [
        _right(str(proc.pid), f"bold {p.severity(proc.worst)}" if proc.worst is not None else ""),
        name,
        _right(fmt.cpu_percent(proc.cpu_percent)),
        _right(fmt.ratio_percent(proc.wait_ratio), wait_style(proc.wait_ratio, p)),
        Text(fmt.cpus(proc.ran_on_cpus, 9) if proc.ran_on_cpus else "-", no_wrap=True),
        Text(mask, no_wrap=True),
        findings_text(proc, p),
        Text(row_loop(proc) or "", style=loop_style(row_loop(proc), p), no_wrap=True),
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
        Text(""),
        _right(fmt.per_s(t.switches_per_s), dim),
        _right(fmt.per_s(t.migrations_per_s), dim),
        Text(""),
        Text(""),
    ]


class ProcessTable(CellTable):
    """Columns follow the width (``fit_columns``): laid out again when the width, the
    sort, or the widest name changes; otherwise rows are rewritten in place."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, cell_padding=CELL_PADDING, **kwargs)
        self._keys: list[str] = []
        self._rows: list[TableRow] = []
        self._full: list[Cells] = []  # every column's cells of each row shown
        self._style: tuple[Palette, dict[int, str]] | None = None
        self._layout: tuple[tuple[str, str, int], ...] = ()
        self._sort: tuple[str | None, bool] = (None, False)
        self._width: int | None = None  # the width last laid out for
        self.user_moved = False  # until the person moves the cursor, it follows the top row (``_top_key``)

    def on_key(self, event: events.Key) -> None:
        if event.key in NAVIGATION_KEYS:
            self.user_moved = True

    def on_click(self) -> None:
        self.user_moved = True

    def on_resize(self) -> None:
        if self._rows and self._style is not None:
            self.show(self._rows, *self._style, sort=self._sort[0], reverse=self._sort[1])

    @property
    def selected_key(self) -> str | None:
        if not self._keys or self.cursor_row < 0 or self.cursor_row >= len(self._keys):
            return None
        return self._keys[self.cursor_row]

    @property
    def shown_keys(self) -> list[str]:
        """The key of each row shown (``TableRow.key``), top to bottom."""
        return list(self._keys)

    @property
    def shown_columns(self) -> tuple[str, ...]:
        return tuple(key for key, _, _ in self._layout)

    def show(
        self,
        rows: Sequence[TableRow],
        p: Palette,
        job_colors: dict[int, str],
        select: str | None = None,
        *,
        sort: str | None = None,
        reverse: bool = False,
    ) -> None:
        """Lay out ``rows``; keep the cursor on ``select`` (default: the current key)."""
        wanted = select or (self.selected_key if self.user_moved else self._top_key(rows, sort))
        table_width = self.size.width
        same_style = self._style == (p, job_colors)
        given = list(rows)
        if same_style and table_width == self._width and (sort, reverse) == self._sort and given == self._rows:
            # The rows, colours, sort and width it shows (a quiet machine's tick): nothing to
            # format, fit or compare cell by cell.
            if wanted is not None and wanted != self.selected_key:
                self.select_key(wanted)
            return
        if not same_style:
            self._style, self._rows = (p, dict(job_colors)), []
        old, full = self._rows, self._full
        cells: list[Cells] = []
        for i, r in enumerate(rows):
            if i < len(old) and i < len(full) and old[i] == r:
                cells.append(full[i])  # the same row at the same place: nothing to format
            else:
                cells.append(tuple(process_cells(r, p, job_colors) if r.process else thread_cells(r, p)))
        layout = self._fit(rows, cells, sort, reverse)
        if layout != self._layout:
            cursor = self.cursor_row
            self.clear(columns=True)
            for key, label, width in layout:
                self.add_column(label, width=width, key=key)
            self._layout = layout
            if rows:
                self.move_cursor(row=min(cursor, len(rows) - 1), animate=False)
        index = {key: i for i, (key, _, _) in enumerate(COLUMNS)}
        picked = [index[key] for key, _, _ in layout]
        self.put_rows([tuple(c[i] for i in picked) for c in cells])
        self._rows, self._full, self._keys = given, cells, [r.key for r in rows]
        self._sort = (sort, reverse)
        self._width = table_width
        if wanted is not None and wanted != self.selected_key:
            self.select_key(wanted)

    def _top_key(self, rows: Sequence[TableRow], sort: str | None) -> str | None:
        """Until the person moves the cursor it follows the top row: by findings, the worst
        job. Among jobs as bad as each other (the same worst finding and as many findings),
        which one is on top goes by CPU% and changes from tick to tick; the cursor stays on
        the one it is on while that one is still as bad as the top row, so that the detail
        pane does not switch processes every second."""
        if not rows:
            return None
        top = rows[0]
        held = self.selected_key
        if sort != "findings" or held is None or held == top.key or top.process is None:
            return top.key
        row = next((r for r in rows if r.key == held), None)
        if row is None or row.depth != 0 or row.process is None:
            return top.key
        same = (row.process.worst, len(row.process.findings)) == (top.process.worst, len(top.process.findings))
        return held if same else top.key

    def _fit(
        self, rows: Sequence[TableRow], cells: Sequence[Cells], sort: str | None, reverse: bool
    ) -> tuple[tuple[str, str, int], ...]:
        names = [c[1].cell_len for c in cells]
        findings = [c[6].cell_len for c in cells]
        processes = [r.process for r in rows if r.process is not None]
        present = frozenset({"loop"} if any(row_loop(p) for p in processes) else set()) | frozenset(
            {"gpu"} if any(p.gpus for p in processes) else set()
        )
        width = (self.size.width or 80) - 1  # the vertical scrollbar's column
        needs = {"command": max(names, default=0), "findings": max(findings, default=0)}
        return fit_columns(width, needs, present, sort, reverse)

    def select_key(self, key: str) -> bool:
        try:
            index = self._keys.index(key)
        except ValueError:
            return False
        self.move_cursor(row=index, animate=False, scroll=True)
        return True
