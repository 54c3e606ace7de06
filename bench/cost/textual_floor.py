"""The floor of a Textual monitor: a screen of one header line whose clock changes every
second and a footer of key hints, and nothing else. ``tui_cost --floor`` runs it beside
affmon and htop: the CPU a Textual app needs to redraw a clock at 1 Hz, whatever it shows
below it (its event loop, its input thread, one line rendered and written). It runs
with Textual's own terminal driver, whose input thread wakes ten times a second; affmon's
(``affmon.tui.textual_fast.QuietLinuxDriver``) sleeps until a key, so affmon's floor is
below this one.

    python -m bench.cost.textual_floor
"""

from __future__ import annotations

import time
from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer, Static


class Floor(App[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("q", "quit", "Quit")]

    def compose(self) -> ComposeResult:
        yield Static(id="clock")
        yield Footer()

    def on_mount(self) -> None:
        self.tick()
        self.set_interval(1.0, self.tick)

    def tick(self) -> None:
        self.query_one("#clock", Static).update(f" floor  │  {time.strftime('%H:%M:%S')}", layout=False)


if __name__ == "__main__":
    Floor().run()
