"""``CellTable``: a ``DataTable`` of Rich ``Text`` cells that re-renders only the cells
that changed.

Textual's ``DataTable`` keys its cell render cache on a counter that every
``update_cell`` bumps, so changing one CPU% re-renders every visible cell through Rich
(``_render_cell``): at one tick a second that was most of the monitor's UI-thread time
under a cProfile of 2,000 waking threads. Here a cell's render is cached on the cell
object itself: ``put_rows`` keeps the object already shown when the new cell is equal to
it (``same_text``: characters and styles), so an unchanged cell is the same object next tick and its render is reused; a
changed cell is a new object and is rendered once.

Rows are keyed by position ("r0", "r1", ...): a re-sort rewrites the cells that moved
instead of clearing the table and adding every row again (which re-laid out the screen);
rows are added or removed only at the end, when the count changes.

And only the rows that changed are painted again: ``update_cell`` repaints the whole
widget, every line of it down to the blank ones below the last row (a thread table in a
30-line pane drew 30 lines a tick to change one figure). ``put_rows`` writes the cells
itself and marks dirty only the lines of the rows it changed; Textual keeps the other
lines as they were drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import DataTable
from textual.widgets.data_table import RowKey

from affmon.tui.widgets.sametext import same_cells, same_text

Cells = tuple[Text, ...]
RENDER_CACHE_CELLS = 4096  # a 160x48 screen shows about 600 cells; the rest are cursor and hover variants
# Textual's own caches, keyed on its update counter: each tick's renders are new entries
# until the cache is full (10,000 cells, 1,000 rows and lines: 10-15 MiB a table, reached
# after minutes to half an hour: the monitor's memory grew all that time). Cells are
# cached here; Textual's keep what one screen of rows and lines needs, and are emptied
# when the counter moves (``render_lines``): an entry under an older count is never read
# again. These bounds are the backstop.
TEXTUAL_CELLS_KEPT = 512
TEXTUAL_ROWS_KEPT = 256
TEXTUAL_LINES_KEPT = 256
ROW_REPAINTS = 16  # more rows changed than this (a re-sort): one repaint of the whole table


class CellTable(DataTable[Text]):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._cell_render_cache = LRUCache(TEXTUAL_CELLS_KEPT)
        self._row_render_cache = LRUCache(TEXTUAL_ROWS_KEPT)
        self._row_renderable_cache = LRUCache(TEXTUAL_ROWS_KEPT)
        self._line_cache = LRUCache(TEXTUAL_LINES_KEPT)
        self._cached_for = self._update_count  # the update count Textual's caches hold renders of
        self._shown: list[Cells] = []
        self._renders: dict[tuple[object, ...], tuple[Text, list[list[Segment]]]] = {}
        self.cell_renders = 0  # cells rendered through Rich (a figure for tests and benchmarks)

    def put_rows(self, rows: Sequence[Cells]) -> None:
        """Show ``rows`` top to bottom, touching only the cells that differ from what is shown."""
        keys = [column.key for column in self.ordered_columns]
        shown = self._shown
        changed: list[int] = []
        for i, cells in enumerate(rows):
            if i >= len(shown):
                self.add_row(*cells, key=f"r{i}")
                shown.append(tuple(cells))
                continue
            old = shown[i]
            if same_cells(cells, old):
                continue
            data = self._data[RowKey(f"r{i}")]
            kept = []
            for column_key, new, prev in zip(keys, cells, old, strict=True):
                if same_text(new, prev):
                    kept.append(prev)
                else:
                    data[column_key] = new  # what update_cell does, without its repaint of every line
                    kept.append(new)
            shown[i] = tuple(kept)
            changed.append(i)
        if changed:
            self._update_count += 1  # Textual's line caches are keyed on it
            if len(changed) > ROW_REPAINTS:
                self.refresh()
            else:
                for i in changed:
                    self.refresh_row(i)
        while len(shown) > len(rows):
            shown.pop()
            self.remove_row(f"r{len(shown)}")

    def render_lines(self, crop: Region) -> list[Strip]:
        if self._update_count != self._cached_for:
            self._cached_for = self._update_count
            self._cell_render_cache.clear()
            self._row_render_cache.clear()
            self._row_renderable_cache.clear()
            self._line_cache.clear()
        return super().render_lines(crop)

    def clear(self, columns: bool = False) -> Any:
        self._shown = []
        self._renders.clear()
        return super().clear(columns)

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> list[list[Segment]]:
        row_key = self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        if row_key is None or column_key is None:  # the header row: Textual's own cache
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        value = self._data[row_key][column_key]
        key = (
            row_index,  # the render carries its position (mouse clicks read it)
            column_index,
            base_style,
            width,
            cursor,
            hover,
            self._show_hover_cursor,
            self._pseudo_class_state,
        )
        hit = self._renders.get(key)
        if hit is not None and hit[0] is value:
            return hit[1]
        lines = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        if len(self._renders) >= RENDER_CACHE_CELLS:
            self._renders.clear()  # keyed by position and look: bounded by the screen, this is a backstop
        self._renders[key] = (value, lines)
        self.cell_renders += 1
        return lines
