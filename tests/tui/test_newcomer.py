"""What a newcomer sees: the layout at 80x24 up to 200x50, legends that read, htop's keys,
the demo, and tables that say why they are empty. Driven by Pilot on recordings with a
fake pinner, plus the pure pieces (column fitting, pane heights, the palette) directly."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console
from textual.color import Color
from textual.widgets import Footer, Static
from textual.widgets._footer import FooterKey

from affmon.cli import build_parser
from affmon.core.rules.loop_report import LoopReport
from affmon.tui.app import AffmonApp
from affmon.tui.help import HelpScreen, help_renderable
from affmon.tui.layout import pane_heights
from affmon.tui.model.process_detail import DetailedRow
from affmon.tui.model.table import TableOptions, table_rows
from affmon.tui.model.views import GpuRow, loop_word, shown_cpu
from affmon.tui.palette import job_hues
from affmon.tui.widgets.cores import core_map_text
from affmon.tui.widgets.gpus import gpu_lines, plot_title
from affmon.tui.widgets.processes import ALWAYS, CELL_PADDING, COLUMNS, ProcessTable, fit_columns, process_cells
from tests.tui.helpers import list_app, play, replay_app, step
from tests.tui.shots import Shot, make_app


def text_of(app: AffmonApp, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


# -- columns fitted to the width ------------------------------------------------------

NEED = st.integers(min_value=0, max_value=80)


@given(
    width=st.integers(min_value=60, max_value=400), command=NEED, findings=NEED, loop=st.booleans(), gpu=st.booleans()
)
def test_the_columns_fit_the_width_and_keep_their_order(width, command, findings, loop, gpu):
    needs = {"command": command, "findings": findings}
    present = frozenset({"loop"} if loop else set()) | frozenset({"gpu"} if gpu else set())
    layout = fit_columns(width, needs, present)
    keys = [k for k, _, _ in layout]
    assert set(keys) >= ALWAYS
    assert keys == [k for k, _, _ in COLUMNS if k in keys]  # table order kept
    assert sum(w + 2 * CELL_PADDING for _, _, w in layout) <= width  # never a sideways scroll
    assert ("loop" in keys) <= loop  # LOOP only when some loop is probed
    assert ("gpu" in keys) <= gpu  # GPU only when some process uses one
    if width >= 200:
        assert ("gpu" in keys) == gpu and ("loop" in keys) == loop  # and shown where there is room
    wider = [k for k, _, _ in fit_columns(width + 40, needs, present)]
    assert set(keys) <= set(wider)  # a wider terminal never loses a column


def test_the_sorted_column_carries_the_marker():
    labels = dict((k, label) for k, label, _ in fit_columns(200, {}, frozenset(), "cpu", False))
    assert labels["cpu"] == "CPU%▼" and labels["wait"] == "WAIT"
    labels = dict((k, label) for k, label, _ in fit_columns(200, {}, frozenset(), "cpu", True))
    assert labels["cpu"] == "CPU%▲"


async def test_at_160_columns_every_shown_column_is_on_screen_without_scrolling():
    app = replay_app("hogs")
    async with app.run_test(size=(160, 30)) as pilot:
        await play(pilot)
        table = app.query_one(ProcessTable)
        assert table.virtual_size.width <= table.size.width  # the old table: 130 wide in 118
        assert table.max_scroll_x == 0
        # What a deep tree needs: the names are not cut.
        for row in table_rows(app.view, app.options):
            cell = process_cells(row, app.pal, app._job_colors(app.view))[1]
            assert cell.cell_len <= dict((k, w) for k, _, w in table._layout)["command"]


# -- the space goes to what has content -----------------------------------------------


@given(
    available=st.integers(min_value=14, max_value=120),
    rows=st.integers(min_value=0, max_value=200),
    side=st.integers(min_value=0, max_value=60),
    detail=st.integers(min_value=0, max_value=80),
)
def test_pane_heights_give_the_table_what_it_needs_and_the_detail_the_rest(available, rows, side, detail):
    main = pane_heights(available, rows, side, detail)
    want_main = max(rows + 3, side + 2, 6)
    assert 6 <= main <= max(6, want_main)
    if want_main + max(detail + 2, 8) <= available:
        assert main == want_main  # both fit: the table exactly its content, the detail all the rest
    else:
        assert main >= min(want_main, available // 2)  # neither pane is starved by the other


async def test_at_120x34_a_short_table_leaves_its_blank_rows_to_the_detail():
    app = replay_app("narrow")
    async with app.run_test(size=(120, 34)) as pilot:
        await play(pilot)
        rows = len(app.query_one(ProcessTable).shown_keys)
        main, detail = app.query_one("#main"), app.query_one("#detail")
        blank = main.outer_size.height - 3 - rows  # border and header
        assert rows < 10 and detail.display
        assert blank <= max(0, app.query_one("#cores").outer_size.height + 2 - rows - 3)
        assert detail.outer_size.height >= 12  # was 11 at any table size


async def test_at_30_rows_the_detail_pane_shows():
    for size in ((120, 30), (160, 30)):
        app = replay_app("hogs")
        async with app.run_test(size=size) as pilot:
            await play(pilot)
            assert app.query_one("#detail").display, size
            assert "CONTENDED" in text_of(app, "#detail-text")


# -- 80x24 ------------------------------------------------------------------------------


async def test_at_80x24_help_and_quit_are_in_the_footer():
    app = replay_app("hogs")
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot)
        keys = {k.action: k for k in app.query_one(Footer).query(FooterKey)}
        for action in ("help", "quit"):
            assert keys[action].region.right <= 80 and keys[action].region.width > 0, action


async def test_at_80x24_the_gpu_line_fits_on_one_line():
    h200 = GpuRow(
        0,
        "NVIDIA H200",
        None,
        False,
        19,
        1_900_000_000,
        150_000_000_000,
        956e3,
        1.97 * 2**20,
        5,
        16,
        5,
        16,
        0,
        None,
        (),
    )
    console = Console(width=76, record=True)
    lines = gpu_lines((h200, h200), _palette(), compact=True)
    assert all(cell_len(line) <= 76 for line in lines.plain.split("\n"))
    console.print(lines)
    assert console.export_text().count("\n") == 2  # two GPUs, two lines: "x16" no longer wraps

    app = replay_app("hogs")
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot)
        assert app.query_one("#gpus").size.height == len(app.view.gpus)
        assert "x16" in text_of(app, "#gpus")


async def test_at_80x24_the_findings_are_not_cut():
    app = replay_app("hogs")
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot)
        table = app.query_one(ProcessTable)
        widths = dict((k, w) for k, _, w in table._layout)
        for row in table_rows(app.view, app.options):
            cell = process_cells(row, app.pal, app._job_colors(app.view))[6]
            assert cell.cell_len <= widths["findings"], cell.plain


async def test_enter_opens_the_detail_full_size_and_escape_closes_it():
    app = replay_app("hogs")
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot)
        assert not app.query_one("#detail").display
        await pilot.press("enter")
        await pilot.pause()
        assert app.query_one("#detail").display and not app.query_one("#main").display
        assert "CONTENDED" in text_of(app, "#detail-text")
        await pilot.press("escape")
        await pilot.pause()
        assert app.query_one("#main").display and not app.query_one("#detail").display


def test_help_wraps_inside_its_column_at_80():
    console = Console(width=74, record=True)
    console.print(help_renderable())
    lines = console.export_text().splitlines()
    starts = {"Keys", "Columns", "Core map", "Esc"}
    for line in lines:
        if not line.strip() or any(line.startswith(s) for s in starts):
            continue
        # A key, or the continuation of an explanation: never text back at column 0.
        first = line.split()[0]
        assert not line.startswith(" ") or line.startswith(" " * 11), line
        assert len(first) <= 14, line
    text = "\n".join(lines)
    for column in ("GPU", "THR", "NODE", "USER", "LOOP"):
        assert any(line.startswith(column + " ") for line in lines), column
    assert "never kills" in text and "F10" in text and "F1" in text


# -- htop's keys --------------------------------------------------------------------


async def test_htop_keys():
    app = replay_app("hogs")
    async with app.run_test(size=(160, 48)) as pilot:
        await play(pilot)
        for key in ("f1", "h"):
            await pilot.press(key)
            assert isinstance(app.screen, HelpScreen), key
            await pilot.press("escape")
        await pilot.press("f6")  # htop's F6: the list of columns; CPU% is the next one down
        await pilot.press("down", "enter")
        await pilot.pause()
        assert app.options.sort == "cpu"
        assert "CPU%▼" in [str(c.label) for c in app.query_one(ProcessTable).columns.values()]
        await pilot.press("I")
        assert app.options.reverse
        assert "CPU%▲" in [str(c.label) for c in app.query_one(ProcessTable).columns.values()]
        roots = [r for r in table_rows(app.view, app.options) if r.depth == 0]
        top = [shown_cpu(r.process.cpu_percent) for r in roots]  # as the column reads them
        assert len(top) > 1 and top == sorted(top)  # least first
        await pilot.press("k")
        await pilot.pause()
        assert any("never kills" in str(n.message) for n in app._notifications)
        await pilot.press("f10")
        await pilot.pause()
    assert app.return_code == 0 or app.return_code is None
    assert not app.is_running


def test_pid_takes_several_pids_as_the_readme_writes_it():
    parser = build_parser()
    assert parser.parse_args(["--pid", "4242", "4243"]).tui_pid == [4242, 4243]
    assert parser.parse_args(["--pid", "4242", "--pid", "4243"]).tui_pid == [4242, 4243]
    text = parser.format_help()
    assert "--pid PID [PID ...]" in text and "TUI_PID" not in text
    assert "seconds between samples" in text


# -- empty states -------------------------------------------------------------------


async def test_a_filter_that_matches_nothing_says_so():
    app = replay_app("hogs")
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot)
        await pilot.press("slash", "z", "q", "x", "enter")
        await pilot.pause()
        assert app.query_one("#empty").display and not app.query_one(ProcessTable).display
        assert "nothing matches the filter 'zqx'" in text_of(app, "#empty")
        await pilot.press("escape")
        await pilot.pause()
        assert not app.query_one("#empty").display and app.query_one(ProcessTable).display


async def test_a_watched_pid_that_exits_says_so():
    from tests.helpers.recordings import load

    _, samples = load("clean")
    gone = [dataclasses.replace(s, processes=()) for s in samples[2:4]]

    app = list_app("clean", [samples[0], samples[1], *gone], focus_pid=478)
    async with app.run_test(size=(80, 24)) as pilot:
        await step(app, pilot)
        assert not app.query_one("#empty").display
        await step(app, pilot)
        await pilot.pause()
        assert "PID 478 has exited" in text_of(app, "#empty")


# -- the demo -----------------------------------------------------------------------


async def test_the_demo_says_what_is_planted_when_the_pin_lands_and_plays_again():
    app = make_app(Shot("demo", "demo"))
    async with app.run_test(size=(80, 24)) as pilot:
        await step(app, pilot)
        banner = text_of(app, "#banner")
        assert app.query_one("#banner").display and "DEMO" in banner and "hogs" in banner
        seen_pin = False
        while not app.source.exhausted:
            await step(app, pilot)
            seen_pin = seen_pin or "just put rank" in text_of(app, "#banner")
        assert seen_pin and app.demo_state.pinned_to is not None
        await pilot.pause()
        assert "R plays it again" in text_of(app, "#banner")
        await pilot.press("R")
        await step(app, pilot)
        assert not app.source.exhausted and app.view.header.position == "sample 2/46"
        assert "just put" not in text_of(app, "#banner")


# -- legends and colours ------------------------------------------------------------


def _palette():
    from affmon.tui.palette import Palette

    return Palette("red", "yellow", "green", "cyan", "grey50", "grey30", "white", ("blue", "green"), "on red")


async def test_the_core_map_legend_shows_styles_on_words_not_on_a_digit():
    app = replay_app("hogs")
    async with app.run_test(size=(160, 48)) as pilot:
        await play(pilot)
        view = app.view
        text = core_map_text(view.cores, app.pal, app._job_colors(view), None, 38)
        legend = text.plain.split("\n\n")[-1]
        assert " 7 " not in legend and "7 ran here" not in legend
        assert "ran here" in legend and "outside mask" in legend and "GPU-local" in legend
        styled = {text.plain[s.start : s.end]: str(s.style) for s in text.spans}
        assert "reverse" in styled[" ran here"] and "underline" in styled["GPU-local"]


async def test_eight_ranks_have_eight_colours_and_shared_is_not_the_bad_red():

    app = replay_app("hogs")
    async with app.run_test(size=(80, 24)):
        p = app.pal
        assert len({p.job(i) for i in range(8)}) == 8
        assert p.shared != p.error and p.shared != f"bold {p.error}"
        assert p.error not in p.jobs[:7]
    background, error = Color.parse("#121212"), Color.parse("#B93C5B")
    hues = job_hues(Color.parse("#0178D4"), error, background)
    assert len(set(hues)) == 8
    # The hue nearest the error colour is the eighth: fewer jobs never look like a bad finding.
    distance = [min(abs(Color.parse(h).hsl.h - error.hsl.h), 1 - abs(Color.parse(h).hsl.h - error.hsl.h)) for h in hues]
    assert distance.index(min(distance)) == 7


def test_the_gpu_plot_says_seconds_and_which_axis():
    from affmon.tui.model.views import GpuHistory, Series

    s = Series((-39.0, -20.0, 0.0), (10.0, 20.0, 30.0))
    title = plot_title(((0, GpuHistory(s, s, s)),))
    assert "last 39 s" in title and "minutes" not in title and "(left)" in title and "(right)" in title


# -- LOOP and the scheduler ------------------------------------------------------------


def _report(verdict):
    return LoopReport(437, "python3", None, None, verdict, "", None)  # type: ignore[arg-type]


def test_loop_words():
    assert loop_word(None) is None
    assert [
        loop_word(_report(v)) for v in ("input_bound", "gpu_bound", "loop_bound", "cpu_starved", "mixed", None)
    ] == [
        "data",
        "GPU",
        "CPU",
        "cpu-wait",
        "mixed",
        "-",
    ]


async def test_a_probed_rank_shows_its_loop_and_its_scheduler_escaped():
    app = replay_app("hogs")
    async with app.run_test(size=(200, 50)) as pilot:
        await play(pilot)
        view = app.view
        rank = view.process(view.jobs[0])
        base = {f.name: getattr(rank, f.name) for f in dataclasses.fields(type(rank)) if f.name in _row_fields()}
        detailed = DetailedRow(**base, loop=_report("input_bound"), context="slurm 4242.0 rank 1\x1b[2J")
        view = dataclasses.replace(view, processes=tuple(detailed if p.pid == rank.pid else p for p in view.processes))
        app.view = view
        app._render_view()
        await pilot.pause()
        table = app.query_one(ProcessTable)
        assert "loop" in table.shown_columns
        row = table.get_row_at(table.shown_keys.index(f"p:{rank.pid}"))
        cells = dict(zip(table.shown_columns, (str(c) for c in row), strict=True))
        assert cells["loop"] == "data"
        assert "[slurm 4242.0 rank 1?[2J]" in cells["command"]  # escaped as ps shows it
        assert "\x1b" not in cells["command"]


def _row_fields():
    from affmon.tui.model.views import ProcessRow

    return {f.name for f in dataclasses.fields(ProcessRow)}


async def test_table_options_reverse_keeps_the_tree():
    app = replay_app("hogs")
    async with app.run_test(size=(160, 48)) as pilot:
        await play(pilot)
        forward = table_rows(app.view, TableOptions(sort="pid"))
        backward = table_rows(app.view, TableOptions(sort="pid", reverse=True))
        assert {r.key for r in forward} == {r.key for r in backward}
        roots = [r.pid for r in backward if r.depth == 0]
        assert roots == sorted(roots, reverse=True)
        for i, r in enumerate(backward):  # every child still follows its parent
            if r.depth:
                assert any(b.depth == r.depth - 1 for b in backward[:i])
