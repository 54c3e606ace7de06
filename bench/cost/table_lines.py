"""What a table's changed lines cost to draw: the monitor's table (``LeanTable``) against the
same table drawing each row's line with Textual's own ``DataTable._render_line_in_row``.

A headless app holds both tables, ``--rows`` rows of nine columns each (as the process
table); each pass changes one figure in every row (as a tick beside busy ranks does) and
then draws every line of each table (``render_lines`` over the table, as the compositor asks
for the lines it repaints, before the compositor has drawn them), timed in thread CPU. The
passes alternate the two tables; printed: the median CPU per line of each over
``--passes`` passes, and their ratio.

    python -m bench.cost.table_lines [--rows 30] [--passes 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from rich.text import Text
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.widgets import DataTable

from affmon.tui import textual_fast
from affmon.tui.widgets.celltable import CellTable

COLUMNS = ("PID", "COMMAND", "CPU%", "WAIT", "RAN ON", "MASK", "FINDINGS", "LOOP", "THR")
Lean = textual_fast.table_class(CellTable, True)


class Textuals(Lean):  # type: ignore[misc,valid-type]
    """The monitor's table with Textual's own line of a row."""

    _render_line_in_row = DataTable._render_line_in_row


def rows(count: int, tick: int) -> list[tuple[Text, ...]]:
    return [
        (
            Text(str(1000 + i)),
            Text(f"python rank {i}"),
            Text(f"{(tick * 7 + i) % 1000 / 10:.1f}", justify="right"),
            Text(f"{(tick + i) % 100}%", justify="right"),
            Text("0-1"),
            Text("0-1"),
            Text(""),
            Text("mixed"),
            Text("26", justify="right"),
        )
        for i in range(count)
    ]


class Bench(App[None]):
    CSS = "CellTable { height: 1fr; }"

    def compose(self) -> ComposeResult:
        yield Lean(id="lean", cursor_type="row", zebra_stripes=False, cell_padding=1)
        yield Textuals(id="textual", cursor_type="row", zebra_stripes=False, cell_padding=1)


async def run(count: int, passes: int) -> dict[str, list[float]]:
    app = Bench()
    per_line: dict[str, list[float]] = {"lean": [], "textual": []}
    async with app.run_test(size=(140, 2 * count + 8)) as pilot:
        tables = [app.query_one("#lean", CellTable), app.query_one("#textual", CellTable)]
        for table in tables:
            table.add_columns(*COLUMNS)
        for tick in range(passes):
            for table in tables if tick % 2 else tables[::-1]:
                table.put_rows(rows(count, tick))
                region = Region(0, 0, table.size.width, count + 1)
                start = time.thread_time()
                table.render_lines(region)  # before the compositor draws them: none cached
                per_line[str(table.id)].append((time.thread_time() - start) / (count + 1))
            await pilot.pause()
    return per_line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=30)
    parser.add_argument("--passes", type=int, default=200)
    args = parser.parse_args()
    if not textual_fast.in_range(textual_fast.textual_version()):
        raise SystemExit("table_lines: the installed Textual is outside the overrides' range; nothing to compare")
    found = asyncio.run(run(args.rows, args.passes))
    lean, stock = (statistics.median(found[k]) * 1e6 for k in ("lean", "textual"))
    print(f"{args.rows} rows, every row changed each pass, {args.passes} passes, thread CPU per line drawn (median):")
    print(f"  the monitor's table                     {lean:7.1f} us")
    print(f"  the same, Textual's line of a row       {stock:7.1f} us")
    print(f"  ratio                                   {lean / stock:7.2f}")


if __name__ == "__main__":
    main()
