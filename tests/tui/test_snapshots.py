"""SVG snapshots of the main states (pytest-textual-snapshot). Deterministic: replayed
recordings, a fixed clock, UTC, a fixed terminal size. After a deliberate change to the
look, inspect the report and run ``pytest tests/tui/test_snapshots.py --snapshot-update``."""

from __future__ import annotations

from tests.tui.helpers import play, replay_app

LARGE = (160, 48)


def test_main_view_two_jobs_on_overlapping_masks(snap_compare):
    assert snap_compare(replay_app("overlap"), terminal_size=LARGE, run_before=play)


def test_starved_job_selected_with_its_detail(snap_compare):
    assert snap_compare(replay_app("hogs"), terminal_size=LARGE, run_before=play)


def test_pin_modal(snap_compare):
    assert snap_compare(replay_app("narrow"), terminal_size=LARGE, run_before=play, press=["r"])


def test_thread_rows(snap_compare):
    assert snap_compare(replay_app("single_core"), terminal_size=LARGE, run_before=play, press=["t"])


def test_help(snap_compare):
    assert snap_compare(replay_app("clean"), terminal_size=LARGE, run_before=play, press=["question_mark"])


def test_small_terminal_80x24(snap_compare):
    assert snap_compare(replay_app("hogs"), terminal_size=(80, 24), run_before=play)


def test_medium_terminal_120x36(snap_compare):
    assert snap_compare(replay_app("overlap"), terminal_size=(120, 36), run_before=play)
