"""The overrides of Textual's privates (``affmon.tui.textual_fast``): the Textual they were
written against, the one switch, the monitor on stock Textual outside that range or with
the switch off, and what the ``table`` override is for: a table that shows what Textual's
own shows while rendering through Rich only the cells whose figures changed, painting only
their lines, and keeping bounded caches. These tests count Textual's work and read its
private caches, as the override does: they are the one place outside the override that
does."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.text import Text
from textual.app import App, ComposeResult
from textual.drivers.linux_driver import LinuxDriver
from textual.widgets import DataTable

from affmon.tui import textual_fast
from affmon.tui.model.views import ThreadRow
from affmon.tui.palette import palette
from affmon.tui.textual_fast import ALL, DRIVER, SWITCH, TABLE, LeanTable, QuietLinuxDriver
from affmon.tui.widgets.celltable import CellTable
from affmon.tui.widgets.detail import ThreadTable
from tests.tui.helpers import list_app, step

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_the_installed_textual_is_one_the_overrides_were_written_against():
    assert textual_fast.in_range(textual_fast.textual_version())
    assert textual_fast.overrides(environ={}) == ALL


def test_pyproject_asks_for_the_range_the_overrides_were_written_against():
    requirements = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (textual,) = [r for r in requirements if re.match(r"textual\s*[<>=!~]", r)]
    found = re.fullmatch(r"textual\s*>=\s*([\d.]+)\s*,\s*<\s*([\d.]+)", textual)
    assert found is not None, textual
    low, high = (textual_fast.parse_version(v) for v in found.groups())
    assert low + (0,) * (3 - len(low)) == textual_fast.TEXTUAL_FROM
    assert high + (0,) * (3 - len(high)) == textual_fast.TEXTUAL_BELOW


def test_versions_are_read_by_their_numbers():
    assert textual_fast.parse_version("8.2.8") == (8, 2, 8)
    assert textual_fast.parse_version("8.3.0a1") == (8, 3, 0)
    assert textual_fast.parse_version("8.2.8+local") == (8, 2, 8)
    assert textual_fast.parse_version("8.2.dev1") == (8, 2)


@pytest.mark.parametrize(
    ("version", "on"),
    [
        ((7, 4, 0), False),  # its DataTable draws a row's end without the place a click reads
        (textual_fast.TEXTUAL_FROM, True),
        ((8, 2, 8), True),
        (textual_fast.TEXTUAL_BELOW, False),
        ((9, 0, 0), False),
    ],
)
def test_outside_the_range_every_override_is_off_whatever_is_asked(version, on):
    expected = ALL if on else frozenset()
    assert textual_fast.overrides(environ={}, textual=version) == expected
    assert textual_fast.overrides(ALL, textual=version) == expected
    assert textual_fast.overrides(environ={SWITCH: "1"}, textual=version) == frozenset()


@pytest.mark.parametrize(
    ("value", "on"),
    [
        ("", ALL),
        ("0", ALL),
        ("1", frozenset()),
        ("yes", frozenset()),  # not a list of names: stock Textual
        ("table", {DRIVER}),
        (" driver ", {TABLE}),
        ("driver,table", frozenset()),
        ("table,bogus", frozenset()),
        ("compositor", frozenset()),  # an override there is no more
    ],
)
def test_the_switch(value, on):
    assert textual_fast.overrides(environ={SWITCH: value}, textual=textual_fast.TEXTUAL_FROM) == on


def test_the_app_reads_the_switch_from_the_environment(monkeypatch):
    monkeypatch.setenv(SWITCH, "driver")
    assert list_app("clean").textual_overrides == {TABLE}
    assert list_app("clean", textual_overrides=[DRIVER]).textual_overrides == {DRIVER}  # asked: as asked
    monkeypatch.setenv(SWITCH, "1")
    assert list_app("clean").textual_overrides == frozenset()


def stock(app) -> bool:
    """Whether every part of ``app`` an override would replace is Textual's own."""
    return (
        app.get_driver_class() is LinuxDriver
        and not isinstance(app.panes.table, LeanTable)
        and not isinstance(app.panes.threads, LeanTable)
    )


def test_the_app_on_stock_textual_outside_the_range(monkeypatch):
    monkeypatch.delenv(SWITCH, raising=False)
    app = list_app("clean")
    assert app.textual_overrides == ALL
    assert app.get_driver_class() is QuietLinuxDriver
    assert isinstance(app.panes.table, LeanTable) and isinstance(app.panes.threads, LeanTable)
    monkeypatch.setattr(textual_fast, "textual_version", lambda: textual_fast.TEXTUAL_BELOW)
    for app in (list_app("clean"), list_app("clean", textual_overrides=ALL)):
        assert app.textual_overrides == frozenset() and stock(app)


async def test_the_app_on_stock_textual_with_the_switch_off(monkeypatch):
    monkeypatch.setenv(SWITCH, "1")
    app = list_app("hogs")
    assert stock(app)

    async with app.run_test(size=(140, 40)) as pilot:
        await step(app, pilot, 3)
        assert app.view is not None and app.view.measured
        assert app.panes.table.row_count > 0 and app.panes.table.selected_key is not None


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


async def test_a_lean_row_cursor_table_draws_its_lines_as_textuals_own():
    """A table with a row cursor (as the process table): every line, header, rows and the
    space right of the cells, as Textual's own draws it, with the cursor on each row in
    turn, focused and not, with the mouse over a row, and as a column widens."""

    class Both(App[None]):
        CSS = "CellTable { height: 8; }"

        def compose(self) -> ComposeResult:
            yield CellTable(id="stock", cursor_type="row", zebra_stripes=False, cell_padding=1)
            yield textual_fast.table_class(CellTable, True)(
                id="lean", cursor_type="row", zebra_stripes=False, cell_padding=1
            )

    def lines(table: CellTable) -> list[list[object]]:
        return [list(table.render_line(y)) for y in range(table.row_count + 1)]

    app = Both()
    async with app.run_test(size=(90, 20)) as pilot:
        stock, lean = app.query_one("#stock", CellTable), app.query_one("#lean", CellTable)
        assert isinstance(lean, LeanTable) and not isinstance(stock, LeanTable)
        for table in (stock, lean):
            table.add_columns("PID", "COMMAND", "CPU%")
        for rows in (
            [(Text("10"), Text("python"), Text("90.0", style="bold red")), (Text("11"), Text("sh"), Text("5.0"))],
            [(Text("10"), Text("python"), Text("91.0")), (Text("11"), Text("a much longer command"), Text("5.0"))],
            [
                (Text("12"), Text("x"), Text("1.0")),
                (Text("10"), Text("python"), Text("91.0")),
                (Text("11"), Text("y"), Text("2.0")),
            ],
        ):
            for table in (stock, lean):
                table.put_rows(rows)
            await pilot.pause()
            for row in range(len(rows)):
                app.set_focus(None)
                for table in (stock, lean):
                    table.move_cursor(row=row)
                await pilot.pause()
                assert lines(stock) == lines(lean), ("unfocused", row)
                drawn = []
                for table in (stock, lean):
                    app.set_focus(table)
                    await pilot.pause()
                    drawn.append(lines(table))
                assert drawn[0] == drawn[1], ("focused", row)
        app.set_focus(None)
        drawn = []
        for table in (stock, lean):
            await pilot.hover(f"#{table.id}", offset=(3, 2))  # over the second row
            await pilot.pause()
            drawn.append(lines(table))
        assert drawn[0] == drawn[1], "the mouse over a row"


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
