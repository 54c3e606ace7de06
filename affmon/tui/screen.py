"""The monitor's main screen, with a compositor that renders, for a partial update, only
the lines that can change.

For a partial update (some lines changed: the header's clock, a bar of the core map),
Textual's compositor renders every widget whose *clip* overlaps the changed region, each
one whole. A child of the screen is clipped by the whole screen, so when only the header's
clock changed, every pane and the screen itself rendered all of their lines again (from
their caches, but line by line). Measured with ``Widget.render_lines`` timed per widget
over 40 one-second ticks with nothing watched, on the two-core VM: about 0.7 ms of the UI
thread a tick (the screen 0.19, the detail pane 0.21, the footer 0.15, the process pane
0.12, the status line 0.07), beside 0.4 ms for the header's own line.

``LeanCompositor`` renders, of each widget whose visible part (its region within its
clip) meets the changed region, only the rows of that part within the region; the rows
outside it are never drawn by a partial update (Textual's own chops skip every row that
holds no change), so they are handed over as empty strips. A full update renders
everything, as Textual does. This reimplements ``Compositor._get_renders`` (Textual
8.2's), and is used only where the compositor has the ``visible_widgets`` mapping it reads.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual._compositor import Compositor
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip


class LeanCompositor(Compositor):
    def _get_renders(self, crop: Region | None = None) -> Iterable[tuple[Region, Region, list[Strip]]]:
        if crop is None or not hasattr(self, "visible_widgets"):
            return super()._get_renders(crop)
        renders = []
        top, bottom = crop.y, crop.bottom
        for widget, (region, clip) in self.visible_widgets.items():
            visible = region.intersection(clip)
            if not (visible and crop.overlaps(visible)):
                continue
            first, last = max(visible.y, top), min(visible.bottom, bottom)
            lines = widget.render_lines(Region(visible.x - region.x, first - region.y, visible.width, last - first))
            if first == visible.y and last == visible.bottom:
                renders.append((region, clip, lines))
                continue
            unseen = Strip([])  # a row no partial update draws: it holds no change
            strips = [unseen] * (first - visible.y) + list(lines) + [unseen] * (visible.bottom - last)
            renders.append((region, clip, strips))
        return renders


class MainScreen(Screen[object]):
    """The screen the monitor's panes are on."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._compositor = LeanCompositor()
