"""A ``Static`` that repaints only the lines that changed.

Textual's ``Static.update`` lays the whole screen out again (``layout=True``) and renders
all of its content again through Textual's ``Content`` pipeline, however little changed:
a four-line core map whose one bar moved cost about 2 ms a tick on a two-core VM, more
than the sampler. ``QuietStatic.put`` skips content that draws the same as what is on
screen (``same_text``: the characters and their styles), asks for a layout only when the
number of lines changes, and otherwise marks dirty only the lines whose text changed; each
line is rendered by Rich on its own, once, when it is first drawn.

The text wraps at the widget's width unless it is ``no_wrap`` (then each line is cut,
with the text's ``overflow``); the widget's own style (its CSS colour, background and
text style) lies under the text's.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widgets import Static

from affmon.tui.widgets.sametext import same_text


class QuietStatic(Static):
    _shown: Text | None = None

    def __init__(self, content: str = "", **kwargs: object) -> None:
        super().__init__(content, **kwargs)  # type: ignore[arg-type]
        self._lines: list[Text] = []
        self._lines_width = -1  # the width _lines were wrapped at
        self._strips: dict[int, Strip] = {}
        self._strips_style: Style | None = None  # the widget's own style the strips were drawn under

    def render(self) -> Text:  # what is shown (Textual itself draws line by line: render_line)
        return self._shown if self._shown is not None else Text("")

    # -- putting text ---------------------------------------------------------------------

    def put(self, content: Text | str) -> None:
        text = content if isinstance(content, Text) else Text(content)
        if self._shown is not None and same_text(text, self._shown):
            return
        self._shown = text
        width = self.size.width
        if width <= 0 or self._lines_width != width:
            self._relayout()
            return
        lines = self._wrap(text, width)
        if len(lines) != len(self._lines):
            self._relayout()
            return
        changed = [y for y, (new, old) in enumerate(zip(lines, self._lines, strict=True)) if not same_text(new, old)]
        for y in changed:
            self._strips.pop(y, None)
        if changed:  # one refresh for all of them (each call also drops the widget's cached sizes)
            self.refresh(*(Region(0, y, width, 1) for y in changed))
        self._lines = lines

    def wrapped_lines(self, width: int) -> int:
        """Lines the content takes at ``width`` cells (what the layout gives a pane that
        should show all of it)."""
        if self._shown is None:
            return 0
        if width <= 0:
            return len(self._shown.plain.split("\n"))
        if width == self._lines_width:
            return len(self._lines)  # what is on screen: wrapped already
        return len(self._wrap(self._shown, width))

    # -- drawing ----------------------------------------------------------------------------

    def _relayout(self) -> None:
        self._lines_width = -1
        self._strips.clear()
        self.refresh(layout=True)

    def _wrap(self, text: Text, width: int) -> list[Text]:
        overflow = text.overflow or "fold"
        return list(text.wrap(self.app.console, width, overflow=overflow, no_wrap=bool(text.no_wrap)))

    def _lines_at(self, width: int) -> list[Text]:
        if self._lines_width != width:
            self._lines = self._wrap(self._shown, width) if self._shown is not None and width > 0 else []
            self._lines_width = width
            self._strips.clear()
        return self._lines

    def on_resize(self) -> None:
        self._lines_width = -1
        self._strips.clear()

    def get_content_width(self, container: Size, viewport: Size) -> int:
        if self._shown is None:
            return 0
        return max((cell_len(line) for line in self._shown.plain.split("\n")), default=0)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._lines_at(width))

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        lines = self._lines_at(width)  # a new width: wrapped again, every strip dropped
        base = self.rich_style
        if base != self._strips_style:  # a new theme or class: drawn again under the new style
            self._strips.clear()
            self._strips_style = base
        strip = self._strips.get(y)
        if strip is not None:
            return strip
        if y >= len(lines):
            return Strip.blank(width, base)
        line = lines[y]
        console = self.app.console
        if line.spans:
            segments = list(line.render(console))
        else:  # Rich drops a span-less text's own style here
            segments = [Segment(line.plain, console.get_style(line.style) if line.style else None)]
        strip = Strip(segments).adjust_cell_length(width).apply_style(base)
        self._strips[y] = strip
        return strip
