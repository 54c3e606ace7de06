"""``LazyPlot``: a plotext plot that builds its figure only when it can be seen and its
data changed.

A plotext figure costs milliseconds to build, and the monitor hands every plot new data
each tick. A plot that is hidden (a medium terminal hides both; the GPU row goes when
there is no GPU) keeps only the newest data, and draws it when it is shown again; a plot
given data equal to what it drew last does nothing.

plotext itself is imported when a plot is first drawn, not with the monitor: it is
1.5 MiB of the process's memory (RSS, measured on a two-core VM), and a monitor in a
medium terminal, or on a machine without a GPU and without a selected process, never
shows a plot. The widget draws as ``textual_plotext.PlotextPlot`` does: the figure
sized to the widget, in a plotext theme made from the Textual theme's colours.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

from rich.text import Text
from textual.app import RenderResult
from textual.widget import Widget

if TYPE_CHECKING:
    from textual_plotext.plot import Plot

Data = TypeVar("Data")


class LazyPlot(Widget, Generic[Data]):
    DEFAULT_CSS = """
    LazyPlot {
        width: 1fr;
        height: 1fr;
    }
    """

    _plot: Plot | None = None
    _pending: Data | None = None
    _drawn: Data | None = None
    draws = 0  # figures built from new data (a figure for tests)

    @property
    def plt(self) -> Plot:
        """The plotext figure, made (and plotext imported) on first use."""
        if self._plot is None:
            from textual_plotext.plot import Plot

            self._plot = Plot()
            self.app.theme_changed_signal.subscribe(self, lambda theme: self._register_theme(theme.name))
            self._register_theme(self.app.theme)
        return self._plot

    def put(self, data: Data) -> None:
        self._pending = data
        if self.seen:
            self._draw_pending()

    @property
    def seen(self) -> bool:
        """Laid out with room to draw in, displayed, and so are all its containers (a hidden
        parent hides it too). Before the first layout (a first view shown from the app's
        mount, before the screen's size classes hide the plots) it is not: it draws when
        it is first shown (``on_show``)."""
        if not self.size.area:
            return False
        node: Widget | None = self
        while node is not None:
            if not node.display:
                return False
            parent = node.parent
            node = parent if isinstance(parent, Widget) else None
        return True

    def on_show(self) -> None:
        if self.seen:  # a Show is queued: the screen's size classes may have hidden it since
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

    def render(self) -> RenderResult:
        plt = self._plot
        if plt is None:  # no data drawn yet (a frame laid out before the first tick, or hidden since)
            return ""
        width, height = self.size
        plt.plotsize(width, height)
        plt._set_size(width, height)  # as PlotextPlot does: plotext resizes right only with both
        plt.theme(_theme_name(self.app.theme))
        return Text.from_ansi(plt.build())

    def _register_theme(self, app_theme: str) -> None:
        """A plotext theme of the Textual theme's surface and foreground, as PlotextPlot's
        "auto" theme (registered once per Textual theme)."""
        from plotext._dict import themes
        from textual.color import Color
        from textual_plotext.plot import _rgbify_theme, _sequence

        name = _theme_name(app_theme)
        if name not in themes:
            colours = self.app.theme_variables
            surface = Color.parse(colours.get("surface", "black")).rgb
            sequence: list[str | int | tuple[int, int, int]] = list(_sequence)
            themes[name] = _rgbify_theme(
                surface, surface, Color.parse(colours.get("foreground", "white")).rgb, "default", sequence
            )
        self.refresh()


def _theme_name(app_theme: str) -> str:
    return f"textual-auto-{app_theme}"
