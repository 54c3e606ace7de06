"""F6: every column to sort by, as htop lists them, the sorted one marked; Enter sorts by
the one highlighted, Esc leaves the sort as it was. ``I`` still reverses it."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from affmon.tui.model.table import SORTS
from affmon.tui.widgets.processes import SORT_MARKS


class SortScreen(ModalScreen[str | None]):
    """Dismissed with the sort key chosen, or None."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Cancel"),
        Binding("f6", "close", "Cancel", show=False),
        Binding("q", "close", "Cancel", show=False),
    ]

    def __init__(self, current: str, reverse: bool) -> None:
        super().__init__()
        self.current = current
        self.reverse = reverse

    def compose(self) -> ComposeResult:
        options = [
            Option(f"{SORT_MARKS[self.reverse] if key == self.current else ' '} {said}", id=key)
            for key, said in SORTS.items()
        ]
        with Vertical(id="dialog"):
            yield Static("Sort by (Enter: sort, Esc: keep; I reverses)", id="dialog-text")
            yield OptionList(*options, id="sort-list")

    def on_mount(self) -> None:
        listing = self.query_one(OptionList)
        listing.highlighted = list(SORTS).index(self.current) if self.current in SORTS else 0
        listing.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_close(self) -> None:
        self.dismiss(None)
