"""The help screen: keys, columns and the core map's marks, as two-column grids so a line
that wraps at 80 columns continues under its own text, not at the left edge.

htop's keys that mean something here work here too (F1, F6, F10, Enter, arrows); htop's
kill (F9, k) has no counterpart: affmon never signals a process, and the help says so."""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = (
    ("↑↓ PgUp PgDn", "move in the pane that has focus, Home and End too (Tab moves between panes); the mouse works"),
    ("Enter", "open the selected process's detail full size (findings, evidence, threads); Enter or Esc goes back"),
    ("r", "re-pin the selected process's job: shows the plan, Enter applies it, Esc cancels; m moves its memory too"),
    ("u", "undo the last pin affmon made (asks first)"),
    ("T", "tune the selected process's job: tries placements, keeps the best (asks first; Esc stops and restores)"),
    ("/", "filter by PID, name, command, user, scheduler or finding code (Enter keeps it, Esc clears it)"),
    (
        "s",
        "next sort: findings → CPU % → wait % → PID → every other column; the sorted column's header shows ▼; "
        "rows whose CPU % or wait % differ by 1 point or less (or 2%) keep their places",
    ),
    ("F6", "every column to sort by, the sorted one marked (Enter sorts, Esc keeps)"),
    ("I", "reverse the sort (▲)"),
    ("a", "all processes ↔ training processes only"),
    ("t", "show or hide thread rows"),
    ("p", "pause or resume sampling"),
    ("R", "replay: play the recording again from its start"),
    ("F9  k", "nothing: affmon never kills or signals a process; r re-pins, u undoes"),
    ("?  h  F1", "this help"),
    ("q  F10", "quit"),
)

COLUMNS = (
    ("PID", "the process id, coloured by its worst finding"),
    (
        "COMMAND",
        "the process tree (launcher → ranks → DataLoader workers) in its job's colour; "
        "[slurm 4242.0 rank 1] names the scheduler that placed it",
    ),
    ("CPU%", "CPU time over the interval, 100 = one CPU busy"),
    ("WAIT", "run-queue wait / (run + wait), from schedstat: below 10% healthy, 10% warn, 25% bad"),
    ("RAN ON", "the CPUs its threads last ran on in the interval (a lower bound)"),
    ("MASK", "the main thread's affinity (* when some threads differ)"),
    (
        "FINDINGS",
        "STARV starved · NARROW mask too narrow · CONTEND contended · XNUMA cross-NUMA · "
        "GPUSTV GPU starved · PCIE link degraded · DRIFT pin lost; bold: raised on it, plain: its job's",
    ),
    (
        "LOOP",
        "what its training loop waited on (probed ranks only): GPU (healthy), data (DataLoader batches), "
        "CPU (the Python loop itself), cpu-wait (runnable, no CPU free), mixed, - (not measurable)",
    ),
    ("GPU", "the GPUs it holds (NVML), by index"),
    ("THR", "its threads"),
    ("SW/s", "voluntary + involuntary context switches per second"),
    ("MIG/s", "migrations between CPUs per second"),
    ("NODE", "the NUMA nodes it ran on"),
    ("USER", "its owner"),
)

CORE_MAP = (
    ("bar", "how busy the CPU was (· idle, ▁ to █)"),
    ("colour", "the job that ran there; muted: other processes"),
    ("shared", "on a red background: two jobs, or a job and another busy process, shared it"),
    ("CPU id", "reversed: the selected process ran there; dim: outside its mask; underlined: local to its GPU"),
)

SECTION_STYLE = "bold"
KEY_STYLE = "bold"


def grid(rows: tuple[tuple[str, str], ...], key_width: int) -> Table:
    """Keys in one column, explanations wrapping inside the other."""
    table = Table.grid(padding=(0, 2))
    table.add_column(width=key_width, no_wrap=True, style=KEY_STYLE)
    table.add_column(ratio=1)
    for key, text in rows:
        table.add_row(key, text)
    return table


def help_renderable() -> RenderableType:
    return Group(
        Text("Keys", style=SECTION_STYLE),
        grid(KEYS, 12),
        Text(""),
        Text("Columns", style=SECTION_STYLE),
        grid(COLUMNS, 9),
        Text(""),
        Text("Core map", style=SECTION_STYLE),
        grid(CORE_MAP, 9),
        Text(""),
        Text("Esc, q or ? closes this help; ↑ ↓ scroll it", style="dim"),
    )


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close"),
        Binding("question_mark", "close", "Close"),
        Binding("q", "close", "Close"),
        Binding("h", "close", "Close", show=False),
        Binding("f1", "close", "Close", show=False),
    ]

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"), VerticalScroll(id="dialog-body"):
            yield Static(help_renderable(), id="dialog-text")

    def on_mount(self) -> None:
        self.query_one("#dialog-body").focus()  # arrows scroll the help

    def action_close(self) -> None:
        self.dismiss(None)
