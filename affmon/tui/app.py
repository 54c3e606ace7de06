"""``AffmonApp``: the TUI. Built with its source and pinner passed in, so tests build it
from a recording with a fake pinner.

Sampling runs on the ticker's thread (``affmon.tui.ticker``): it takes one sample, feeds
the ``Monitor`` (owned by that thread alone) and hands the immutable ``View`` it returns to
the UI thread in the one message that ends the tick.
The next tick is scheduled only when the current one has finished, so a slow tick (NVML, thousands of
threads) delays the next one and never piles up; it is due one interval after the
current one's sample *started*, so a tick that costs 100 ms still leaves 1 s between
samples at ``--interval 1`` (counted from its end, the monitor kept 1.1 s and fell
behind). Live, the first sample is read and drawn as plain text before Textual loads
(``affmon.tui.first_frame``), and the app shows it at once as a first look
(``Monitor.first_look``: no rates) until the first interval closes.
Everything else here is the UI thread: it lays the view out, keeps view state
(selection, sort, filter, toggles) and asks the pinner only after a confirmation screen.
The status line shows errors and findings' messages through ``term_safe`` (a bad
recording's error quotes its text).

Space goes to what has content: the process table is as tall as its rows (and the core
map) need, the detail pane takes the rest (``pane_heights``); a table with no row says
why (a watched PID that exited, a filter that matches nothing). htop's keys work where
they mean the same (F1, F6, F10, Enter); F9/k say that affmon kills nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Collection
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.driver import Driver
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import DataTable, Input

from affmon.core.errors import AffmonError
from affmon.core.model.samples import Sample
from affmon.core.text import term_safe
from affmon.sources.stream import Source
from affmon.tui import heap, textual_fast
from affmon.tui.demo import DemoState, demo_banner, next_state
from affmon.tui.first_frame import EarlyScreen
from affmon.tui.layout import (
    DETAIL_FROM_ROWS,
    DETAIL_MIN_ROWS,
    FOOTER_COMPACT_BELOW,
    PLOT_DETAIL_ROWS,
    TALL_FROM_ROWS,
    empty_message,
    pane_heights,
)
from affmon.tui.memory import Trimmer, libc_trim
from affmon.tui.model.monitor import HISTORY_LEN, Monitor
from affmon.tui.model.table import SORT_COLUMNS, TableOptions, next_sort, process_key, table_rows
from affmon.tui.model.views import ProcessRow, View, thread_rows
from affmon.tui.palette import Palette, palette
from affmon.tui.panes import Panes
from affmon.tui.pinner import Pinner
from affmon.tui.ticker import Ticker

FIRST_INTERVAL_S = 0.5  # live: the first view covers this interval, then --interval
MIN_DELAY_S = 0.01  # a tick that overran starts the next this soon
NOTE_SECONDS = 10.0  # an action's message ("undone: masks restored") stays this long on the status line


def next_delay(pace_s: float, started_s: float, now_s: float) -> float:
    """Seconds from ``now_s`` until the next tick: ``pace_s`` after the last one started
    (``started_s``), at least ``MIN_DELAY_S``: a tick that took longer than the interval
    is followed at once, never overlapped."""
    return max(MIN_DELAY_S, pace_s - max(0.0, now_s - started_s))


class TickDone(Message):
    """The ticker thread's tick ended: ``view``, the new view (None when the tick made
    none), and ``error``, why it failed (or None). One message a tick: each one posted
    from the thread wakes the UI thread's loop."""

    def __init__(self, view: View | None, error: BaseException | None) -> None:
        super().__init__()
        self.view = view
        self.error = error


class AffmonApp(App[None]):
    CSS_PATH = "affmon.tcss"
    TITLE = "affmon"
    BINDINGS: ClassVar[list[BindingType]] = [
        # The footer shows these in this order: help and quit first, so a narrow terminal
        # that cuts the footer's end still shows them.
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
        Binding("r", "repin", "Re-pin"),
        Binding("u", "undo", "Undo"),
        Binding("T", "tune", "Tune"),
        Binding("slash", "filter", "Filter"),
        Binding("s", "sort", "Sort"),
        Binding("a", "toggle_all", "All"),
        Binding("t", "toggle_threads", "Threads"),
        Binding("p", "pause", "Pause"),
        Binding("R", "restart", "Replay", show=False),  # the demo's banner and the help say it
        Binding("enter", "toggle_detail", "Detail", show=False),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        # htop's keys
        Binding("f1,h", "help", "Help", show=False),
        Binding("f6", "sort_menu", "Sort by", show=False),
        Binding("I", "reverse_sort", "Reverse sort", show=False),
        Binding("f9,k", "kill", "Kill", show=False),
        Binding("f10", "quit", "Quit", show=False),
    ]
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]  # noqa: RUF012 (Textual declares it)
    # 28 rows and more show the detail pane (120x30 and 160x30 did not, at 32).
    VERTICAL_BREAKPOINTS = [(0, "-short"), (DETAIL_FROM_ROWS, "-medium"), (TALL_FROM_ROWS, "-tall")]  # noqa: RUF012
    # The command sets it (not a test's app): at the first measured view, what is alive is
    # frozen out of the collector's walks (``heap.settle``).
    settle_heap = False

    def __init__(
        self,
        source: Source,
        pinner: Pinner,
        interval: float | None = None,
        focus_pid: int | None = None,
        *,
        autostart: bool = True,
        history_len: int = HISTORY_LEN,
        restart: Callable[[], Source] | None = None,
        demo: bool = False,
        first_view: View | None = None,
        early: EarlyScreen | None = None,
        textual_overrides: Collection[str] | None = None,
    ) -> None:
        """``interval``: seconds between ticks (None: the source's pace, a replay's
        recorded one divided by its speed). ``autostart`` False: no tick runs until
        ``tick()`` is called (tests step through a recording). ``restart``: makes the
        source again from its start (a replay: R plays it again). ``demo``: the packaged
        recording, with a banner that says what it shows. ``first_view``: the live
        source's first sample as ``Monitor.first_look`` shows it, made already (the
        first frame drawn before Textual loaded): shown as soon as the screen is up.
        ``early``: that frame's screen, which the terminal driver takes over.
        ``textual_overrides``: the overrides of Textual's privates to use
        (``affmon.tui.textual_fast``; None: as its switch in the environment says)."""
        # Dropped once shown: a view holds its snapshot, every thread's sample and rates of
        # the first tick, which no later view shares (held, 2.2 MiB more after five minutes
        # at 10,000 threads, measured).
        self._first_view = first_view
        self._had_first_view = first_view is not None
        self._early = early  # before Textual's __init__, which asks for the driver's class
        self.textual_overrides = textual_fast.overrides(textual_overrides)
        super().__init__()
        self.restart_source = restart
        self.demo = demo
        self.demo_state = DemoState()
        self.watched_pid = focus_pid  # --pid's first: an empty table says when it exited
        self._restart_pending = False
        self._main_height: int | None = None  # the process pane's height set last (None: 1fr)
        self.source = source
        self.pinner = pinner
        self.interval = interval
        self.autostart = autostart
        self.monitor = Monitor(source.topology, source.info, history_len=history_len)
        self.view: View | None = None
        self.options = TableOptions()
        self.paused = False
        self.selected_pid: int | None = focus_pid
        self._pending_select: str | None = process_key(focus_pid) if focus_pid is not None else None
        self._ticker: Ticker[View | None] = Ticker(self._run_tick, self._post_tick_done)
        self._trimmer = Trimmer(libc_trim())
        self._tick_started_s = 0.0  # when the newest sample's reading started (written by the thread reading it)
        self._error: str | None = None
        self._note = ""  # a message of the last action, shown for NOTE_SECONDS (``_say``)
        self._note_timer: Timer | None = None
        self._palette: Palette | None = None
        self._panes_shown: tuple[object, ...] | None = None  # what the side panes were last built from
        # The options the process table's rows were last built with, and each row's place:
        # rows whose figures read alike keep their places (``table.settle``).
        self._rows_shown: tuple[TableOptions, dict[str, int]] | None = None
        self.panes = Panes(lean_tables=textual_fast.TABLE in self.textual_overrides)
        if autostart and source.live:
            # The first sample is read while Textual starts (CSS, layout: a few hundred ms),
            # if the caller has not started it already: the first tick takes it.
            source.read_ahead()

    def get_driver_class(self) -> type[Driver]:
        on = textual_fast.DRIVER in self.textual_overrides
        return textual_fast.driver_class(super().get_driver_class(), self._early, on)

    # -- layout ---------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield from self.panes.compose()

    @property
    def pal(self) -> Palette:
        if self._palette is None:
            self._palette = palette(self)
        return self._palette

    @property
    def main_screen(self) -> Screen[object]:
        """The screen the panes are on (``self.screen`` is a dialog while one is open)."""
        return self.panes.main.screen

    def on_mount(self) -> None:
        self.panes.gpu_row.border_title = "GPUs"
        self.panes.main.border_title = "Processes"
        self.panes.cores_pane.border_title = "Core map"
        self.panes.banner.display = self.demo
        self.panes.empty.display = False
        self.panes.detail.border_title = "Selected process"
        self.panes.header.show(None, paused=False, palette=self.pal, loading="taking the first samples…")
        self.panes.table.focus()
        if self._first_view is not None:
            self._show_view(self._first_view)
            self._first_view = None
        self._show_status()
        if self.autostart:
            self.tick()

    def on_unmount(self) -> None:
        self._ticker.close()
        self.source.close()

    # -- sampling -------------------------------------------------------------------

    def tick(self) -> bool:
        """Start one tick now, unless one is running (False); the next is due when it ends."""
        return self._ticker.now()

    async def ticks_landed(self) -> None:
        """Wait until no tick is running and the last one's end is handled."""
        while self._ticker.busy:
            await asyncio.sleep(0.005)

    def _next_sample(self) -> Sample | None:
        """The next sample, noting when its reading started: the next tick is due one
        interval after that (a first sample read ahead counts from when its reading began,
        so the first interval stays FIRST_INTERVAL_S however long Textual took to start)."""
        sample = self.source.next_sample()
        self._tick_started_s = self.source.read_started_s
        return sample

    def _run_tick(self) -> View | None:  # on the ticker's thread
        self._trimmer.due()  # before the tick allocates: the views before the one shown are freed by now
        # A replay's first tick takes two samples: a view needs an interval. Live, two
        # samples taken back to back would give rates over a tenth of a second: the first
        # view waits for the next tick, FIRST_INTERVAL_S later, and meanwhile the screen
        # shows what one sample can (processes, masks, threads; every rate unknown).
        live = self.source.live
        for _ in range(1 if live else 2):
            sample = self._next_sample()
            if sample is None:
                return None
            view = self.monitor.feed(sample, self.source.expected_masks(), finished=self.source.exhausted)
            if view is None and live and self.monitor.samples_seen == 1 and not self._had_first_view:
                view = self.monitor.first_look(sample)
            if view is not None:
                return view
        return None

    def _post_tick_done(self, view: View | None, error: BaseException | None) -> None:  # on the ticker's thread
        self.post_message(TickDone(view, error))

    @on(TickDone)
    def _tick_done(self, message: TickDone) -> None:
        if message.view is not None:
            self._show_view(message.view)
        self._ticker.acknowledge()
        if self._restart_pending:
            self._restart()
            return
        if message.error is not None:
            self._error = f"sampling failed: {message.error}"
            self._show_status()
            if self.source.live:
                self._schedule()  # try again next interval; a replay's bad line stays bad
            return
        self._schedule()

    def _schedule(self) -> None:
        if not self.autostart or self.paused or self.source.exhausted:
            return
        pace = self.interval if self.interval is not None else self.source.pace_s()
        if (self.view is None or not self.view.measured) and self.source.live:
            pace = min(pace, FIRST_INTERVAL_S)  # the first view sooner, over a real interval
        self._ticker.after(next_delay(pace, self._tick_started_s, time.monotonic()))

    def _show_view(self, view: View) -> None:
        self.view = view
        self._error = None
        if self.settle_heap and view.measured:
            self.settle_heap = False
            self.call_after_refresh(heap.settle)  # once the first measured view is drawn
        if self.panes.main.is_attached:  # not so for a tick that lands while the app closes
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
            self.panes.header.show(view.header, paused=self.paused, palette=p)
            # No GPU (no NVML, or none found): the header says so; the panel's lines go to the table.
            self.panes.gpu_row.set_class(not view.gpus, "-none")  # a class: Enter's zoom hides it too
            self.panes.gpus.show(view.gpus, p, view.header.nvml_status)
            self.panes.gpu_plot.show(view.gpu_history, p)  # drawn only where it can be seen
            table = self.panes.table
            o = self.options
            shown_as = self._rows_shown
            rows = table_rows(view, o, shown_as[1] if shown_as is not None and shown_as[0] == o else None)
            self._rows_shown = (o, {r.key: i for i, r in enumerate(rows)})
            select = self._pending_select
            table.show(rows, p, self._job_colors(view), select=select, sort=SORT_COLUMNS.get(o.sort), reverse=o.reverse)
            if select is not None and table.selected_key == select:
                self._pending_select = None
            self._show_empty(view, bool(rows))
            if self.demo:
                self._show_demo(view)
            self._selection_changed()
            self._size_panes(len(rows))

    def empty_message(self, view: View) -> str:
        """Why the table has no row."""
        return empty_message(view, self.options, self.watched_pid)

    def _show_empty(self, view: View, has_rows: bool) -> None:
        empty = self.panes.empty
        table = self.panes.table
        if has_rows:
            if empty.display:
                empty.display, table.display = False, True
            return
        empty.put(Text(term_safe(self.empty_message(view)), style=self.pal.warning))
        if not empty.display:
            empty.display, table.display = True, False

    def _show_demo(self, view: View) -> None:
        rank = view.jobs[0] if view.jobs else None
        row = view.process(rank) if rank is not None else None
        self.demo_state = next_state(self.demo_state, rank, row.mask if row else None, view.header.finished)
        self.panes.banner.put(Text(demo_banner(self.demo_state)))

    def _size_panes(self, table_rows: int) -> None:
        """The process pane as tall as its content, the detail pane the rest (``pane_heights``)."""
        main = self.panes.main
        detail = self.panes.detail
        height: int | None = None
        # The breakpoints decide whether the detail pane shows: read from the size, since the
        # screen's classes follow a resize only after this app's own resize handler.
        if self.size.height >= DETAIL_FROM_ROWS and not self.main_screen.has_class("-zoom"):
            others = sum(
                w.outer_size.height
                for w in self.main_screen.children
                if w.display and w is not main and w is not detail and w.id != "filter"
            )
            available = self.size.height - others
            cores = self.panes.cores
            side = cores.wrapped_lines(cores.size.width) if self.panes.cores_pane.display else 0
            text = self.panes.detail_text
            wanted = text.wrapped_lines(text.size.width or 60)
            if self.panes.threads.display:
                wanted = max(wanted, min(self.panes.threads.row_count + 1, 10))
            least = PLOT_DETAIL_ROWS if self.size.height >= TALL_FROM_ROWS else DETAIL_MIN_ROWS
            height = pane_heights(available, table_rows, side, wanted, least)
        if height != self._main_height:
            self._main_height = height
            main.styles.height = height if height is not None else "1fr"

    def on_resize(self) -> None:
        footer = self.panes.footer
        narrow = self.size.width < FOOTER_COMPACT_BELOW
        footer.compact, footer.show_command_palette = narrow, not narrow
        if self.view is not None:
            rows = self.panes.table.row_count
            self._size_panes(rows)
            self.call_after_refresh(self._size_panes, rows)  # again once the panes have their new sizes

    def selected_row(self) -> ProcessRow | None:
        if self.view is None or self.selected_pid is None:
            return None
        return self.view.process(self.selected_pid)

    def _selection_changed(self) -> None:
        view = self.view
        if view is None:
            return
        # A cursor event can arrive while the screen is torn down (quitting): nothing to show then.
        if self.panes.main.is_attached:
            self._show_selection(view)

    def _show_selection(self, view: View) -> None:
        key = self.panes.table.selected_key
        if key is not None:
            self.selected_pid = int(key.split(":")[1])
        detail = self.panes.detail
        shown = (view, self.selected_pid, detail.display)
        if self._panes_shown is not None and view is self._panes_shown[0] and shown[1:] == self._panes_shown[1:]:
            self._show_status()
            return  # the same view and selection (the table's cursor event after a tick): panes as they are
        self._panes_shown = shown
        row = self.selected_row()
        p = self.pal
        colors = self._job_colors(view)
        self.panes.cores.show(view.cores, p, colors, row, view.measured, view.training_jobs, view.snapshot.topology)
        if detail.display:
            pid = row.pid if row else None
            findings = view.findings_of(pid) if pid is not None else ()
            self.panes.detail_text.show(row, findings, p, view.measured)
            self.panes.threads.show(thread_rows(view.snapshot, pid, view.thresholds) if pid is not None else (), p)
            self.panes.proc_plot.show(pid, view.process_history)
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
            f"sort {o.describe_sort()}",
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
        self.panes.status.put(status)

    # -- actions --------------------------------------------------------------------

    def action_sort(self) -> None:
        self.options = dataclasses.replace(self.options, sort=next_sort(self.options.sort))
        self._render_view()
        self._show_status()

    def action_sort_menu(self) -> None:
        from affmon.tui.sort_screen import SortScreen

        self.push_screen(SortScreen(self.options.sort, self.options.reverse), self._sort_chosen)

    def _sort_chosen(self, key: str | None) -> None:
        if key is None or key == self.options.sort:
            return
        self.options = dataclasses.replace(self.options, sort=key)
        self._render_view()
        self._show_status()

    def action_reverse_sort(self) -> None:
        self.options = dataclasses.replace(self.options, reverse=not self.options.reverse)
        self._render_view()
        self._show_status()

    def action_kill(self) -> None:
        self.notify(
            "affmon never kills or signals a process (htop's F9/k): r re-pins the selected job, u undoes a pin",
            severity="information",
        )

    def action_toggle_detail(self) -> None:
        """Enter: the selected process's detail full size (at 80x24 the pane is hidden), or back."""
        self.main_screen.toggle_class("-zoom")
        self._panes_shown = None  # the detail pane may have been hidden: build it now
        self.call_after_refresh(self._selection_changed)

    @on(DataTable.RowSelected, "#processes")
    def _on_row_selected(self, _: DataTable.RowSelected) -> None:
        self.action_toggle_detail()  # the table takes Enter first

    def action_restart(self) -> None:
        """R: a replay from its start (the demo's loop); live there is nothing to replay."""
        if self.restart_source is None:
            self.notify("live: there is no recording to play again", severity="information")
            return
        if self._ticker.cancel():
            self._restart_pending = True  # when the running tick ends
            return
        self._restart()

    def _restart(self) -> None:
        assert self.restart_source is not None
        self._restart_pending = False
        self._ticker.cancel()
        self.source.close()
        self.source = self.restart_source()
        self.monitor = Monitor(self.source.topology, self.source.info, history_len=self.monitor.history_len)
        self.demo_state = DemoState()
        self._say("playing the recording again from its start")
        if self.autostart and not self.paused:
            self.tick()

    def action_toggle_all(self) -> None:
        self.options = dataclasses.replace(self.options, training_only=not self.options.training_only)
        self._render_view()
        self._show_status()

    def action_toggle_threads(self) -> None:
        self.options = dataclasses.replace(self.options, show_threads=not self.options.show_threads)
        self._render_view()
        self._show_status()

    def action_pause(self) -> None:
        self.paused = not self.paused
        if self.paused:
            self._ticker.cancel()  # a tick under way still lands
        else:
            self.monitor.resumed()
            if self.autostart:
                self.tick()
        if self.view is not None:
            self.panes.header.show(self.view.header, paused=self.paused, palette=self.pal)
        self._show_status()

    def action_help(self) -> None:
        from affmon.tui.help import HelpScreen  # the dialogs load when first opened

        self.push_screen(HelpScreen())

    def action_filter(self) -> None:
        box = self.panes.filter
        box.value = self.options.filter_text
        box.display = True
        box.focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.options = dataclasses.replace(self.options, filter_text=event.value)
        self._render_view()
        self._show_status()

    @on(Input.Submitted, "#filter")
    def _filter_done(self, _: Input.Submitted) -> None:
        self.panes.filter.display = False
        self.panes.table.focus()

    def action_clear_filter(self) -> None:
        if self.main_screen.has_class("-zoom"):  # Esc leaves the full-size detail first
            self.action_toggle_detail()
            return
        box = self.panes.filter
        if box.display or self.options.filter_text:
            box.value = ""  # Input.Changed clears the filter
            box.display = False
            self.panes.table.focus()

    def action_repin(self) -> None:
        view = self.view
        row = self.selected_row()
        if view is None or row is None:
            self.notify("select a process first", severity="warning")
            return
        if not view.measured:
            self.notify("no interval measured yet: the plan needs its rates", severity="warning")
            return
        # Sized over the recent intervals (those the finding was raised over), not the last alone.
        proposal = self.pinner.propose(view.snapshot, row.pid, window=self.monitor.window_until(view.snapshot))
        if proposal is None:
            self.notify(f"process {row.pid} is gone", severity="warning")
            return
        if not proposal.suggestion.cpus:
            self.notify("affmon has no CPUs to suggest for it", severity="warning")
            return
        if proposal.no_change is not None:  # no pin that changes nothing, nor one that cures nothing
            from affmon.tui.screens import NoChangeScreen

            findings = view.findings_of(proposal.pid)
            self.push_screen(NoChangeScreen(proposal, findings, self.pal), self._after_action)
            return
        from affmon.tui.screens import PinScreen

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
        from affmon.tui.screens import UndoScreen

        self.push_screen(UndoScreen(description, self.pinner, self.pal), self._after_action)

    def action_tune(self) -> None:
        """Tune the selected process's job (``TuneScreen``: it asks before changing anything)."""
        view = self.view
        row = self.selected_row()
        if view is None or row is None:
            self.notify("select a process first", severity="warning")
            return
        from affmon.tui.tune_screen import TuneScreen

        self.push_screen(TuneScreen(view.snapshot, row.pid, self.pinner, self.pal), self._after_action)

    def _say(self, note: str) -> None:
        """Show ``note`` on the status line for ``NOTE_SECONDS``, in place of the selected
        process's finding; then the finding comes back."""
        self._note = note
        if self._note_timer is not None:
            self._note_timer.stop()
        self._note_timer = self.set_timer(NOTE_SECONDS, self._forget_note)
        self._show_status()

    def _forget_note(self) -> None:
        self._note, self._note_timer = "", None
        self._show_status()

    def _after_action(self, summary: str | None) -> None:
        if summary:
            self._say(summary)
        if summary and self.autostart and not self.paused:
            self.tick()  # show the new masks now (unless a tick is under way)
