"""The main screen's widgets, made once with the app and kept: the monitor reaches each
of them by name every tick, where a Textual query (``query_one``) costs a few
microseconds a call on a two-core VM and a tick made twenty of them. ``lean_tables``: the
tables with ``textual_fast.LeanTable`` under them (the ``table`` override)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Footer, Input

from affmon.tui.textual_fast import table_class
from affmon.tui.widgets.cores import CoreMap
from affmon.tui.widgets.detail import DetailText, ProcessPlot, ThreadTable
from affmon.tui.widgets.gpus import GpuPanel, GpuPlot
from affmon.tui.widgets.header import HeaderBar
from affmon.tui.widgets.processes import ProcessTable
from affmon.tui.widgets.quiet import QuietStatic


class Panes:
    def __init__(self, lean_tables: bool = False) -> None:
        self.header = HeaderBar(id="header")
        self.banner = QuietStatic(id="banner")
        self.gpu_row = Horizontal(id="gpu-row")
        self.gpus = GpuPanel(id="gpus")
        self.gpu_plot = GpuPlot(id="gpu-plot")
        self.main = Horizontal(id="main")
        self.empty = QuietStatic(id="empty")
        self.table = table_class(ProcessTable, lean_tables)(id="processes")
        self.cores_pane = VerticalScroll(id="cores-pane")  # arrows scroll it once Tab gives it focus
        self.cores = CoreMap(id="cores")
        self.detail = Horizontal(id="detail")
        self.detail_text_pane = VerticalScroll(id="detail-text-pane")
        self.detail_text = DetailText(id="detail-text")
        self.threads = table_class(ThreadTable, lean_tables)(id="threads")
        self.proc_plot = ProcessPlot(id="proc-plot")
        self.status = QuietStatic(id="status")
        self.filter = Input(placeholder="filter: PID, name, command, user or finding code", id="filter")
        self.footer = Footer()

    def compose(self) -> ComposeResult:
        yield self.header
        yield self.banner
        with self.gpu_row:
            yield self.gpus
            yield self.gpu_plot
        with self.main:
            yield self.empty
            yield self.table
            with self.cores_pane:
                yield self.cores
        with self.detail:
            with self.detail_text_pane:
                yield self.detail_text
            yield self.threads
            yield self.proc_plot
        yield self.status
        yield self.filter
        yield self.footer
