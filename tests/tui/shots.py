"""The one path from a recording to an SVG: the snapshot tests (``test_snapshots.py``) and
the README's screenshots (``bench/screenshots.py``) both render these shots through
``render``, so a baseline and the picture in the README cannot drift apart.

Each shot replays a recording into the app (a fake pinner, a fixed clock), steps through
every sample, presses its keys, and takes the screenshot Textual's snapshot plugin takes
(``take_svg_screenshot``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textual._doc import take_svg_screenshot

from affmon.sources.stream import ReplaySource
from affmon.tui.app import AffmonApp
from tests.tui.helpers import FIXED_CLOCK, FakePinner, play, replay_app

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "affmon" / "data" / "demo.jsonl.gz"
LARGE = (160, 48)
SIZES = ((80, 24), (120, 30), (160, 30), (200, 50))  # what a newcomer's terminals are


@dataclass(frozen=True)
class Shot:
    """``recording``: a name under tests/fixtures/recordings, or "demo" (``affmon --demo``);
    ``readme``: the file under screenshots/ this shot is, when the README shows it."""

    name: str
    recording: str
    size: tuple[int, int] = LARGE
    keys: tuple[str, ...] = ()
    readme: str | None = None

    @property
    def title(self) -> str:
        return "affmon --demo" if self.recording == "demo" else f"affmon --replay {self.recording}.jsonl.gz"


SHOTS = (
    Shot("main_two_jobs_on_overlapping_masks", "overlap", readme="main.svg"),
    Shot("starved_job_selected_with_its_detail", "hogs", readme="findings.svg"),
    Shot("pin_modal", "narrow", keys=("r",), readme="pin_modal.svg"),
    Shot("thread_rows", "single_core", keys=("t",)),
    Shot("help", "clean", keys=("question_mark",), readme="help.svg"),
    Shot("help_80x24", "clean", size=(80, 24), keys=("question_mark",)),
    # The demo at its end: the rank (below the hogs that used more CPU) and its history. The
    # cursor is still on the rank it followed while the rank was the worst job: once no job
    # has a finding, none is worse, and the cursor stays where it is.
    Shot("demo_end", "demo", readme="demo.svg"),
    *(Shot(f"hogs_{w}x{h}", "hogs", size=(w, h), readme=f"{w}x{h}.svg") for w, h in SIZES),
    Shot("detail_full_size_80x24", "hogs", size=(80, 24), keys=("enter",)),
    Shot("filter_matches_nothing_80x24", "hogs", size=(80, 24), keys=("slash", "z", "z", "z", "enter")),
)


def make_app(shot: Shot) -> AffmonApp:
    if shot.recording == "demo":
        return AffmonApp(
            ReplaySource(str(DEMO)),
            FakePinner(),
            clock=lambda: FIXED_CLOCK,
            autostart=False,
            restart=lambda: ReplaySource(str(DEMO)),
            demo=True,
        )
    return replay_app(shot.recording)


def render(shot: Shot, title: str | None = None) -> str:
    """The SVG of ``shot``: what ``snap_compare`` compares, and what the README shows."""
    svg: Any = take_svg_screenshot(
        app=make_app(shot), press=shot.keys, terminal_size=shot.size, run_before=play, title=title
    )
    return str(svg)
