"""What a tick costs the UI: the tick's pace, what the monitor asks Textual to draw again,
the work it skips, and the first look.

The tests assert what the app asks Textual for (each ``refresh`` a widget makes: its lines,
a new layout) and what it shows, and count affmon's own work (rows formatted, plots set
up, timer delays), never how often Textual rendered; counts, not times, so they hold on a
loaded two-core machine. What the ``table`` override saves inside Textual is tested with
the override (``test_textual_fast.py``)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from rich.text import Text
from textual.app import App, ComposeResult
from textual.containers import Vertical
from textual.widget import Widget
from textual_plotext.plot import Plot

from affmon.sources.stream import LiveSource
from affmon.tui.app import MIN_DELAY_S, AffmonApp, next_delay
from affmon.tui.model.table import TableOptions, table_rows
from affmon.tui.model.views import ProcessHistory, Series
from affmon.tui.screens import PinScreen
from affmon.tui.widgets import processes
from affmon.tui.widgets.detail import DetailText, ProcessPlot
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


@dataclasses.dataclass(frozen=True)
class Asked:
    """One ``refresh`` a widget asked Textual for: the lines (empty: all of it), a layout."""

    widget: Widget
    lines: frozenset[int]
    layout: bool


def asked_to_redraw(monkeypatch) -> list[Asked]:
    """Every ``refresh`` any widget asks for from now on (Textual draws what it is asked)."""
    asked: list[Asked] = []
    original = Widget.refresh

    def spying(self, *regions, **kwargs):
        lines = frozenset(y for r in regions for y in range(r.y, r.y + r.height))
        asked.append(Asked(self, lines, bool(kwargs.get("layout"))))
        return original(self, *regions, **kwargs)

    monkeypatch.setattr(Widget, "refresh", spying)
    return asked


# -- what is drawn again, and the work skipped -------------------------------------------------------------


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
    """One bar of a four-line text moved: the static asks for that line alone to be drawn
    again, no layout; the same text asks for nothing; a text with another number of lines
    asks for a layout, and is shown whole."""
    app = OneStatic()
    async with app.run_test(size=(40, 10)) as pilot:
        s = app.query_one(QuietStatic)
        s.put(Text("node 0\n 0█  1·\n\nlegend"))
        await pilot.pause()
        assert shown(s) == ["node 0", " 0█  1·", "", "legend"]
        asked = asked_to_redraw(monkeypatch)
        s.put(Text("node 0\n 0·  1█\n\nlegend"))
        assert asked == [Asked(s, frozenset({1}), False)]
        await pilot.pause()
        assert shown(s) == ["node 0", " 0·  1█", "", "legend"]
        asked.clear()
        s.put(Text("node 0\n 0·  1█\n\nlegend"))
        assert [a for a in asked if a.widget is s] == []
        s.put(Text("node 0\n 0·  1█\n\nlegend\nmore"))
        assert any(a.widget is s and a.layout for a in asked)
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


async def test_a_plot_given_the_same_data_asks_for_no_redraw(monkeypatch):
    """Equal data (the next tick of a paused monitor) asks for nothing to be drawn again:
    a plot's figure is rebuilt whole each time it is drawn. New data is drawn."""
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
        before = str(plot.render())
        assert "PID 7" in before
        asked = asked_to_redraw(monkeypatch)
        plot.show(7, dict(history))  # equal data, a new mapping
        await pilot.pause()
        assert [a for a in asked if a.widget is plot] == []
        plot.show(7, {7: ProcessHistory(Series((-1.0, 0.0), (0.1, 0.9)), Series((-1.0, 0.0), (50.0, 60.0)))})
        assert [a.widget for a in asked] == [plot]
        await pilot.pause()
        assert str(plot.render()) != before


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


async def test_ticks_that_change_no_line_count_ask_for_no_layout(monkeypatch):
    """A tick that only changes figures (the clock, CPU bars) asks for those lines to be
    drawn again; no widget asks for the screen to be laid out again (a layout re-measures
    every widget: with nothing to show, it was most of an idle monitor's CPU). Here the
    table is empty (a filter matches nothing) and its message stays the same."""
    from tests.tui.helpers import list_app, step

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
        clock = app.query_one("#header-clock", QuietStatic)
        before = str(clock.render())
        asked = asked_to_redraw(monkeypatch)
        ticks = app.monitor.samples_seen
        await step(app, pilot, 2)
        await pilot.pause()
        assert app.monitor.samples_seen == ticks + 2  # the ticks happened
        assert str(clock.render()) != before and any(a.widget is clock for a in asked)  # and were drawn
        assert [a.widget for a in asked if a.layout] == []


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


async def test_rows_that_read_alike_keep_their_places_and_only_their_own_lines_change():
    """Four hogs whose CPU% jitters by under a point from tick to tick: the table keeps
    their order from the last tick, so a tick changes what the four rows whose figures
    changed show and no row of a process that only moved. A new sort is the sort's own
    order. (On stock Textual as with the overrides: this is what the table shows.)"""
    app = replay_app("hogs")
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

        table = app.panes.table

        def keys() -> list[str]:
            return list(table.shown_keys)

        def cells() -> list[list[str]]:
            return [[str(cell) for cell in table.get_row_at(y)] for y in range(table.row_count)]

        app._show_view(jittered(ticks[0]))
        await pilot.pause()
        first = keys()
        places = sorted(first.index(f"p:{pid}") for pid in hogs)
        for figures in ticks[1:]:
            before = cells()
            app._show_view(jittered(figures))
            await pilot.pause()
            after = cells()
            assert keys() == first
            assert [y for y in range(len(after)) if after[y] != before[y]] == places  # the hogs' own rows
        exact = [k for k in table_rows(jittered(ticks[2]), app.options) if k.process and k.process.pid in hogs]
        assert [r.key for r in exact] != [k for k in first if k in {f"p:{pid}" for pid in hogs}]
        app.options = dataclasses.replace(app.options, sort="pid")  # another sort: its own order
        app._show_view(jittered(ticks[2]))
        await pilot.pause()
        assert keys() == [r.key for r in table_rows(app.view, app.options)]
