"""A ``Static`` that only redraws what changed.

Textual's ``Static.update`` re-lays out the whole screen every time (``layout=True``). At
one tick a second that was most of affmon's idle CPU use (3.8% of a core, against 0.3%
for an idle ``htop -d 10``, measured in tmux). ``put`` skips content that draws the same as
what is on screen (``same_text``: the characters and their styles), and asks for a layout
only when the number of lines changed.
"""

from __future__ import annotations

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
