"""The main screen's compositor: a partial update renders only the rows of the widgets
that the change can be seen in, and draws what Textual's own compositor draws."""

from __future__ import annotations

import asyncio
from functools import partial

from rich.text import Text
from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region
from textual.widget import Widget

from affmon.tui.screen import LeanCompositor
from affmon.tui.widgets.header import HeaderBar
from affmon.tui.widgets.quiet import QuietStatic
from tests.tui.helpers import replay_app, step


def drawn(compositor, chops, regions, console) -> str:
    """What the partial update writes to the terminal: the changed regions' cells, with
    their styles and cursor moves."""
    spans = list(compositor._regions_to_spans(regions))
    update = ChopsUpdate(chops, spans, [cut_set[1:] for cut_set in compositor.cuts])
    with console.capture() as capture:
        console.print(update, end="", crop=False, soft_wrap=True)  # as wide as the screen, not the console
    return capture.get()


def test_a_partial_update_renders_the_changed_rows_only_and_draws_as_textual_does(monkeypatch):
    rendered: list[tuple[str, int]] = []
    original = Widget.render_lines

    def counting(self, crop):
        rendered.append((type(self).__name__, crop.height))
        return original(self, crop)

    async def go():
        app = replay_app("hogs")
        async with app.run_test(size=(140, 40)) as pilot:
            await step(app, pilot, 3)
            compositor = app.screen._compositor
            assert isinstance(compositor, LeanCompositor)
            head = app.query_one("#header-head", QuietStatic)
            clock = app.query_one("#header-clock", QuietStatic)
            assert app.query_one(HeaderBar).text.plain.startswith("affmon")
            monkeypatch.setattr(Widget, "render_lines", counting)
            for regions in (
                [clock.region],  # the clock alone
                [Region(1, 0, 138, 1)],  # the header's line
                [Region(101, 7, 30, 1), Region(101, 12, 20, 1)],  # two rows of the core map, far apart
                [compositor.size.region],  # everything
            ):
                crop = Region.from_union(regions)
                rows = {y for r in regions for y in r.line_range}
                # a change of the same width (no new layout), so that the header draws anew
                clock.put(Text(f"{crop.width % 100:02}:00:00"))
                width = head.size.width
                head.put(Text(f"affmon  │  {crop}".ljust(width)[:width]))
                rendered.clear()
                lean = compositor._render_chops(crop, rows.__contains__)
                lean_calls = list(rendered)
                monkeypatch.setattr(compositor, "_get_renders", partial(Compositor._get_renders, compositor))
                stock = compositor._render_chops(crop, rows.__contains__)
                monkeypatch.delattr(compositor, "_get_renders")
                mine = drawn(compositor, lean, regions, app.console)
                assert mine == drawn(compositor, stock, regions, app.console)  # the same on the terminal
                assert len(mine) >= sum(r.area for r in regions)  # and every cell drawn
                if crop == clock.region:
                    # the clock's one row: the clock and what lies under it, not the rest of the header
                    assert crop.width == 8 and sorted(lean_calls) == [
                        ("HeaderBar", 1),
                        ("MainScreen", 1),
                        ("QuietStatic", 1),
                    ]
                elif crop.height == 1:
                    # the screen's and the header's one row: the bar and its three pieces; no pane, no footer
                    assert sorted(lean_calls) == [("HeaderBar", 1), ("MainScreen", 1)] + [("QuietStatic", 1)] * 3
                elif crop.height < 40:
                    # the rows between the two at most, and only of what lies under them
                    assert all(height <= crop.height for _, height in lean_calls)
                    names = {name for name, _ in lean_calls}
                    assert "CoreMap" in names and not names & {"Footer", "FooterKey", "ThreadTable", "HeaderBar"}
                else:
                    assert len(lean_calls) == len(compositor.visible_widgets)  # a full update: everything

    asyncio.run(go())
