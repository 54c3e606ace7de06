"""SVG snapshots (pytest-textual-snapshot) of every shot in ``shots.SHOTS``: the main
states at 160x48 (a CPU-only run and the tune dialog among them), and a starved job at
each size a newcomer's terminal has (80x24, 120x30, 160x30, 200x50). Deterministic:
replayed recordings (the header's clock is the recording's time), UTC, a fixed terminal
size. The README's screenshots are rendered through the same ``shots.render`` path
(``python bench/screenshots.py``). After a deliberate change to the look, inspect the
report and run ``pytest tests/tui/test_snapshots.py --snapshot-update``.

Each shot is taken twice: with every override of Textual's privates
(``affmon.tui.textual_fast``), against the baseline through the plugin, and on stock
Textual (the overrides off), against the same baseline file: the overrides change what
the monitor costs, never what it draws."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytest_textual_snapshot import normalize_svg

from affmon.tui import textual_fast
from tests.tui.shots import SHOTS, Shot, make_app, screenshot

BASELINES = Path(__file__).parent / "__snapshots__" / "test_snapshots"
IDS = [s.name for s in SHOTS]


@pytest.mark.parametrize("shot", SHOTS, ids=IDS)
def test_snapshot(snap_compare, shot: Shot):
    app = make_app(shot, textual_fast.ALL)
    assert app.textual_overrides == textual_fast.ALL  # the installed Textual is one they were written for
    assert snap_compare(app, press=shot.press, terminal_size=shot.size, run_before=shot.before)


@pytest.mark.parametrize("shot", SHOTS, ids=IDS)
async def test_snapshot_on_stock_textual(shot: Shot):
    app = make_app(shot, textual_overrides=())
    assert app.textual_overrides == frozenset()
    assert not isinstance(app.panes.table, textual_fast.LeanTable)
    drawn = await screenshot(app, shot)
    baseline = BASELINES / f"test_snapshot[{shot.name}].svg"
    assert normalize_svg(str(drawn)) == normalize_svg(baseline.read_text(encoding="utf-8")), (
        f"{shot.name} on stock Textual differs from {baseline.name}"
    )
