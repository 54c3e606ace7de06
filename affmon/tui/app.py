"""``AffmonApp``: the TUI. Built with its source and pinner passed in, so tests build it
from a recording with a fake pinner.

Sampling runs in a thread worker: it takes one sample, feeds the ``Monitor`` (owned by
that worker alone) and posts the immutable ``View`` it returns. The next tick is
scheduled only when the current one has finished, so a slow tick (NVML, thousands of
threads) delays the next one and never piles up; it is due one interval after the
current one's sample *started*, so a tick that costs 100 ms still leaves 1 s between
samples at ``--interval 1`` (counted from its end, the monitor kept 1.1 s and fell
behind). Live, the first sample is read while Textual starts, and shown at once as a
first look (``Monitor.first_look``: no rates) until the first interval closes.
Everything else here is the UI thread: it lays the view out, keeps view state
(selection, sort, filter, toggles) and asks the pinner only after a confirmation screen.
The status line shows errors and findings' messages through ``term_safe`` (a bad
recording's error quotes its text).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.css.query import NoMatches
from textual.message import Message
from textual.timer import Timer
from textual.widgets import DataTable, Footer, Input
from textual.worker import Worker, WorkerState

from affmon.core.errors import AffmonError
from affmon.core.fmt import term_safe
from affmon.core.samples import Sample
from affmon.sources.stream import LiveSource, Source
from affmon.tui.model.monitor import HISTORY_LEN, Monitor
from affmon.tui.model.table import SORTS, TableOptions, next_sort, process_key, table_rows
from affmon.tui.model.views import ProcessRow, View, thread_rows
from affmon.tui.palette import Palette, palette
from affmon.tui.pinner import Pinner
from affmon.tui.screens import HelpScreen, PinScreen, UndoScreen
from affmon.tui.widgets.cores import CoreMap
from affmon.tui.widgets.detail import DetailText, ProcessPlot, ThreadTable
from affmon.tui.widgets.gpus import GpuPanel, GpuPlot
from affmon.tui.widgets.header import HeaderBar
from affmon.tui.widgets.processes import ProcessTable
from affmon.tui.widgets.quiet import QuietStatic

FIRST_INTERVAL_S = 0.5  # live: the first view covers this interval, then --interval
MIN_DELAY_S = 0.01  # Textual's timers need a period; a tick that overran starts the next this soon


def next_delay(pace_s: float, started_s: float, now_s: float) -> float:
    """Seconds from ``now_s`` until the next tick: ``pace_s`` after the last one started
    (``started_s``), at least ``MIN_DELAY_S``: a tick that took longer than the interval
    is followed at once, never overlapped."""
    return max(MIN_DELAY_S, pace_s - max(0.0, now_s - started_s))


class ViewReady(Message):
    """A new view from the sampler thread."""

    def __init__(self, view: View) -> None:
        super().__init__()
        self.view = view


class AffmonApp(App[None]):
    CSS_PATH = "affmon.tcss"
    TITLE = "affmon"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "repin", "Re-pin"),
        Binding("u", "undo", "Undo"),
        Binding("slash", "filter", "Filter"),
        Binding("s", "sort", "Sort"),
        Binding("a", "toggle_all", "All/training"),
        Binding("t", "toggle_threads", "Threads"),
        Binding("p", "pause", "Pause"),
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]  # noqa: RUF012 (Textual declares it)
    VERTICAL_BREAKPOINTS = [(0, "-short"), (32, "-medium"), (44, "-tall")]  # noqa: RUF012

    def __init__(
        self,
        source: Source,
        pinner: Pinner,
        interval: float | None = None,
        focus_pid: int | None = None,
        clock: Callable[[], float] = time.time,
        *,
        autostart: bool = True,
        history_len: int = HISTORY_LEN,
    ) -> None:
        """``interval``: seconds between ticks (None: the source's pace, a replay's
        recorded one divided by its speed). ``autostart`` False: no tick runs until
        ``tick()`` is called (tests step through a recording)."""
        super().__init__()
        self.source = source
        self.pinner = pinner
        self.interval = interval
        self.clock = clock
        self.autostart = autostart
        self.monitor = Monitor(source.topology, source.info, history_len=history_len)
        self.view: View | None = None
        self.options = TableOptions()
        self.paused = False
        self.selected_pid: int | None = focus_pid
        self._pending_select: str | None = process_key(focus_pid) if focus_pid is not None else None
        self._timer: Timer | None = None
        self._ticking = False
        self._tick_started_s = 0.0  # when the newest sample's reading started (written by the thread reading it)
        self._error: str | None = None
        self._note = ""
        self._palette: Palette | None = None
        self._panes_shown: tuple[object, ...] | None = None  # what the side panes were last built from
        self._early: Future[Sample | None] | None = None
        if autostart and isinstance(source, LiveSource):
            # The first sample is read while Textual starts (imports done, CSS, layout: a few
            # hundred ms): the first tick takes it from here instead of reading it then.
            self._early = Future()
            threading.Thread(target=self._read_early, name="affmon-first-sample", daemon=True).start()

    # -- layout ---------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        with Horizontal(id="gpu-row"):
            yield GpuPanel(id="gpus")
            yield GpuPlot(id="gpu-plot")
        with Horizontal(id="main"):
            yield ProcessTable(id="processes")
            yield CoreMap(id="cores")
        with Horizontal(id="detail"):
            yield DetailText(id="detail-text")
            yield ThreadTable(id="threads")
            yield ProcessPlot(id="proc-plot")
        yield QuietStatic(id="status")
        yield Input(placeholder="filter: PID, name, command, user or finding code", id="filter")
        yield Footer()

    @property
    def pal(self) -> Palette:
        if self._palette is None:
            self._palette = palette(self)
        return self._palette

    def on_mount(self) -> None:
        self.query_one("#gpu-row").border_title = "GPUs"
        self.query_one("#main").border_title = "Processes"
        self.query_one("#cores").border_title = "Core map"
        self.query_one("#detail").border_title = "Selected process"
        self.query_one(HeaderBar).show(None, paused=False, palette=self.pal, loading="taking the first samples…")
        self.query_one(ProcessTable).focus()
        self._show_status()
        if self.autostart:
            self.tick()

    def on_unmount(self) -> None:
        self.source.close()

    # -- sampling -------------------------------------------------------------------

    def tick(self) -> Worker[None] | None:
        """Start one tick now (unless one is running); the next is scheduled when it ends."""
        if self._ticking:
            return None
        self._ticking = True
        return self._sample()

    def _read_early(self) -> None:
        assert self._early is not None
        self._tick_started_s = time.monotonic()
        try:
            self._early.set_result(self.source.next_sample())
        except BaseException as exc:  # the first tick raises it, as if it had read the sample itself
            self._early.set_exception(exc)

    def _next_sample(self) -> Sample | None:
        """The next sample, noting when its reading started: the next tick is due one
        interval after that (a first sample read early counts from when it was read, so the
        first interval stays FIRST_INTERVAL_S however long Textual took to start)."""
        early, self._early = self._early, None
        if early is not None:
            return early.result()
        self._tick_started_s = time.monotonic()
        return self.source.next_sample()

    @work(thread=True, exclusive=True, group="sampler", exit_on_error=False)
    def _sample(self) -> None:
        # A replay's first tick takes two samples: a view needs an interval. Live, two
        # samples taken back to back would give rates over a tenth of a second: the first
        # view waits for the next tick, FIRST_INTERVAL_S later, and meanwhile the screen
        # shows what one sample can (processes, masks, threads; every rate unknown).
        live = isinstance(self.source, LiveSource)
        for _ in range(1 if live else 2):
            sample = self._next_sample()
            if sample is None:
                return
            view = self.monitor.feed(sample, self.source.expected_masks(), finished=self.source.exhausted)
            if view is None and live and self.monitor.samples_seen == 1:
                view = self.monitor.first_look(sample)
            if view is not None:
                self.post_message(ViewReady(view))
                return

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "sampler" or event.state not in (
            WorkerState.SUCCESS,
            WorkerState.ERROR,
            WorkerState.CANCELLED,
        ):
            return
        self._ticking = False
        if event.state == WorkerState.ERROR:
            self._error = f"sampling failed: {event.worker.error}"
            self._show_status()
            if self.source.info.source == "live":
                self._schedule()  # try again next interval; a replay's bad line stays bad
            return
        self._schedule()

    def _schedule(self) -> None:
        if not self.autostart or self.paused or self.source.exhausted:
            return
        pace = self.interval if self.interval is not None else self.source.pace_s()
        if (self.view is None or not self.view.measured) and isinstance(self.source, LiveSource):
            pace = min(pace, FIRST_INTERVAL_S)  # the first view sooner, over a real interval
        self._timer = self.set_timer(next_delay(pace, self._tick_started_s, time.monotonic()), self.tick)

    @on(ViewReady)
    def _on_view(self, message: ViewReady) -> None:
        self.view = message.view
        self._error = None
        with contextlib.suppress(NoMatches):  # a tick that lands while the app closes: its widgets are gone
            self._render_view()

    # -- rendering ------------------------------------------------------------------

    def _job_colors(self, view: View) -> dict[int, str]:
        return {pid: self.pal.job(i) for i, pid in enumerate(view.jobs)}

    def _render_view(self) -> None:
        view = self.view
        if view is None:
            return
        p = self.pal
        with self.batch_update():
            self.query_one(HeaderBar).show(view.header, paused=self.paused, palette=p)
            # No GPU (no NVML, or none found): the header says so; the panel's lines go to the table.
            gpu_row = self.query_one("#gpu-row")
            if gpu_row.display != bool(view.gpus):
                gpu_row.display = bool(view.gpus)
            self.query_one(GpuPanel).show(view.gpus, p, view.header.nvml_status)
            self.query_one(GpuPlot).show(view.gpu_history, p)  # drawn only where it can be seen
            table = self.query_one(ProcessTable)
            rows = table_rows(view, self.options)
            select = self._pending_select
            table.show(rows, p, self._job_colors(view), select=select)
            if select is not None and table.selected_key == select:
                self._pending_select = None
            self._selection_changed()

    def selected_row(self) -> ProcessRow | None:
        if self.view is None or self.selected_pid is None:
            return None
        return self.view.process(self.selected_pid)

    def _selection_changed(self) -> None:
        view = self.view
        if view is None:
            return
        key = self.query_one(ProcessTable).selected_key
        if key is not None:
            self.selected_pid = int(key.split(":")[1])
        detail = self.query_one("#detail")
        shown = (view, self.selected_pid, detail.display)
        if self._panes_shown is not None and view is self._panes_shown[0] and shown[1:] == self._panes_shown[1:]:
            self._show_status()
            return  # the same view and selection (the table's cursor event after a tick): panes as they are
        self._panes_shown = shown
        row = self.selected_row()
        p = self.pal
        self.query_one(CoreMap).show(view.cores, p, self._job_colors(view), row, view.measured)
        if detail.display:
            pid = row.pid if row else None
            findings = view.findings_of(pid) if pid is not None else ()
            self.query_one(DetailText).show(row, findings, p, view.measured)
            self.query_one(ThreadTable).show(thread_rows(view.snapshot, pid) if pid is not None else (), p)
            self.query_one(ProcessPlot).show(pid, view.process_history)
            title = f"Selected process {pid}" if pid else "Selected process"
            if detail.border_title != title:
                detail.border_title = title
        self._show_status()

    @on(DataTable.RowHighlighted, "#processes")
    def _on_highlight(self, _: DataTable.RowHighlighted) -> None:
        self._selection_changed()

    def _show_status(self) -> None:
        p = self.pal
        o = self.options
        parts = [
            f"sort {SORTS[o.sort]}",
            "training processes" if o.training_only else "all processes",
            f"threads {'on' if o.show_threads else 'off'}",
        ]
        if o.filter_text:
            parts.append(f"filter: {o.filter_text!r}")
        if self.paused:
            parts.append("PAUSED")
        text = " · ".join(parts)
        row = self.selected_row()
        worst = self.view.findings_of(row.pid)[0] if self.view and row and self.view.findings_of(row.pid) else None
        status = Text(term_safe(text), no_wrap=True, overflow="ellipsis")
        if self._error:
            status = Text(term_safe(self._error), style=p.error)
        elif self._note:
            status.append(f" · {term_safe(self._note)}")
        elif worst is not None:
            status.append(" · ")
            status.append(worst.code, style=p.severity(worst.severity))
            status.append(f": {term_safe(worst.message)}")
        self.query_one("#status", QuietStatic).put(status)

    # -- actions --------------------------------------------------------------------

    def action_sort(self) -> None:
        self.options = TableOptions(
            next_sort(self.options.sort),
            self.options.training_only,
            self.options.show_threads,
            self.options.filter_text,
        )
        self._render_view()
        self._show_status()

    def action_toggle_all(self) -> None:
        o = self.options
        self.options = TableOptions(o.sort, not o.training_only, o.show_threads, o.filter_text)
        self._render_view()
        self._show_status()

    def action_toggle_threads(self) -> None:
        o = self.options
        self.options = TableOptions(o.sort, o.training_only, not o.show_threads, o.filter_text)
        self._render_view()
        self._show_status()

    def action_pause(self) -> None:
        self.paused = not self.paused
        if self.paused and self._timer is not None:
            self._timer.stop()
            self._timer = None
        elif not self.paused and self.autostart and not self._ticking:
            self.tick()
        if self.view is not None:
            self.query_one(HeaderBar).show(self.view.header, paused=self.paused, palette=self.pal)
        self._show_status()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = self.options.filter_text
        box.display = True
        box.focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        o = self.options
        self.options = TableOptions(o.sort, o.training_only, o.show_threads, event.value)
        self._render_view()
        self._show_status()

    @on(Input.Submitted, "#filter")
    def _filter_done(self, _: Input.Submitted) -> None:
        self.query_one("#filter", Input).display = False
        self.query_one(ProcessTable).focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        if box.display or self.options.filter_text:
            box.value = ""  # Input.Changed clears the filter
            box.display = False
            self.query_one(ProcessTable).focus()

    def action_repin(self) -> None:
        view = self.view
        row = self.selected_row()
        if view is None or row is None:
            self.notify("select a process first", severity="warning")
            return
        if not view.measured:
            self.notify("no interval measured yet: the plan needs its rates", severity="warning")
            return
        proposal = self.pinner.propose(view.snapshot, row.pid)
        if proposal is None:
            self.notify(f"process {row.pid} is gone", severity="warning")
            return
        if not proposal.suggestion.cpus:
            self.notify("affmon has no CPUs to suggest for it", severity="warning")
            return
        self.push_screen(PinScreen(proposal, self.pinner, self.pal), self._after_action)

    def action_undo(self) -> None:
        try:
            description = self.pinner.last_pin()
        except AffmonError as exc:  # a journal that cannot be read or is not trusted: say why
            self.notify(term_safe(str(exc)), severity="error")
            return
        if description is None:
            self.notify("nothing to undo: affmon has made no pin", severity="information")
            return
        self.push_screen(UndoScreen(description, self.pinner, self.pal), self._after_action)

    def _after_action(self, summary: str | None) -> None:
        if summary:
            self._note = summary
            self._show_status()
        if summary and self.autostart and not self.paused and not self._ticking:
            if self._timer is not None:
                self._timer.stop()
            self.tick()  # show the new masks now
