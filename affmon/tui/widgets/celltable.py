"""``CellTable``: a ``DataTable`` of Rich ``Text`` cells, written only where a cell changed.

Rows are keyed by position ("r0", "r1", ...): a re-sort rewrites the cells that moved
instead of clearing the table and adding every row again (which re-laid out the screen);
rows are added or removed only at the end, when the count changes. ``put_rows`` keeps the
cell object already shown where the new cell draws the same (``same_text``: characters
and styles), so an unchanged cell is the same object next tick.

This is Textual's public API only: a changed cell is written with ``update_cell``.
``affmon.tui.textual_fast.LeanTable`` (under the monitor's tables unless the overrides
are off) writes through ``write_cell`` and ``rows_written`` instead, and renders and
repaints only what changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey

from affmon.tui.widgets.sametext import same_cells, same_text

Cells = tuple[Text, ...]


class CellTable(DataTable[Text]):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._shown: list[Cells] = []

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
            kept = []
            for column_key, new, prev in zip(keys, cells, old, strict=True):
                if same_text(new, prev):
                    kept.append(prev)
                else:
                    self.write_cell(f"r{i}", column_key, new)
                    kept.append(new)
            shown[i] = tuple(kept)
            changed.append(i)
        if changed:
            self.rows_written(changed)
        while len(shown) > len(rows):
            shown.pop()
            self.remove_row(f"r{len(shown)}")

    def write_cell(self, row: str, column: ColumnKey, value: Text) -> None:
        """Write one changed cell of the row keyed ``row``: ``update_cell``, which repaints the table."""
        self.update_cell(row, column, value)

    def rows_written(self, rows: list[int]) -> None:
        """The rows (by index) whose cells ``put_rows`` wrote; ``update_cell`` repainted them already."""

    def clear(self, columns: bool = False) -> Any:
        self._shown = []
        return super().clear(columns)
