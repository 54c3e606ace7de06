"""The one path from a recording to an SVG: the snapshot tests (``test_snapshots.py``) and
the README's screenshots (``bench/screenshots.py``) both render these shots through
``render``, so a baseline and the picture in the README cannot drift apart.

Each shot replays a recording into the app (a fake pinner; the header's clock shows the
recording's time), steps through every sample, presses its keys, and takes the screenshot
Textual's snapshot plugin takes (``screenshot``: the same steps, through Textual's public
API). A shot of the tune dialog (``T``) hands the pinner a
``RecordedTune``: the rows ``Tuner`` lists, from the recording."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from textual.pilot import Pilot

from affmon.actions.journal import Journal
from affmon.actions.tune import Row, Tuner, TuneResult
from affmon.core.errors import AffmonError
from affmon.core.model.jobs import Job
from affmon.core.model.rates import Snapshot, make_snapshot
from affmon.core.plan.advice import job_of, movable_occupants
from affmon.core.plan.placements import Placement
from affmon.core.plan.tuning import ScoreKind
from affmon.sources.stream import ReplaySource
from affmon.tui.app import AffmonApp
from tests.helpers.recordings import load
from tests.tui.helpers import FakePinner, play, replay_app

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "affmon" / "data" / "demo.jsonl.gz"
LARGE = (160, 48)
SIZES = ((80, 24), (120, 30), (160, 30), (200, 50))  # what a newcomer's terminals are


@dataclass(frozen=True)
class Shot:
    """``recording``: a name under tests/fixtures/recordings, or "demo" (``affmon --demo``);
    ``readme``: the file under screenshots/ this shot is, when the README shows it;
    ``tune``: the job ``T`` tunes (a ``RecordedTune`` of it is handed to the pinner), and
    the shot waits for the dialog's worker to list the rows before it is taken."""

    name: str
    recording: str
    size: tuple[int, int] = LARGE
    keys: tuple[str, ...] = ()
    readme: str | None = None
    tune: int | None = None

    @property
    def press(self) -> tuple[str, ...]:
        """The keys Textual presses after ``before``: none where ``before`` pressed them."""
        return () if self.tune is not None else self.keys

    async def before(self, pilot: Pilot[None]) -> None:
        """Every sample played; for a tune shot, its keys pressed too, and the workers
        they started (the dialog's listing of the rows) waited for."""
        await play(pilot)
        if self.tune is not None:
            await pilot.press(*self.keys)
            await pilot.app.workers.wait_for_complete()
            await pilot.pause()

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
    # No NVML: the header says so in one line, and there is no GPU pane.
    Shot("cpu_only", "cpu_only", readme="cpu_only.svg"),
    # T on the starved job: its candidates, whom they move, how long trying them takes.
    Shot("tune_dialog", "hogs", keys=("T",), readme="tune.svg", tune=608),
)


class _RecordedTuner(Tuner):
    """``Tuner`` listing its rows over recorded intervals, judging the others a row would
    move from the recording (its processes are not on this machine for ``/proc`` to
    judge: all that ``movable_occupants`` finds)."""

    def list_rows(self, window: list[Snapshot]) -> tuple[Row, ...]:
        job = job_of(window[-1], self.pid)
        assert job is not None, f"{self.pid} is no job of the recording"
        self._list_rows(job, window[-1], window)
        return self.rows

    def _to_move(self, snapshot: Snapshot, job: Job, placement: Placement) -> tuple[tuple[int, int], ...]:
        if not placement.isolate:
            return ()
        found = (snapshot.process(o.pid) for o in movable_occupants(snapshot, job, placement.cpus))
        return tuple(sorted((p.sample.pid, p.sample.start_ticks) for p in found if p is not None))


class RecordedTune:
    """The tune dialog's first screen from a recording: ``Tuner``'s own rows (the starting
    placement, then the planner's candidates) over the recording's last two intervals.
    It never runs (nothing here may pin): ``step`` refuses."""

    def __init__(self, recording: str, pid: int) -> None:
        header, samples = load(recording)
        root = next(p for p in samples[-1].processes if p.pid == pid)
        self._tuner = _RecordedTuner(
            pid,
            start_ticks=root.start_ticks,
            sampler=None,  # type: ignore[arg-type]  # never sampled: the samples are the recording's
            topology=header.topology,
            journal=Journal(os.devnull),  # never written: nothing runs
        )
        self._window = [make_snapshot(a, b, header.topology) for a, b in zip(samples[-3:-1], samples[-2:], strict=True)]
        self.settle_s, self.window_s = self._tuner.settle_s, self._tuner.window_s

    @property
    def score_kind(self) -> ScoreKind:
        return self._tuner.score_kind

    @property
    def rows(self) -> tuple[Row, ...]:
        return self._tuner.rows

    def started(self, pid: int, start_ticks: int, on_change: Callable[[Row], None]) -> None:
        pass

    def prepare(self) -> tuple[Row, ...]:
        return self.rows or self._tuner.list_rows(self._window)

    def set_isolation(self, on: bool) -> tuple[Row, ...]:
        return self._tuner.set_isolation(on)

    def step(self) -> bool:
        raise AffmonError("a recording's job is not tuned")

    def result(self) -> TuneResult:
        raise AffmonError("a recording's job is not tuned")

    def abort(self) -> None:
        pass

    def close(self) -> None:
        pass


def make_app(shot: Shot, textual_overrides: Collection[str] | None = None) -> AffmonApp:
    """``textual_overrides``: ``AffmonApp``'s (None: as ``AFFMON_STOCK_TEXTUAL`` says)."""
    if shot.recording == "demo":
        return AffmonApp(
            ReplaySource(str(DEMO)),
            FakePinner(),
            autostart=False,
            restart=lambda: ReplaySource(str(DEMO)),
            demo=True,
            textual_overrides=textual_overrides,
        )
    pinner = FakePinner()
    if shot.tune is not None:
        pinner.tune_sessions.append(RecordedTune(shot.recording, shot.tune))
    return replay_app(shot.recording, pinner, textual_overrides=textual_overrides)


async def screenshot(app: AffmonApp, shot: Shot, title: str | None = None) -> str:
    """The SVG of ``app`` run as ``shot`` says, taken after the steps Textual's snapshot
    plugin takes (``before``, a pause, the keys, the animations waited for)."""
    async with app.run_test(size=shot.size) as pilot:
        await shot.before(pilot)
        await pilot.pause()
        await pilot.press(*shot.press)
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()
        await pilot.pause()
        await pilot.wait_for_scheduled_animations()
        return app.export_screenshot(title=app.title if title is None else title, simplify=True)


def render(shot: Shot, title: str | None = None, textual_overrides: Collection[str] | None = None) -> str:
    """The SVG of ``shot``: what ``snap_compare`` compares, and what the README shows."""
    return asyncio.run(screenshot(make_app(shot, textual_overrides), shot, title))
