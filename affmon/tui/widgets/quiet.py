"""A ``Static`` that only redraws what changed.

Textual's ``Static.update`` re-lays out the whole screen every time (``layout=True``). At
one tick a second that was most of affmon's idle CPU use (3.8% of a core, against 0.3%
for an idle ``htop -d 10``, measured in tmux). ``put`` skips content that draws the same as
what is on screen (``same_text``: the characters and their styles), and asks for a layout
only when the number of lines changed.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import Static

from affmon.tui.widgets.sametext import same_text


class QuietStatic(Static):
    _shown: Text | str | None = None
    _shown_lines = -1

    def put(self, content: Text | str) -> None:
        if self._shown is not None and same_text(content, self._shown):
            return
        plain = content.plain if isinstance(content, Text) else content
        lines = plain.count("\n") + 1
        self.update(content, layout=lines != self._shown_lines)
        self._shown, self._shown_lines = content, lines

    def wrapped_lines(self, width: int) -> int:
        """Lines the content takes at ``width`` cells when it wraps (what the layout gives a
        pane that should show all of it); a text that does not wrap counts its lines."""
        shown = self._shown
        if shown is None:
            return 0
        plain = shown.plain if isinstance(shown, Text) else shown
        lines = plain.split("\n")
        if width <= 0 or (isinstance(shown, Text) and shown.no_wrap):
            return len(lines)
        return sum(max(1, -(-cell_len(line) // width)) for line in lines)
