"""A ``Static`` that repaints only the lines that changed.

Textual's ``Static.update`` lays the whole screen out again (``layout=True``) and renders
all of its content again through Textual's ``Content`` pipeline, however little changed:
a four-line core map whose one bar moved cost about 2 ms a tick on a two-core VM, more
than the sampler. ``QuietStatic.put`` skips content that draws the same as what is on
screen (``same_text``: the characters and their styles), asks for a layout only when the
number of lines changes beyond the lines the layout gives it anyway (``floor_lines``: the
detail pane's text is at least as tall as its pane, and keeps the lines it once had while
the same process is shown, so a finding whose message wraps to one line more, then one
less, does not lay the whole screen out again each tick, every widget drawn anew: about
19 ms a layout of a 140x40 screen on the 2-core development machine), and otherwise
marks dirty only the lines whose text changed; each line is rendered by Rich on its own,
once, when it is first drawn.

The text wraps at the widget's width unless it is ``no_wrap`` (then each line is cut,
with the text's ``overflow``); the widget's own style (its CSS colour, background and
text style) lies under the text's. A line that fits the width is kept as it is: Rich's
wrap of a line, fitting or not, measures it word by word (about 0.1 ms for a header
line). A widget that builds its text line by line puts the lines (``put`` takes a list
of ``Text``, each with its own ``no_wrap`` and ``overflow``), which spares the split of
one text into lines too (another 0.1 ms for the five lines of a two-CPU core map).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widgets import Static

from affmon.tui.widgets.sametext import same_text


def split_lines(text: Text) -> list[Text]:
    """``text``'s lines, each carrying the text's ``no_wrap`` and ``overflow`` (Rich's
    split keeps only its style, justify and overflow)."""
    if "\n" not in text.plain:
        return [text]
    lines = list(text.split("\n", allow_blank=True))
    for line in lines:
        line.no_wrap = text.no_wrap
        line.overflow = text.overflow
    return lines


def _same_line(a: Sequence[Text], b: Sequence[Text], y: int) -> bool:
    """Whether line ``y`` draws the same in both (a line past the end of one is blank)."""
    if y >= len(a) or y >= len(b):
        return y >= len(a) and y >= len(b)
    return same_text(a[y], b[y])


def same_lines(a: Sequence[Text], b: Sequence[Text]) -> bool:
    return a is b or (len(a) == len(b) and all(same_text(x, y) for x, y in zip(a, b, strict=True)))


class QuietStatic(Static):
    _shown: Text | None = None  # what was put, as one text (joined from lines when asked for)
    _source: list[Text] | None = None  # what was put, line by line, unwrapped

    def __init__(self, content: str = "", **kwargs: object) -> None:
        super().__init__(content, **kwargs)  # type: ignore[arg-type]
        self._lines: list[Text] = []
        self._lines_width = -1  # the width _lines were wrapped at
        self._strips: dict[int, Strip] = {}
        self._strips_style: Style | None = None  # the widget's own style the strips were drawn under

    def render(self) -> Text:  # what is shown (Textual itself draws line by line: render_line)
        if self._shown is None and self._source is not None:
            self._shown = Text("\n").join(self._source)
        return self._shown if self._shown is not None else Text("")

    # -- putting text ---------------------------------------------------------------------

    def put(self, content: Text | str | Sequence[Text]) -> None:
        """Show ``content``: a text, or its lines (each a ``Text`` with no newline in it)."""
        if isinstance(content, str):
            content = Text(content)
        if isinstance(content, Text):
            if self._shown is not None and same_text(content, self._shown):
                return
            source, shown = split_lines(content), content
        else:
            source, shown = list(content), None
            if self._source is not None and same_lines(source, self._source):
                return
        self._source, self._shown = source, shown
        width = self.size.width
        if width <= 0 or self._lines_width != width or (self._auto_width() and self._widest(source) != width):
            self._relayout()  # (a widget as wide as its text: a text of another width resizes it)
            return
        lines = self._wrap(source, width)
        if len(lines) != len(self._lines) and max(len(lines), len(self._lines)) > self.floor_lines():
            if self.keeps_lines:
                self._kept = max(self._kept, len(lines))
            self._relayout()
            return
        changed = [y for y in range(max(len(lines), len(self._lines))) if not _same_line(lines, self._lines, y)]
        for y in changed:
            self._strips.pop(y, None)
        if changed:  # one refresh for all of them (each call also drops the widget's cached sizes)
            self.refresh(*(Region(0, y, width, 1) for y in changed))
        self._lines = lines

    # A widget that keeps the lines its content once had (until it sets ``_kept`` back to 0):
    # its height does not shrink when its text loses a line and gains it back the next tick.
    keeps_lines = False
    _kept = 0

    def floor_lines(self) -> int:
        """Lines the layout gives this widget whatever its content (0: as many as its
        content has): those it keeps. Within them a change of the number of lines needs no
        layout: the lines below the content are blank. A widget whose CSS gives it a
        minimum height says so here too."""
        return self._kept

    def wrapped_lines(self, width: int) -> int:
        """Lines the content takes at ``width`` cells (what the layout gives a pane that
        should show all of it)."""
        if self._source is None:
            return 0
        if width <= 0:
            return len(self._source)
        if width == self._lines_width:
            return len(self._lines)  # what is on screen: wrapped already
        return len(self._wrap(self._source, width))

    # -- drawing ----------------------------------------------------------------------------

    def _relayout(self) -> None:
        self._lines_width = -1
        self._strips.clear()
        self.refresh(layout=True)

    def _wrap(self, source: list[Text], width: int) -> list[Text]:
        lines: list[Text] = []
        for line in source:
            plain = line.plain
            if line.justify in (None, "default") and "\t" not in plain and cell_len(plain) <= width:
                lines.append(line)  # what Rich's wrap would give, without measuring it word by word
                continue
            overflow = line.overflow or "fold"
            lines.extend(line.wrap(self.app.console, width, overflow=overflow, no_wrap=bool(line.no_wrap)))
        return lines

    def _lines_at(self, width: int) -> list[Text]:
        if self._lines_width != width:
            self._lines = self._wrap(self._source, width) if self._source is not None and width > 0 else []
            self._lines_width = width
            self._strips.clear()
        return self._lines

    def on_resize(self) -> None:
        self._lines_width = -1
        self._strips.clear()

    def _auto_width(self) -> bool:
        width = self.styles.width
        return width is not None and width.is_auto

    @staticmethod
    def _widest(source: Sequence[Text]) -> int:
        return max((cell_len(line.plain) for line in source), default=0)

    def get_content_width(self, container: Size, viewport: Size) -> int:
        return 0 if self._source is None else self._widest(self._source)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return max(len(self._lines_at(width)), self._kept)

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
