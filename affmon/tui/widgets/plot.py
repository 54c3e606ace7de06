"""``LazyPlot``: a plotext plot that builds its figure only when it can be seen and its
data changed.

A plotext figure costs milliseconds to build, and the monitor hands every plot new data
each tick. A plot that is hidden (a medium terminal hides both; the GPU row goes when
there is no GPU) keeps only the newest data, and draws it when it is shown again; a plot
given data equal to what it drew last does nothing.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from textual.widget import Widget
from textual_plotext import PlotextPlot

Data = TypeVar("Data")


class LazyPlot(PlotextPlot, Generic[Data]):
    _pending: Data | None = None
    _drawn: Data | None = None
    draws = 0  # figures built from new data (a figure for tests)

    def put(self, data: Data) -> None:
        self._pending = data
        if self.seen:
            self._draw_pending()

    @property
    def seen(self) -> bool:
        """Displayed, and so are all its containers (a hidden parent hides it too)."""
        node: Widget | None = self
        while node is not None:
            if not node.display:
                return False
            parent = node.parent
            node = parent if isinstance(parent, Widget) else None
        return True

    def on_show(self) -> None:
        self._draw_pending()

    def _draw_pending(self) -> None:
        data = self._pending
        if data is None or (self._drawn is not None and data == self._drawn):
            return
        self.plt.clear_data()
        self.plt.clear_figure()
        self.draw(data)
        self._drawn = data
        self.draws += 1
        self.refresh()

    def draw(self, data: Data) -> None:
        """Set up ``self.plt`` for ``data`` (the figure is built when Textual renders it)."""
        raise NotImplementedError
