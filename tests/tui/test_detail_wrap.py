"""The detail pane's lines wrap at the pane's width, at any terminal size and after a
resize, each continuation indented under the text after its line's bullet or label: a
continuation flush left reads as a line of its own ("0), so they queue 95% of the time").

The app is played from the starved job's recording, whose findings have long messages
and evidence (the hogs it names, its figures); what is drawn is read back line by line
from the widget and matched to the lines it was given."""

from __future__ import annotations

import pytest
from rich.cells import cell_len

from affmon.core.rules.base import Finding, Severity
from affmon.tui.app import AffmonApp
from affmon.tui.palette import Palette
from affmon.tui.widgets.detail import DetailText, detail_lines, hang_wrap
from tests.helpers.recordings import last_view
from tests.tui.helpers import play, replay_app

PALETTE = Palette("red", "yellow", "green", "cyan", "grey", "dim", "white", ("blue",))
LABELS = ("  others: ", "  advice: ", "  what to change: ", "  no pin: ")


def _ink(text: str) -> str:
    return "".join(text.split())


def wrapped(source: list[str], drawn: list[str], width: int) -> list[tuple[str, list[str]]]:
    """Each source line with the drawn lines it became (matched by their characters, so
    a word cut at the edge still matches); asserts that no drawn line is wider than
    ``width`` and that every character of the source is drawn (none cut off)."""
    assert all(cell_len(line.rstrip()) <= width for line in drawn), drawn
    out: list[tuple[str, list[str]]] = []
    rest = [line.rstrip() for line in drawn]
    for src in source:
        want, got, parts = _ink(src), "", []
        if not want:  # a blank line
            assert rest and not rest[0], (src, rest[:1])
            out.append((src, [rest.pop(0)]))
            continue
        while rest and len(got) < len(want):
            parts.append(rest.pop(0))
            got += _ink(parts[-1])
        assert got == want, f"{src!r} drawn as {parts!r}"
        out.append((src, parts))
    assert not any(rest), rest
    return out


def assert_hanging(source: list[str], drawn: list[str], width: int) -> int:
    """No continuation starts flush left; an "others:" or "advice:" line's start under
    the text after its label. Returns how many continuations there were."""
    continuations = 0
    for src, parts in wrapped(source, drawn, width):
        label = next((lb for lb in LABELS if src.startswith(lb)), None)
        for cont in parts[1:]:
            continuations += 1
            assert cont.startswith("  ") and cont.strip(), f"continuation of {src[:40]!r} flush left: {cont!r}"
            if label is not None:
                indent = len(cont) - len(cont.lstrip())
                assert indent == len(label), f"{cont!r} not under the text after {label!r}"
    return continuations


def drawn_detail(app: AffmonApp) -> tuple[list[str], list[str], int]:
    """The detail's source lines, the lines drawn, and the width they were drawn at."""
    detail = app.query_one(DetailText)
    width = detail.size.width
    source = str(detail.render()).rstrip("\n").split("\n")
    drawn = [detail.render_line(y).text for y in range(detail.size.height)]
    while drawn and not drawn[-1].strip():
        drawn.pop()  # the blank lines below the text, down to the pane's height
    return source, drawn, width


@pytest.mark.parametrize(
    ("size", "keys"),
    [((80, 24), ("enter",)), ((140, 40), ()), ((140, 40), ("enter",)), ((200, 50), ()), ((200, 50), ("enter",))],
    ids=["80x24-full-size", "140x40", "140x40-full-size", "200x50", "200x50-full-size"],
)
async def test_evidence_wraps_with_a_hanging_indent(size: tuple[int, int], keys: tuple[str, ...]) -> None:
    app = replay_app("hogs")
    async with app.run_test(size=size) as pilot:
        await play(pilot)
        for key in keys:
            await pilot.press(key)
        await pilot.pause()
        source, drawn, width = drawn_detail(app)
        assert any("others: " in line for line in source)  # the hogs it names: a long line
        assert assert_hanging(source, drawn, width) >= 2


async def test_a_resize_wraps_again_at_the_new_width() -> None:
    app = replay_app("hogs")
    async with app.run_test(size=(140, 40)) as pilot:
        await play(pilot)
        await pilot.press("enter")
        await pilot.pause()
        source, drawn, narrow = drawn_detail(app)
        assert_hanging(source, drawn, narrow)
        await pilot.resize_terminal(200, 50)
        await pilot.pause()
        await pilot.pause()
        source, drawn, wide = drawn_detail(app)
        assert wide > narrow
        assert assert_hanging(source, drawn, wide) >= 1
        assert max(cell_len(line.rstrip()) for line in drawn) > narrow  # the new width is used


LONG = Finding(
    "CONTENDED",
    Severity.BAD,
    608,
    (608,),
    "other processes ran busy threads on the CPUs this job uses (0-2,11-13,15): "
    + ", ".join(f"{pid} (python3)" for pid in range(590, 606)),
    evidence={
        "wait_ratio": 0.459,
        "job_cpus": "0-2,11-13,15",
        "threads": [{"tid": 600 + i, "role": "DataLoader worker", "mask": "0", "wait_ratio": 0.95} for i in range(6)],
        "others": [{"pid": 590 + i, "name": "python3", "cpu_percent": 88.0, "cpus": str(i)} for i in range(9)],
        "a_key_longer_than_any_line": "x" * 260,
    },
    remedy="move the other tenants' processes off CPUs 0-2,11-13,15 or give the job CPUs of its own, "
    "then look at the job's wait ratio again; " * 3,
)


@pytest.mark.parametrize("width", [40, 78, 80, 138, 140, 198, 200])
def test_the_text_builder_at_a_width(width):
    row = last_view("hogs").process(608)
    assert row is not None
    lines = detail_lines(row, [LONG], PALETTE)
    drawn = [piece.plain for line in lines for piece in hang_wrap(line, width, line.hang)]
    assert assert_hanging([line.plain for line in lines], drawn, width) >= 3
