"""SVG snapshots (pytest-textual-snapshot) of every shot in ``shots.SHOTS``: the main
states at 160x48 (a CPU-only run and the tune dialog among them), and a starved job at
each size a newcomer's terminal has (80x24, 120x30, 160x30, 200x50). Deterministic:
replayed recordings, a fixed clock, UTC, a fixed terminal size. The README's screenshots
are rendered through the same ``shots.render`` path (``python bench/screenshots.py``).
After a deliberate change to the look, inspect the report and run
``pytest tests/tui/test_snapshots.py --snapshot-update``."""

from __future__ import annotations

import pytest

from tests.tui.shots import SHOTS, Shot, make_app


@pytest.mark.parametrize("shot", SHOTS, ids=[s.name for s in SHOTS])
def test_snapshot(snap_compare, shot: Shot):
    assert snap_compare(make_app(shot), press=shot.press, terminal_size=shot.size, run_before=shot.before)
