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
from textual.color import Color
from textual.coordinate import Coordinate
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
        self._drawn: dict[tuple[object, ...], list[list[Segment]]] = {}  # by what the cell draws, not where
        self._headers: dict[tuple[object, ...], list[list[Segment]]] = {}  # the header row's cells
        self._metas: dict[tuple[int, int, bool], Style] = {}  # ``_meta``
        self.cell_renders = 0  # cells rendered through Rich (a figure for tests and benchmarks)
        self._pass_styles: dict[str, Style] | None = None  # during render_lines: styles looked up

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
        # Styles looked up once for the lines drawn together, not once a line: each lookup
        # walks the widget's ancestors to blend their backgrounds.
        self._pass_styles = {}
        try:
            return super().render_lines(crop)
        finally:
            self._pass_styles = None

    def _pass_style(self, name: str) -> Style:
        """``name``'s Rich style (the widget's own for ""), looked up once a pass."""
        styles = self._pass_styles
        style = styles.get(name) if styles is not None else None
        if style is None:
            style = self.rich_style if not name else self.get_component_styles(name).rich_style
            if styles is not None:
                styles[name] = style
        return style

    def render_line(self, y: int) -> Strip:
        """``DataTable.render_line``, the widget's style looked up once a pass."""
        scroll_x, scroll_y = self.scroll_offset
        fixed_rows_height = 0
        for row_index in range(self.fixed_rows):
            row_key = self._row_locations.get_key(row_index)
            if row_key is not None:
                fixed_rows_height += self.get_row_height(row_key)
        if self.show_header:
            fixed_rows_height += self.get_row_height(self._header_row_key)
        if y >= fixed_rows_height:
            y += scroll_y
        return self._render_line(y, scroll_x, scroll_x + self.size.width, self._pass_style(""))

    def _get_row_style(self, row_index: int, base_style: Style) -> Style:
        """``DataTable._get_row_style``, each component's style looked up once a pass."""
        if row_index == -1:
            return self._pass_style("datatable--header")
        if row_index < self.fixed_rows:
            return self._pass_style("datatable--fixed")
        if self.zebra_stripes:
            return self._pass_style("datatable--odd-row" if row_index % 2 else "datatable--even-row")
        return base_style

    def _render_line_in_row(
        self,
        row_key: RowKey,
        line_no: int,
        base_style: Style,
        cursor_location: Coordinate,
        hover_location: Coordinate,
    ) -> tuple[list[list[Segment]], list[list[Segment]]]:
        """``DataTable._render_line_in_row`` for a table with no row labels and no fixed
        columns (the monitor's): the same segments, without looking up the header's style
        for every line (it styles only labels and fixed columns). Any other table: Textual's."""
        if (self._labelled_row_exists and self.show_row_labels) or self.fixed_columns:
            return super()._render_line_in_row(row_key, line_no, base_style, cursor_location, hover_location)
        cursor_type = self.cursor_type
        cache_key = (
            row_key,
            line_no,
            base_style,
            cursor_location,
            hover_location,
            cursor_type,
            self.show_cursor,
            self._show_hover_cursor,
            self._update_count,
            self._pseudo_class_state,
        )
        cached = self._row_render_cache.get(cache_key)
        if cached is not None:
            return cached
        should_highlight = self._should_highlight
        located = self._row_locations.get(row_key)
        row_index = located if located is not None else -1
        row_style = self._get_row_style(row_index, base_style)
        scrollable_row = []
        table_width = self._row_label_column_width
        for column_index, column in enumerate(self.ordered_columns):
            cell_location = Coordinate(row_index, column_index)
            width = column.get_render_width(self)
            table_width += width
            scrollable_row.append(
                self._render_cell(
                    row_index,
                    column_index,
                    row_style,
                    width,
                    cursor=should_highlight(cursor_location, cell_location, cursor_type),
                    hover=should_highlight(hover_location, cell_location, cursor_type),
                )[line_no]
            )
        remaining_space = max(0, self.size.width - table_width)
        if cursor_type == "row":
            extend_style, _ = self._get_styles_to_render_cell(
                row_index == -1,
                False,
                False,
                should_highlight(hover_location, Coordinate(row_index or 0, 0), cursor_type),
                row_index == cursor_location.row,
                self.show_cursor,
                self._show_hover_cursor,
                False,
                False,
            )
            extend_style = row_style + extend_style
        elif row_style.bgcolor is not None:
            faded_color = Color.from_rich_color(row_style.bgcolor).blend(self.background_colors[1], factor=0.25)
            extend_style = Style.from_color(color=row_style.color, bgcolor=faded_color.rich_color)
        else:
            extend_style = Style.from_color(row_style.color, row_style.bgcolor)
        extend_style += self._meta(row_index, 0, out_of_bounds=True)
        scrollable_row.append([Segment(" " * remaining_space, extend_style)])
        row_pair: tuple[list[list[Segment]], list[list[Segment]]] = ([], scrollable_row)
        self._row_render_cache[cache_key] = row_pair
        return row_pair

    def clear(self, columns: bool = False) -> Any:
        self._shown = []
        self._renders.clear()
        self._drawn.clear()
        self._headers.clear()
        return super().clear(columns)

    def _meta(self, row: int, column: int, out_of_bounds: bool = False) -> Style:
        """The style that carries a place on screen (what a mouse click reads), made once
        per place: ``Style.from_meta`` marshals its dict each time it is called."""
        key = (row, column, out_of_bounds)
        style = self._metas.get(key)
        if style is None:
            meta: dict[str, object] = {"row": row, "column": column}
            if out_of_bounds:
                meta["out_of_bounds"] = True
            if len(self._metas) >= RENDER_CACHE_CELLS:
                self._metas.clear()  # bounded by the places on screen; a backstop
            style = self._metas[key] = Style.from_meta(meta)
        return style

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
        # What a cell's render depends on besides its content and place.
        look = (base_style, width, cursor, hover, self._show_hover_cursor, self._pseudo_class_state)
        if row_key is None or column_key is None:
            if row_index != -1 or column_key is None:  # row labels (none here): Textual's own cache
                return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
            # The header row: Textual's cache of it is emptied with every change of a figure
            # below it (its key holds the update count), so each tick drew it through Rich again.
            header_key = (
                content_key(self.columns[column_key].label),
                column_index,
                *look,
                self.show_cursor,
                self.header_height,
                self.cursor_foreground_priority,
                self.cursor_background_priority,
            )
            header = self._headers.get(header_key)
            if header is None:
                header = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
                if len(self._headers) >= RENDER_CACHE_CELLS:
                    self._headers.clear()  # a backstop: a few columns at a few widths and looks
                self._headers[header_key] = header
            return header
        value = self._data[row_key][column_key]
        key = (row_index, column_index, *look)  # the render carries its place (mouse clicks read it)
        hit = self._renders.get(key)
        if hit is not None and hit[0] is value:
            return hit[1]
        drawn_key = (content_key(value), *look)
        drawn = self._drawn.get(drawn_key)
        if drawn is not None:
            lines = _moved(drawn, self._meta(row_index, column_index))
        else:
            lines = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
            if len(self._drawn) >= RENDER_CACHE_CELLS:
                self._drawn.clear()  # keyed by content and look: few distinct ones a table; a backstop
            self._drawn[drawn_key] = lines
            self.cell_renders += 1
        if len(self._renders) >= RENDER_CACHE_CELLS:
            self._renders.clear()  # keyed by position and look: bounded by the screen, this is a backstop
        self._renders[key] = (value, lines)
        return lines


def content_key(cell: object) -> object:
    """What a cell draws (``same_text``'s fields), as a key: two cells with the same key
    render alike at the same width and look."""
    if not isinstance(cell, Text):
        return cell
    return (
        cell.plain,
        tuple(cell.spans),
        cell.style,
        cell.justify,
        cell.overflow,
        cell.no_wrap,
        cell.end,
        cell.tab_size,
    )


def _moved(lines: list[list[Segment]], meta: Style) -> list[list[Segment]]:
    """A cell's render drawn at another place: every segment carries the place in its
    style's meta (``{"row": ..., "column": ...}``: what a mouse click on it reads), which a
    style added last replaces; nothing else of the render depends on where it is."""
    return [
        [Segment(text, style + meta if style is not None else None, control) for text, style, control in line]
        for line in lines
    ]
