"""The fleet view: ``FleetApp`` with its own screens, built with its readers passed in (tests
build it from recorded answers), in Textual as the monitor is, with the monitor's palette,
cell formats and process table.

``FleetScreen``: the jobs, worst first (ranks, nodes, GPUs, wait, GPU busy, the loop's
shares, findings with their age), and the nodes, worst first (stale ones on top, said so).
Enter on a node, or on a job (its first rank's node), opens ``NodeScreen``: that node's
processes as the local monitor's table shows them, from the metrics, and the selected one's
figures. Reading runs in a thread worker, one at a time; the next refresh is scheduled only
when the last one has ended, so refreshes never overlap. A failed refresh keeps the last
figures on screen and says, on the status line, why and how old they are.

Every label from Prometheus reaches the screen through ``term_safe`` (``affmon.fleet.text``
and the rows built here); cells are Rich ``Text``, never markup.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from affmon.core import fmt
from affmon.core.errors import AffmonError
from affmon.core.model.domains import plural
from affmon.core.text import term_safe
from affmon.fleet.model import Fleet, FleetFinding, Job, Node, NodeProcess, age_text
from affmon.fleet.source import Cost
from affmon.fleet.text import (
    JOB_COLUMNS,
    NODE_COLUMNS,
    finding_text,
    grouped,
    job_cells,
    node_cells,
    shares_text,
    summary,
)
from affmon.tui.model.table import TableRow, process_key
from affmon.tui.model.views import FindingMark, ProcessRow
from affmon.tui.palette import Palette, palette
from affmon.tui.widgets.processes import ProcessTable

FleetReader = Callable[[], tuple[Fleet, Cost]]
NodeReader = Callable[[str], Sequence[NodeProcess]]

CSS = """
#fleet-header, #node-header { height: 1; padding: 0 1; background: $panel; color: $foreground; }
#fleet-status, #node-status { height: 1; padding: 0 1; color: $foreground-muted; }
#fleet-status.-error, #node-status.-error { color: $error; text-style: bold; }
.pane { height: 1fr; border: round $primary 50%; border-title-color: $primary-lighten-2; border-title-style: bold; }
.pane > DataTable { height: 1fr; overflow-x: hidden; scrollbar-size-vertical: 1; }
#node-detail { height: auto; max-height: 8; padding: 0 1; border-top: solid $primary 50%; }
"""
CELL_PADDING = 1
# Columns dropped, first first, when the terminal is too narrow for all of them.
JOB_DROP = ("loop", "nodes", "ranks", "busy")
NODE_DROP = ("busy", "gpus")


def fit_columns(
    columns: Sequence[tuple[str, str, int]], width: int, drop: Sequence[str], needs: dict[str, int]
) -> list[tuple[str, str, int]]:
    """The columns that fit ``width`` cells: the first sized to its widest cell (``needs``,
    up to 32), the last takes what is left; ``drop`` names which go first when short."""
    sizes = {key: w for key, _, w in columns}
    first, last = columns[0][0], columns[-1][0]
    sizes[first] = max(len(columns[0][1]), min(32, needs.get(first, sizes[first])))
    kept = [key for key, _, _ in columns]

    def used() -> int:
        return sum(sizes[k] + 2 * CELL_PADDING for k in kept if k != last) + 2 * CELL_PADDING

    for key in drop:
        if width - used() >= sizes[last]:
            break
        kept.remove(key)
    sizes[last] = max(12, width - used())
    return [(key, label, sizes[key]) for key, label, _ in columns if key in kept]


def _severity_text(findings: Sequence[FleetFinding], p: Palette, none: str = "none") -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    for i, (f, count) in enumerate(grouped(findings)):
        if i:
            text.append(", ")
        text.append(finding_text(f, count), style=f"bold {p.severity(f.severity)}")
    if not findings:
        text.append(none, style=p.success)
    return text


class Refreshed(Message):
    """A refresh ended: a fleet and its cost, or why it failed."""

    def __init__(self, reading: tuple[Fleet, Cost] | None, error: str | None) -> None:
        super().__init__()
        self.reading = reading
        self.error = error


class NodeRead(Message):
    def __init__(self, instance: str, processes: Sequence[NodeProcess] | None, error: str | None) -> None:
        super().__init__()
        self.instance = instance
        self.processes = processes
        self.error = error


def _message(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, AffmonError) else f"{type(exc).__name__}: {exc}"


class FleetScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open", "Node", show=True),
        Binding("tab", "focus_next", "Jobs/Nodes", show=True),
        Binding("r", "refresh_now", "Refresh"),
        Binding("q", "app.quit", "Quit"),
    ]

    def compose(self) -> ComposeResult:
        yield Static(id="fleet-header")
        yield Static(id="fleet-status")
        with Vertical(classes="pane", id="jobs-pane") as jobs:
            jobs.border_title = "Jobs, worst first"
            yield DataTable(id="jobs", cursor_type="row", cell_padding=CELL_PADDING)
        with Vertical(classes="pane", id="nodes-pane") as nodes:
            nodes.border_title = "Nodes, worst first"
            yield DataTable(id="nodes", cursor_type="row", cell_padding=CELL_PADDING)
        yield Footer()

    def action_refresh_now(self) -> None:
        app = self.app
        assert isinstance(app, FleetApp)
        app.refresh_now()

    def action_open(self) -> None:
        app = self.app
        assert isinstance(app, FleetApp)
        app.open_selected()

    @on(DataTable.RowSelected)
    def _selected(self, _: DataTable.RowSelected) -> None:
        self.action_open()

    def show(self, fleet: Fleet, cost: Cost, url: str, error: str | None, p: Palette) -> None:
        when = time.strftime("%H:%M:%S", time.localtime(fleet.at))
        header = Text(no_wrap=True, overflow="ellipsis")
        header.append("affmon fleet", style="bold")
        header.append(f"  {summary(fleet)}  ")
        header.append(f"Prometheus {term_safe(url)} at {when}, {cost.queries} queries {cost.seconds * 1000:.0f} ms")
        self.query_one("#fleet-header", Static).update(header)
        status = self.query_one("#fleet-status", Static)
        if error is not None:
            age = age_text(time.time() - fleet.at)
            status.update(Text(f"{term_safe(error)}; the figures below were read at {when} ({age} ago)"))
            status.add_class("-error")
        else:
            stale = [n for n in fleet.nodes if n.stale]
            words = (
                f"{len(stale)} node{'s' if len(stale) != 1 else ''} stale: their findings are unknown" if stale else ""
            )
            status.update(
                Text(words or "Enter: a node's processes · Tab: jobs or nodes", style=p.error if stale else "")
            )
            status.set_class(bool(stale), "-error")
        self._fill_jobs(fleet, p)
        self._fill_nodes(fleet, p)

    def _fill(
        self, table: DataTable[Any], layout: list[tuple[str, str, int]], rows: list[tuple[str, list[Text]]]
    ) -> None:
        keep = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value if table.row_count else None
        columns = tuple((label, width) for _, label, width in layout)
        if getattr(table, "_fleet_layout", None) != columns:
            table.clear(columns=True)
            for label, width in columns:
                table.add_column(label, width=width)
            table._fleet_layout = columns  # type: ignore[attr-defined]
        else:
            table.clear()
        for key, cells in rows:
            table.add_row(*cells, key=key)
        keys = [key for key, _ in rows]
        if keep in keys:
            table.move_cursor(row=keys.index(keep), animate=False)

    def _fill_jobs(self, fleet: Fleet, p: Palette) -> None:
        table = self.query_one("#jobs", DataTable)
        cells = [job_cells(j) for j in fleet.jobs]
        keys = [key for key, _, _ in JOB_COLUMNS]
        needs = {"job": max((len(c[0]) for c in cells), default=0)}
        layout = fit_columns(JOB_COLUMNS, table.size.width - 1 or 78, JOB_DROP, needs)
        shown = [keys.index(k) for k, _, _ in layout]
        rows = []
        for index, (job, row) in enumerate(zip(fleet.jobs, cells, strict=True)):
            styled = [self._job_cell(keys[i], row[i], job, index, p) for i in shown]
            rows.append((job.key, styled))
        self._fill(table, layout, rows)

    @staticmethod
    def _job_cell(key: str, text: str, job: Job, index: int, p: Palette) -> Text:
        if key == "findings":
            return _severity_text(job.findings, p)
        if key == "job":
            return Text(text, style=f"bold {p.job(index)}", no_wrap=True, overflow="ellipsis")
        justify = "left" if key == "loop" else "right"
        return Text(text, justify=justify, no_wrap=True, overflow="ellipsis")  # type: ignore[arg-type]

    def _fill_nodes(self, fleet: Fleet, p: Palette) -> None:
        table = self.query_one("#nodes", DataTable)
        cells = [node_cells(n) for n in fleet.nodes]
        keys = [key for key, _, _ in NODE_COLUMNS]
        needs = {"node": max((len(c[0]) for c in cells), default=0)}
        layout = fit_columns(NODE_COLUMNS, table.size.width - 1 or 78, NODE_DROP, needs)
        shown = [keys.index(k) for k, _, _ in layout]
        rows = []
        for node, row in zip(fleet.nodes, cells, strict=True):
            rows.append((node.instance, [self._node_cell(keys[i], row[i], node, p) for i in shown]))
        self._fill(table, layout, rows)

    @staticmethod
    def _node_cell(key: str, text: str, node: Node, p: Palette) -> Text:
        if key == "findings":
            if node.stale:
                return Text(text, style=f"bold {p.error}", no_wrap=True, overflow="ellipsis")
            return _severity_text(node.findings, p)
        if key == "state":
            return Text(text, style=f"bold {p.error}" if node.stale else p.success, no_wrap=True)
        justify = "left" if key == "node" else "right"
        return Text(text, justify=justify, no_wrap=True, overflow="ellipsis")  # type: ignore[arg-type]

    def selected_instance(self, fleet: Fleet) -> str | None:
        """The node under the cursor: of the nodes table, or the first rank's of a job."""
        focused = self.focused
        table = focused if isinstance(focused, DataTable) else self.query_one("#jobs", DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        if table.id == "nodes":
            return key
        job = next((j for j in fleet.jobs if j.key == key), None)
        return job.ranks[0].instance if job is not None and job.ranks else None


def node_rows(processes: Sequence[NodeProcess], findings: Sequence[FleetFinding]) -> tuple[TableRow, ...]:
    """A node's processes as the monitor's table rows: each rank, its workers below it as a
    tree, then the processes of no training job; findings marked on the job's root."""
    marks: dict[int, list[FindingMark]] = {}
    for f in findings:
        if f.pid is not None:
            marks.setdefault(f.pid, []).append(FindingMark(f.code, f.severity))
    rows = []
    for i, p in enumerate(processes):
        worker = p.role == "worker"
        last = worker and (i + 1 == len(processes) or processes[i + 1].job_pid != p.job_pid)
        row = ProcessRow(
            pid=p.pid,
            ppid=p.job_pid if worker else None,
            name=term_safe(p.name),
            cmdline=None,
            user=term_safe(p.user) or None,
            role=p.role,
            job_pid=p.job_pid,
            gpus=p.gpus,
            threads=p.threads or 0,
            cpu_percent=p.cpu_percent,
            ran_on_cpus=frozenset(),  # the metrics carry how many, not which
            ran_on_nodes=(),
            mask=None,
            mask_varies=False,
            wait_ratio=p.wait_ratio,
            switches_per_s=p.switches_per_s,
            migrations_per_s=p.migrations_per_s,
            findings=tuple(marks.get(p.pid, ())) if p.role == "rank" else (),
            watched=True,
            training=p.training,
        )
        prefix = ("└─ " if last else "├─ ") if worker else ""
        rows.append(TableRow(process_key(p.pid), 1 if worker else 0, prefix, process=row))
    return tuple(rows)


def process_detail(p: NodeProcess | None, findings: Sequence[FleetFinding], pal: Palette) -> Text:
    """The selected process's figures, as far as the metrics tell them."""
    if p is None:
        return Text("select a process to see its figures", style=pal.muted)
    out = Text()
    out.append(f"{p.pid} {term_safe(p.name)}", style="bold")
    job = {"rank": "training rank", "worker": f"worker of {p.job_pid}"}.get(p.role, "not in a training job")
    gpus = f" · GPU {','.join(map(str, p.gpus))}" if p.gpus else ""
    out.append(f"  {job}{gpus} · {p.threads if p.threads is not None else '?'} threads", style=pal.muted)
    out.append(f" · user {term_safe(p.user) or '?'}\n", style=pal.muted)
    out.append("mask ", style=pal.muted)
    out.append(f"{p.mask_cpus if p.mask_cpus is not None else '?'} CPUs")
    out.append("   ran on ", style=pal.muted)
    out.append(plural(p.nodes_run_on, "NUMA node") if p.nodes_run_on is not None else "? NUMA nodes")
    if p.context:
        out.append("   placed by ", style=pal.muted)
        out.append(term_safe(p.context))
    out.append("\n")
    if p.shares or p.gpu_busy is not None:
        out.append("loop ", style=pal.muted)
        out.append(f"GPU busy {fmt.ratio_percent(p.gpu_busy)}; loop: {shares_text(p.shares)}\n")
    own = [f for f in findings if f.pid is not None and f.pid in (p.pid, p.job_pid)]
    if own:
        out.append("findings ", style=pal.muted)
        out.append_text(_severity_text(own, pal))
        out.append("  (affmon diagnose on the node says why)", style=pal.muted)
    return out


class NodeScreen(Screen[None]):
    """One node's processes, read from Prometheus every refresh of the fleet."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("q", "app.pop_screen", "Back", show=False),
    ]

    def __init__(self, instance: str) -> None:
        super().__init__()
        self.instance = instance
        self.processes: tuple[NodeProcess, ...] = ()

    def compose(self) -> ComposeResult:
        yield Static(Text(f"node {term_safe(self.instance)}", style="bold"), id="node-header")
        yield Static(Text("reading its processes from Prometheus..."), id="node-status")
        with Vertical(classes="pane") as pane:
            pane.border_title = "Processes, from the metrics"
            yield ProcessTable(id="node-processes")
        yield Static(id="node-detail")
        yield Footer()

    def show(self, processes: Sequence[NodeProcess] | None, error: str | None, fleet: Fleet, p: Palette) -> None:
        status = self.query_one("#node-status", Static)
        node = fleet.node(self.instance)
        if error is not None:
            status.update(Text(term_safe(error)))
            status.add_class("-error")
        elif node is not None and node.stale:
            status.update(Text(f"{node.stale}; the last figures Prometheus has are shown"))
            status.add_class("-error")
        else:
            count = len(processes or self.processes)
            status.update(Text(f"{count} watched processes; MASK and RAN ON: the metrics carry only their sizes"))
            status.remove_class("-error")
        if processes is not None:
            self.processes = tuple(processes)
        findings = node.findings if node is not None else ()
        table = self.query_one(ProcessTable)
        ranks = [q.pid for q in self.processes if q.role == "rank"]
        colors = {pid: p.job(i) for i, pid in enumerate(ranks)}
        table.show(node_rows(self.processes, findings), p, colors)
        self.show_selected(fleet, p)

    def show_selected(self, fleet: Fleet, p: Palette) -> None:
        key = self.query_one(ProcessTable).selected_key
        chosen = next((q for q in self.processes if process_key(q.pid) == key), None)
        node = fleet.node(self.instance)
        self.query_one("#node-detail", Static).update(process_detail(chosen, node.findings if node else (), p))

    @on(DataTable.RowHighlighted)
    def _highlighted(self, _: DataTable.RowHighlighted) -> None:
        app = self.app
        if isinstance(app, FleetApp) and app.fleet is not None:
            self.show_selected(app.fleet, app.pal)


class FleetApp(App[None]):
    CSS = CSS
    TITLE = "affmon fleet"

    def __init__(
        self,
        read: FleetReader,
        read_node: NodeReader,
        *,
        url: str,
        interval_s: float,
        first: tuple[Fleet, Cost] | None = None,
        autostart: bool = True,
    ) -> None:
        """``read``: one refresh of the fleet (raises ``AffmonError``); ``read_node``: one
        node's processes. ``first``: a reading made already (the command's, before drawing).
        ``autostart`` False: no refresh is scheduled (tests show a recorded fleet)."""
        super().__init__()
        self.read = read
        self.read_node = read_node
        self.url = url
        self.interval_s = interval_s
        self.autostart = autostart
        self.fleet: Fleet | None = first[0] if first else None
        self.cost: Cost | None = first[1] if first else None
        self.error: str | None = None
        self._reading = False

    def get_default_screen(self) -> Screen[Any]:
        return FleetScreen(id="_default")

    @property
    def pal(self) -> Palette:
        return palette(self)

    def on_mount(self) -> None:
        if self.fleet is None:
            self.refresh_now()
        else:
            self.call_after_refresh(self._show)
            if self.autostart:
                self.set_timer(self.interval_s, self.refresh_now)

    def on_resize(self) -> None:
        self.call_after_refresh(self._show)

    def refresh_now(self) -> None:
        if self._reading:
            return
        self._reading = True
        self._refresh_worker()
        node = self.screen if isinstance(self.screen, NodeScreen) else None
        if node is not None:
            self._node_worker(node.instance)

    @work(thread=True, exclusive=True, group="fleet", exit_on_error=False)
    def _refresh_worker(self) -> None:
        try:
            reading = self.read()
        except Exception as exc:  # every failure is said on the status line, never a traceback
            self.post_message(Refreshed(None, _message(exc)))
            return
        self.post_message(Refreshed(reading, None))

    @work(thread=True, exclusive=True, group="node", exit_on_error=False)
    def _node_worker(self, instance: str) -> None:
        try:
            processes = self.read_node(instance)
        except Exception as exc:
            self.post_message(NodeRead(instance, None, _message(exc)))
            return
        self.post_message(NodeRead(instance, processes, None))

    @on(Refreshed)
    def _refreshed(self, message: Refreshed) -> None:
        self._reading = False
        self.error = message.error
        if message.reading is not None:
            self.fleet, self.cost = message.reading
        self._show()
        if self.autostart:
            self.set_timer(self.interval_s, self.refresh_now)

    @on(NodeRead)
    def _node_read(self, message: NodeRead) -> None:
        screen = self.screen
        if isinstance(screen, NodeScreen) and screen.instance == message.instance and self.fleet is not None:
            screen.show(message.processes, message.error, self.fleet, self.pal)

    def _show(self) -> None:
        screen = self.screen_stack[0]
        if isinstance(screen, FleetScreen) and self.fleet is not None and self.cost is not None:
            screen.show(self.fleet, self.cost, self.url, self.error, self.pal)
        elif isinstance(screen, FleetScreen) and self.error is not None:
            screen.query_one("#fleet-status", Static).update(Text(term_safe(self.error), style=self.pal.error))

    def open_selected(self) -> None:
        screen = self.screen
        if not isinstance(screen, FleetScreen) or self.fleet is None:
            return
        instance = screen.selected_instance(self.fleet)
        if instance is None:
            return
        node = NodeScreen(instance)
        self.push_screen(node)
        self._node_worker(instance)
