"""The header line's widget: the segments of ``header_line`` that fit its width, drawn
in three pieces so that a tick that moves only the clock redraws only the clock."""

from __future__ import annotations

import dataclasses

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal

from affmon.tui.model.header_line import CLOCK, READING, SEPARATOR, clock_text, fit, header_segments, reading
from affmon.tui.model.views import HeaderView
from affmon.tui.palette import Palette
from affmon.tui.widgets.quiet import QuietStatic


class HeaderBar(Horizontal):
    """One line at the top; laid out again when its width changes. The line is drawn by
    three text widgets side by side: what comes before the clock, the clock, and what comes
    after it. A tick that moves only the clock (most ticks of a quiet machine) so redraws
    its eight cells, not the whole line: Textual renders a changed widget's line in full,
    and the header's line with its ten styled pieces costs the UI thread about half a
    millisecond a tick to render and lay out on a two-core VM."""

    DEFAULT_CSS = """
    HeaderBar > QuietStatic { width: auto; height: 1; }
    HeaderBar > #header-tail { width: 1fr; }
    """

    _last: tuple[HeaderView | None, bool, Palette, str] | None = None
    _laid_out: tuple[HeaderView, str | int, bool, Palette, int] | None = None  # what the pieces were laid out for
    _clock_shown = False
    _reading_shown = False

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._pieces = (QuietStatic(id="header-head"), QuietStatic(id="header-clock"), QuietStatic(id="header-tail"))

    def compose(self) -> ComposeResult:
        yield from self._pieces

    def on_resize(self) -> None:
        if self._last is not None:
            header, paused, palette, loading = self._last
            self.show(header, paused=paused, palette=palette, loading=loading)

    @property
    def text(self) -> Text:
        """The whole line as shown."""
        return Text("").join(piece.render() for piece in self._pieces)

    def show(self, header: HeaderView | None, *, paused: bool, palette: Palette, loading: str = "") -> None:
        self._last = (header, paused, palette, loading)
        head, clock, tail = self._pieces
        if header is None:
            self._laid_out = None
            head.put(Text.assemble(("affmon", "bold"), "  " + loading))
            clock.put(Text(""))
            tail.put(Text(""))
            return
        now = clock_text(header)
        width = max(20, self.size.width - 2)
        # All but the clock as at the last tick (a quiet machine's usual tick): only the clock
        # is new. What the sample read changes most ticks (its cost in ms, the count of
        # threads); where it did not fit the line, only its length can change what fits.
        read = reading(header)
        rest = dataclasses.replace(header, wall_time_s=0.0, sample_cost_s=0.0, threads=0, processes=0)
        if self._laid_out == (rest, read if self._reading_shown else len(read), paused, palette, width):
            if self._clock_shown:
                clock.put(Text(now, style=palette.muted))
            return
        segments = fit(header_segments(header, paused=paused, clock_text=now), width)
        self._reading_shown = any(role == READING for _, _, role in segments)
        self._laid_out = (rest, read if self._reading_shown else len(read), paused, palette, width)
        styles = {
            "title": "bold",
            "muted": palette.muted,
            "warning": f"bold {palette.warning}",
            "error": f"bold reverse {palette.error}",
            READING: palette.muted,
            "": "",
        }
        texts = [Text(), Text(), Text()]  # before the clock, the clock, after it
        piece = 0
        for i, (_, part, role) in enumerate(segments):
            if i:
                texts[piece].append(SEPARATOR, style=palette.disabled)  # the clock's goes before it
            if role == CLOCK:
                texts[1].append(part, style=palette.muted)
                piece = 2
            else:
                texts[piece].append(part, style=styles[role])
        self._clock_shown = piece == 2
        for widget, text in zip(self._pieces, texts, strict=True):
            widget.put(text)
