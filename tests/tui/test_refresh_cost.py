"""What a tick costs the UI: the tick's pace, what is rendered again, and the first look.

Each test counts work (cells rendered through Rich, rows formatted, plots set up, timer
delays) rather than timing it, so they hold on a loaded two-core machine. The tables'
tests are of ``textual_fast.LeanTable`` (the ``table`` override), and build it so."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from rich.text import Text
from textual.app import App, ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable
from textual_plotext.plot import Plot

from affmon.sources.stream import LiveSource
from affmon.tui import textual_fast
from affmon.tui.app import MIN_DELAY_S, AffmonApp, next_delay
from affmon.tui.model.table import TableOptions, table_rows
from affmon.tui.model.views import ProcessHistory, Series, ThreadRow
from affmon.tui.palette import palette
from affmon.tui.screens import PinScreen
from affmon.tui.widgets import processes
from affmon.tui.widgets.detail import DetailText, ProcessPlot, ThreadTable
from affmon.tui.widgets.processes import ProcessTable
from affmon.tui.widgets.quiet import QuietStatic
from tests.helpers.recordings import load
from tests.helpers.recordings import monitor as recorded_monitor
from tests.tui.helpers import FakePinner, ListSource, play, replay_app, step

SIZE = (160, 48)
ROOT = Path(__file__).resolve().parents[2]


# -- the pace of ticks ------------------------------------------------------------------


@given(
    pace=st.floats(0.0, 10.0),
    started=st.floats(0.0, 1e6),
    took=st.floats(0.0, 20.0),
)
def test_the_next_tick_is_due_one_interval_after_the_last_started(pace, started, took):
    now = started + took
    delay = next_delay(pace, started, now)
    assert delay >= MIN_DELAY_S  # never two at once, and Textual's timers need a period
    assert now + delay >= started + pace - 1e-6  # never early
    assert delay == MIN_DELAY_S or abs(now + delay - (started + pace)) < 1e-6  # never later than due


async def test_a_slow_read_does_not_stretch_the_interval():
    """A read that takes 0.3 s at a 0.5 s interval: the next tick is due 0.2 s after the
    read ends (it was due 0.5 s after: 0.8 s between samples, behind by 60%)."""
    header, samples = load("clean")

    source = ListSource(header.topology, samples, delay_s=0.3)
    app = AffmonApp(source, FakePinner(), interval=0.5)
    delays: list[float] = []
    after = app._ticker.after

    def spy(delay):
        delays.append(delay)
        return after(delay)

    app._ticker.after = spy  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        deadline = time.monotonic() + 60
        while len(delays) < 3 and time.monotonic() < deadline:
            await pilot.pause(0.05)
    assert len(delays) >= 3
    assert all(d <= 0.5 - 0.3 + 1e-6 for d in delays), delays  # the read's 0.3 s (at least) counted


# -- what is rendered again -------------------------------------------------------------


def _thread(tid: int, cpu: float, wait: float = 0.1, busy: bool = False) -> ThreadRow:
    return ThreadRow(1, tid, f"t{tid}", "S", 0, frozenset({0}), cpu, wait, 1.0, 0.0, busy)


class _Threads(App[None]):
    def compose(self) -> ComposeResult:
        yield textual_fast.table_class(ThreadTable, True)(id="t")


async def test_a_stock_table_shows_what_a_lean_one_does():
    """The ``table`` override off: the same cells, written through ``update_cell``."""

    class Both(App[None]):
        def compose(self) -> ComposeResult:
            yield ThreadTable(id="stock")
            yield textual_fast.table_class(ThreadTable, True)(id="lean")

    app = Both()
    async with app.run_test(size=(80, 30)) as pilot:
        stock, lean = app.query_one("#stock", ThreadTable), app.query_one("#lean", ThreadTable)
        assert not isinstance(stock, textual_fast.LeanTable) and isinstance(lean, textual_fast.LeanTable)
        app.set_focus(None)  # a focused table's header is drawn in another colour
        p = palette(app)
        for rows in (
            [_thread(10, 90.0), _thread(11, 5.0), _thread(12, 1.0)],
            [_thread(10, 90.0), _thread(11, 6.0, wait=0.3, busy=True), _thread(12, 1.0)],
            [_thread(12, 50.0), _thread(10, 40.0)],
        ):
            stock.show(rows, p)
            lean.show(rows, p)
            await pilot.pause()
            assert stock.row_count == lean.row_count == len(rows)
            for y in range(len(rows) + 1):
                assert list(stock.render_line(y)) == list(lean.render_line(y)), y


def _rich_renders(monkeypatch, rows: Callable[[int], bool]) -> list[tuple[int, int]]:
    """The (row, column) of each cell Textual's table renders through Rich from now on, of
    the rows ``rows`` keeps (the header is row -1)."""
    rendered: list[tuple[int, int]] = []
    original = DataTable._render_cell

    def counting(self, row_index, column_index, *args, **kwargs):
        if rows(row_index):
            rendered.append((row_index, column_index))
        return original(self, row_index, column_index, *args, **kwargs)

    monkeypatch.setattr(DataTable, "_render_cell", counting)
    return rendered


async def test_one_changed_cell_renders_one_cell(monkeypatch):
    """Textual's table renders every visible cell again after any update; only the cell
    whose value changed may go through Rich again."""
    rendered = _rich_renders(monkeypatch, lambda row: row >= 0)

    app = _Threads()
    async with app.run_test() as pilot:
        t = app.query_one(ThreadTable)
        p = palette(app)
        t.show([_thread(10, 90.0), _thread(11, 5.0), _thread(12, 1.0)], p)
        await pilot.pause()
        assert rendered  # drawn once
        rendered.clear()
        t.show([_thread(10, 90.0), _thread(11, 6.0), _thread(12, 1.0)], p)  # one CPU% moved
        await pilot.pause()
        assert rendered == [(1, 4)]
        assert str(t.get_row_at(1)[4]) == "6.0"


async def test_a_changed_row_paints_its_own_line_only(monkeypatch):
    """The table's other lines, down to the blank ones below its last row, are not drawn
    again when one figure changes."""
    painted: list[int] = []
    original = textual_fast.LeanTable.render_line  # DataTable's

    def counting(self, y):
        painted.append(y)
        return original(self, y)

    monkeypatch.setattr(textual_fast.LeanTable, "render_line", counting)

    class Tall(_Threads):
        CSS = "#t { height: 1fr; }"  # a pane taller than its rows, as in the monitor

    app = Tall()
    async with app.run_test(size=(80, 30)) as pilot:
        t = app.query_one(ThreadTable)
        p = palette(app)
        t.show([_thread(10, 90.0), _thread(11, 5.0), _thread(12, 1.0)], p)
        await pilot.pause()
        assert len(painted) >= 20  # drawn once: the header, three rows, the blank lines below
        painted.clear()
        t.show([_thread(10, 90.0), _thread(11, 6.0), _thread(12, 1.0)], p)
        await pilot.pause()
        assert painted == [2]  # the second row, under the header
        assert "6.0" in "".join(seg.text for seg in t.render_line(2))


async def test_the_tables_caches_stay_bounded_as_figures_change():
    """Every tick's changed figures are new renders; what the table keeps of them stays
    within what a screen of rows needs, however long the monitor runs (Textual's own
    caches kept up to 10,000 cells and 1,000 rows and lines a table: 10-15 MiB)."""

    app = _Threads()
    async with app.run_test(size=(120, 30)) as pilot:
        t = app.query_one(ThreadTable)
        p = palette(app)
        for tick in range(400):
            t.show([_thread(10 + i, float((tick * 7 + i) % 1000) / 10) for i in range(8)], p)
            await pilot.pause()
        assert len(t._cell_render_cache) <= textual_fast.TEXTUAL_CELLS_KEPT
        assert len(t._row_render_cache) <= textual_fast.TEXTUAL_ROWS_KEPT
        assert len(t._line_cache) <= textual_fast.TEXTUAL_LINES_KEPT
        assert len(t._renders) <= textual_fast.RENDER_CACHE_CELLS
        assert t.cell_renders >= 400  # the figures did change: each tick rendered new cells
        # and Textual's caches hold the renders of the shown figures alone: one screen
        height = t.size.height
        assert len(t._line_cache) <= height and len(t._row_render_cache) <= height
        assert len(t._row_renderable_cache) <= height
        assert len(t._cell_render_cache) <= len(t.columns)  # the header's cells


async def test_a_cell_whose_colour_alone_changes_is_redrawn():
    """``Text.__eq__`` ignores the style: a wait that turns bad while its figure stays the
    same ("30%") must still turn red."""

    app = _Threads()
    async with app.run_test() as pilot:
        t = app.query_one(ThreadTable)
        p = palette(app)
        t.show([_thread(10, 9.0, wait=0.3, busy=False)], p)
        await pilot.pause()
        assert t.get_row_at(0)[5].style == p.muted
        t.show([_thread(10, 9.0, wait=0.3, busy=True)], p)
        await pilot.pause()
        cell = t.get_row_at(0)[5]
        assert str(cell) == "30%" and cell.style == f"bold {p.error}"


async def test_a_static_whose_colour_alone_changes_is_redrawn():
    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield QuietStatic(id="s")

    app = One()
    async with app.run_test() as pilot:
        s = app.query_one(QuietStatic)
        s.put(Text("CONTENDED", style="green"))
        await pilot.pause()
        s.put(Text("CONTENDED", style="red"))
        await pilot.pause()
        assert s.render().style == "red"
        assert {
            seg.style.color.name for seg in s.render_line(0) if seg.text.strip() and seg.style and seg.style.color
        } == {"red"}


class OneStatic(App[None]):
    def compose(self) -> ComposeResult:
        yield QuietStatic(id="s")


def shown(s: QuietStatic) -> list[str]:
    """The static's lines as drawn, without trailing blanks."""
    return ["".join(seg.text for seg in s.render_line(y)).rstrip() for y in range(s.size.height)]


async def test_a_static_repaints_only_its_lines_that_changed(monkeypatch):
    """One bar of a four-line text moved: that line is drawn again, the others are not; a
    text with another number of lines is laid out again, and shown whole."""
    painted: list[int] = []
    original = QuietStatic.render_line

    def counting(self, y):
        painted.append(y)
        return original(self, y)

    monkeypatch.setattr(QuietStatic, "render_line", counting)

    app = OneStatic()
    async with app.run_test(size=(40, 10)) as pilot:
        s = app.query_one(QuietStatic)
        s.put(Text("node 0\n 0█  1·\n\nlegend"))
        await pilot.pause()
        assert set(painted) == {0, 1, 2, 3}
        painted.clear()
        s.put(Text("node 0\n 0·  1█\n\nlegend"))
        await pilot.pause()
        assert painted == [1]
        assert shown(s) == ["node 0", " 0·  1█", "", "legend"]
        s.put(Text("node 0\n 0·  1█\n\nlegend\nmore"))
        await pilot.pause()
        assert shown(s) == ["node 0", " 0·  1█", "", "legend", "more"]


async def test_a_static_measures_no_line_that_fits_and_wraps_or_cuts_the_others_as_rich_does(monkeypatch):
    """A header line and a core map's lines fit their width: Rich's word-by-word wrap and
    the split of the text into lines are skipped; a line too long is wrapped (or cut, when
    it is ``no_wrap``) as Rich's own wrap of the whole text would."""
    wraps: list[str] = []
    splits: list[str] = []
    original_wrap, original_split = Text.wrap, Text.split

    def counting_wrap(self, *args, **kwargs):
        wraps.append(self.plain)
        return original_wrap(self, *args, **kwargs)

    def counting_split(self, *args, **kwargs):
        splits.append(self.plain)
        return original_split(self, *args, **kwargs)

    app = OneStatic()
    async with app.run_test(size=(20, 8)) as pilot:
        s = app.query_one(QuietStatic)
        await pilot.pause()
        monkeypatch.setattr(Text, "wrap", counting_wrap)
        monkeypatch.setattr(Text, "split", counting_split)
        s.put(Text("affmon  │  12:00:01", style="bold"))
        await pilot.pause()
        s.put([Text("node 0 · L3"), Text(" 0▇  1·"), Text(""), Text("▆ job 7  ▆ shared")])
        await pilot.pause()
        assert wraps == [] and splits == []  # every line fits: nothing measured, nothing split
        assert shown(s) == ["node 0 · L3", " 0▇  1·", "", "▆ job 7  ▆ shared"]
        assert str(s.render()) == "node 0 · L3\n 0▇  1·\n\n▆ job 7  ▆ shared"
        long = "its 3 busy threads waited for a CPU"
        s.put(Text(f"short\n{long}"))
        await pilot.pause()
        assert wraps and set(wraps) == {long}  # only the line that does not fit (once a layout)
        expected = [str(line).rstrip() for line in original_wrap(Text(f"short\n{long}"), app.console, 20)]
        assert shown(s)[: len(expected)] == expected and len(expected) > 2
        s.put([Text(long, no_wrap=True, overflow="ellipsis")])
        await pilot.pause()
        assert shown(s)[0] == long[:19] + "…"


async def test_a_static_follows_a_new_theme():
    class One(App[None]):
        CSS = "QuietStatic { background: $panel; }"

        def compose(self) -> ComposeResult:
            yield QuietStatic(id="s")

    app = One()
    async with app.run_test(size=(40, 5)) as pilot:
        s = app.query_one(QuietStatic)
        s.put(Text("same text"))
        await pilot.pause()
        before = s.render_line(0)
        app.theme = "textual-light" if app.theme != "textual-light" else "textual-dark"
        await pilot.pause()
        after = s.render_line(0)
        assert before.text == after.text
        assert [seg.style for seg in before] != [seg.style for seg in after]
        first = next(iter(after))
        assert first.style is not None and first.style.bgcolor == s.rich_style.bgcolor


async def shown_hogs_table(app, pilot):
    """The "hogs" recording played; its last view's rows shown in the process table:
    (the table, the rows, the jobs' colours)."""
    await play(pilot)
    view = app.view
    assert view is not None
    table = app.query_one(ProcessTable)
    rows = table_rows(view, TableOptions())
    colors = app._job_colors(view)
    table.show(rows, app.pal, colors)
    return table, rows, colors


async def test_rows_that_did_not_change_are_not_formatted_again(monkeypatch):
    calls: list[int] = []
    original = processes.process_cells

    def counting(row, p, job_colors):
        calls.append(row.process.pid)
        return original(row, p, job_colors)

    monkeypatch.setattr(processes, "process_cells", counting)

    app = replay_app("hogs")
    async with app.run_test(size=SIZE) as pilot:
        table, rows, colors = await shown_hogs_table(app, pilot)
        calls.clear()
        table.show(rows, app.pal, colors)  # the same rows again (a cursor event, a quiet tick)
        assert calls == []
        assert [str(table.get_row_at(i)[0]).strip() for i in range(len(rows))] == [str(r.pid) for r in rows]


async def test_the_same_rows_at_the_same_width_are_neither_fitted_nor_put_and_a_new_width_is(monkeypatch):
    """A tick that changes no row (a quiet machine's) does no table work; the same rows at
    another width are laid out again."""
    fits: list[int] = []
    puts: list[int] = []
    fit, put_rows = ProcessTable._fit, ProcessTable.put_rows

    def counting_fit(self, *args, **kwargs):
        fits.append(self.size.width)
        return fit(self, *args, **kwargs)

    def counting_put(self, rows):
        puts.append(len(rows))
        return put_rows(self, rows)

    monkeypatch.setattr(ProcessTable, "_fit", counting_fit)
    monkeypatch.setattr(ProcessTable, "put_rows", counting_put)

    app = replay_app("hogs")
    async with app.run_test(size=SIZE) as pilot:
        table, _, colors = await shown_hogs_table(app, pilot)
        width = table.size.width
        fits.clear(), puts.clear()
        assert app.view is not None
        table.show(table_rows(app.view, TableOptions()), app.pal, colors)  # equal rows, built again
        table.show((), app.pal, colors)  # no rows: emptied
        assert len(fits) == 1 and puts == [0]  # only the emptying
        table.show((), app.pal, colors)
        assert (len(fits), len(puts)) == (1, 1)
        await pilot.resize_terminal(120, 48)
        await pilot.pause()
        fits.clear(), puts.clear()
        table.show((), app.pal, colors)
        assert len(fits) == 1 and fits[0] < width and puts == [0]


async def test_a_hidden_plot_is_not_set_up_and_is_drawn_once_shown(monkeypatch):
    """At 140x40 the process plot is hidden: no figure is set up for it each tick; made
    visible, it shows the newest data."""
    plotted: list[int] = []
    original = Plot.plot

    def counting(self, *args, **kwargs):
        plotted.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Plot, "plot", counting)

    app = replay_app("narrow")
    async with app.run_test(size=(140, 40)) as pilot:
        await play(pilot)
        plot = app.query_one(ProcessPlot)
        assert not plot.display and app.query_one(DetailText).display
        assert plotted == []
        await pilot.resize_terminal(*SIZE)
        await pilot.pause()
        assert plot.display and plotted  # drawn from the newest history once shown
        assert "695" in str(plot.render())


PLOTEXT_PROBE = """
import asyncio, sys
from tests.helpers.recordings import load, monitor
from tests.tui.helpers import play, replay_app

async def go():
    # A first view too, as a live start has: shown from on_mount, before the screen's
    # size classes hide the plots, it drew them (and imported plotext) in any terminal.
    first = monitor("narrow").first_look(load("narrow")[1][0])
    app = replay_app("narrow", first_view=first)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        print("first", "plotext" in sys.modules, "textual_plotext" in sys.modules)
        await play(pilot)
        print("hidden", "plotext" in sys.modules, "textual_plotext" in sys.modules)
        await pilot.resize_terminal(160, 48)
        await pilot.pause()
        print("shown", "plotext" in sys.modules, "textual_plotext" in sys.modules)

asyncio.run(go())
"""


def test_plotext_is_imported_when_a_plot_is_first_shown_and_not_before():
    # A fresh interpreter: this one has imported plotext for the tests above.
    out = subprocess.run(
        [sys.executable, "-c", PLOTEXT_PROBE], capture_output=True, text=True, timeout=120, cwd=ROOT, check=True
    ).stdout.splitlines()
    assert out == ["first False False", "hidden False False", "shown True True"]


async def test_a_plot_given_the_same_data_is_not_rendered_again(monkeypatch):
    renders: list[int] = []
    original = ProcessPlot.render

    def counting(self):
        renders.append(1)
        return original(self)

    monkeypatch.setattr(ProcessPlot, "render", counting)
    history = {7: ProcessHistory(Series((-1.0, 0.0), (0.1, 0.2)), Series((-1.0, 0.0), (50.0, 60.0)))}

    class One(App[None]):
        def compose(self) -> ComposeResult:
            with Vertical():
                yield ProcessPlot(id="plot")

    app = One()
    async with app.run_test(size=(60, 20)) as pilot:
        plot = app.query_one(ProcessPlot)
        plot.show(7, history)
        await pilot.pause()
        drawn = len(renders)
        assert drawn >= 1
        plot.show(7, dict(history))  # equal data, a new mapping (the next tick of a paused monitor)
        await pilot.pause()
        assert len(renders) == drawn


# -- the first look ---------------------------------------------------------------------


def test_the_first_look_has_every_process_and_no_rate():
    _, samples = load("hogs")
    monitor = recorded_monitor("hogs")
    assert monitor.feed(samples[0]) is None
    look = monitor.first_look(samples[0])
    assert not look.measured and look.findings == () and look.tick == 0
    assert {p.pid for p in look.processes} == {p.pid for p in samples[0].processes if not p.kernel}
    assert all(p.cpu_percent is None and p.wait_ratio is None and not p.ran_on_cpus for p in look.processes)
    assert all(p.findings == () for p in look.processes)
    # It changes nothing: the next sample closes the same first interval as without it.
    plain = recorded_monitor("hogs")
    plain.feed(samples[0])
    with_look, without = monitor.feed(samples[1]), plain.feed(samples[1])
    assert with_look is not None and without is not None and with_look.measured
    assert dataclasses.replace(with_look, snapshot=without.snapshot) == without


async def test_live_the_first_look_comes_before_the_first_interval_closes():
    """Live, the screen shows the processes from the first sample (rates unknown, no
    findings claimed), then the measured view. The first look may be on screen for a moment
    only (Textual took FIRST_INTERVAL_S to start): every view rendered is recorded."""
    from tests.helpers.live import workload

    with workload("--sleepers", "1") as w:
        pid = w["pid"]
        source = LiveSource((pid,), interval_s=5.0)
        try:
            app = AffmonApp(source, FakePinner())
            shown: list[tuple[bool, float | None, str]] = []
            render = app._render_view

            def recording() -> None:
                render()
                view = app.view
                if view is not None:
                    row = view.process(pid)
                    detail = str(app.query_one(DetailText).render())
                    shown.append((view.measured, row.cpu_percent if row else -1.0, detail))

            app._render_view = recording  # type: ignore[method-assign]
            async with app.run_test(size=SIZE) as pilot:
                deadline = time.monotonic() + 60
                while not any(measured for measured, _, _ in shown) and time.monotonic() < deadline:
                    await pilot.pause(0.05)
            first, *_ = shown
            assert first[0] is False and first[1] is None  # its row, with no CPU% yet
            assert "once the first interval closes" in first[2] and "no findings" not in first[2]
            measured = next(v for v in shown if v[0])
            assert measured[1] is not None and "once the first interval closes" not in measured[2]
        finally:
            source.close()


async def test_no_re_pin_plan_from_the_first_look():
    """The planner sizes a job from its rates: on the first look there are none."""

    app = replay_app("narrow")
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        played = app.view
        _, samples = load("narrow")
        app.view = recorded_monitor("narrow").first_look(samples[-1])
        await pilot.press("r")
        assert not isinstance(app.screen, PinScreen)
        app.view = played  # measured: the narrow mask's findings, and a plan for them
        await pilot.press("r")
        assert isinstance(app.screen, PinScreen)


async def test_ticks_that_change_no_line_count_lay_out_nothing(monkeypatch):
    """A tick that only changes figures (the clock, CPU bars) repaints; it does not lay out
    the screen again (a layout re-measures every widget: with nothing to show, it was most
    of an idle monitor's CPU). Here the table is empty (a filter matches nothing) and its
    message stays the same from tick to tick."""
    from textual.screen import Screen

    from tests.tui.helpers import list_app, step

    layouts: list[int] = []
    original = Screen._refresh_layout

    def counting(self, *args, **kwargs):
        layouts.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Screen, "_refresh_layout", counting)

    _, recorded = load("hogs")
    span = recorded[-1].monotonic_s - recorded[0].monotonic_s + 1.0
    later = [
        dataclasses.replace(s, monotonic_s=s.monotonic_s + span, wall_time_s=s.wall_time_s + span) for s in recorded
    ]

    app = list_app("hogs", [*recorded, *later])  # more samples than the ticks: the source does not end
    async with app.run_test(size=(140, 40)) as pilot:
        await step(app, pilot)  # two samples: the first view
        await pilot.press("slash", "z", "q", "x", "enter")
        await step(app, pilot)
        await pilot.pause()
        assert app.query_one("#empty").display
        layouts.clear()
        ticks = app.monitor.samples_seen
        await step(app, pilot, 2)
        await pilot.pause()
        assert app.monitor.samples_seen == ticks + 2  # the ticks happened
        assert layouts == []


async def test_a_tick_that_moves_only_the_clock_redraws_only_the_clock(monkeypatch):
    """The header is three pieces (before the clock, the clock, after it) and keeps them
    while nothing but the clock changes: a tick whose sample cost another millisecond or
    read other threads, where that reading does not fit the line, changes the clock alone. At
    every width and for every change the line shown is the one the header's segments fit
    to that width, as if laid out afresh."""
    from affmon.tui.widgets import header as header_module
    from affmon.tui.widgets.header import fit, header_segments
    from affmon.tui.widgets.quiet import QuietStatic
    from affmon.tui.widgets.sametext import same_text

    puts: list[str | None] = []
    original = QuietStatic.put

    def counting(self, content):  # the pieces whose text a put changed
        before = self.render()
        original(self, content)
        if not same_text(before, self.render()):
            puts.append(self.id)

    laid_out: list[int] = []

    def laying_out(*args, **kwargs):
        laid_out.append(1)
        return header_segments(*args, **kwargs)

    def expected(app, header, width: int) -> str:
        clock = time.strftime("%H:%M:%S", time.localtime(header.wall_time_s))
        segments = fit(header_segments(header, paused=False, clock_text=clock), width - 4)
        return "  │  ".join(text for _, text, _ in segments)

    app = replay_app("hogs")
    async with app.run_test(size=(140, 40)) as pilot:
        await step(app, pilot, 2)
        bar = app.panes.header
        first = app.view.header
        for width in (140, 260, 90):
            await pilot.resize_terminal(width, 40)
            await pilot.pause()
            for k, (cost_s, threads) in enumerate([(0.0011, 40), (0.0019, 41), (0.0123, 41), (0.0011, 4000)]):
                header = dataclasses.replace(
                    first, wall_time_s=first.wall_time_s + 60 * width + k, sample_cost_s=cost_s, threads=threads
                )
                puts.clear()
                laid_out.clear()
                monkeypatch.setattr(QuietStatic, "put", counting)
                monkeypatch.setattr(header_module, "header_segments", laying_out)
                bar.show(header, paused=False, palette=app.pal)
                monkeypatch.setattr(QuietStatic, "put", original)
                monkeypatch.setattr(header_module, "header_segments", header_segments)
                await pilot.pause()
                assert bar.text.plain == expected(app, header, width)
                if width == 140 and k == 1:  # a millisecond more, a thread more: not on this line
                    assert puts == ["header-clock"] and laid_out == []  # nor laid out again
                if width == 260 and k:  # the reading is on the line: the clock and what follows it
                    assert "read in" in bar.text.plain and set(puts) <= {"header-clock", "header-tail"}


async def test_rows_that_read_alike_keep_their_places_and_repaint_only_their_own_lines(monkeypatch):
    """Four hogs whose CPU% jitters by under a point from tick to tick: the table keeps
    their order from the last tick, so a tick repaints the four rows whose figures changed
    and no row of a process that only moved. A new sort is the sort's own order."""
    painted: list[int] = []
    original = textual_fast.LeanTable.refresh_row

    def counting(self, row_index):
        if self.id == "processes":
            painted.append(row_index)
        return original(self, row_index)

    monkeypatch.setattr(textual_fast.LeanTable, "refresh_row", counting)

    app = replay_app("hogs", textual_overrides=[textual_fast.TABLE])
    async with app.run_test(size=SIZE) as pilot:
        await step(app, pilot, 2)
        await pilot.press("a")  # every process: the hogs too
        app.options = dataclasses.replace(app.options, sort="cpu")
        base = app.view
        hogs = [p.pid for p in base.processes if p.cpu_percent and p.cpu_percent > 40 and p.pid != 608][:4]
        assert len(hogs) == 4
        ticks = [
            dict(zip(hogs, figures, strict=True))
            for figures in ((20.2, 20.6, 20.0, 20.9), (20.8, 20.1, 20.5, 20.3), (20.0, 20.9, 20.7, 20.2))
        ]

        def jittered(figures):
            processes = tuple(
                dataclasses.replace(p, cpu_percent=figures[p.pid]) if p.pid in figures else p for p in base.processes
            )
            return dataclasses.replace(base, processes=processes)

        app._show_view(jittered(ticks[0]))
        await pilot.pause()
        first = list(app.panes.table._keys)
        places = sorted(first.index(f"p:{pid}") for pid in hogs)
        for figures in ticks[1:]:
            painted.clear()
            app._show_view(jittered(figures))
            await pilot.pause()
            assert app.panes.table._keys == first
            assert sorted(painted) == places  # the hogs' own rows, no other
        exact = [k for k in table_rows(jittered(ticks[2]), app.options) if k.process and k.process.pid in hogs]
        assert [r.key for r in exact] != [k for k in first if k in {f"p:{pid}" for pid in hogs}]
        app.options = dataclasses.replace(app.options, sort="pid")  # another sort: its own order
        app._show_view(jittered(ticks[2]))
        await pilot.pause()
        assert app.panes.table._keys == [r.key for r in table_rows(app.view, app.options)]
