"""The monitor's ``u`` result: its headline says every journaled mask is back only when
no thread was left as found (changed since the pin, or with a mask of its own); otherwise
it counts those the lines below name."""

from __future__ import annotations

from affmon.actions.threads import ThreadResult
from affmon.actions.undo import UndoResult
from affmon.tui.palette import Palette
from affmon.tui.screens import undo_result_text

PALETTE = Palette("red", "yellow", "green", "cyan", "grey", "dim", "white", ("blue",))
BACK = ThreadResult(10, 10, frozenset({1}), frozenset({0, 1}), "restored")
CHANGED = ThreadResult(
    10, 11, frozenset({0}), frozenset({0}), "not-moved", "changed since the pin: its mask is 0: left alone"
)


def test_the_headline_says_every_mask_is_back_only_when_none_was_left() -> None:
    all_back = undo_result_text(UndoResult(True, ("id",), (BACK,), None), PALETTE).plain
    assert all_back.splitlines()[0] == "undone: every journaled mask is back"
    some_left = undo_result_text(UndoResult(True, ("id",), (BACK, CHANGED), None), PALETTE).plain
    assert some_left.splitlines()[0] == "undone, but 1 thread left as found (named below)"
    assert "every journaled mask is back" not in some_left
    assert "changed since the pin" in some_left
