"""Render the README's screenshots from recordings: ``python bench/screenshots.py``.

Replays a recording into the app (no sampling of this machine, a fake pinner), steps
through every sample, and saves SVGs under ``screenshots/``:

* main.svg      the overlap recording (two jobs on overlapping masks), main view
* findings.svg  the hogs recording, the starved rank selected with its detail pane
* pin_modal.svg the narrow recording, ``r`` pressed on the rank
* demo.svg      the packaged demo (``affmon --demo``) at its end: the job's wait ratio
                history before and after affmon's pin --isolate

``--png`` also writes PNGs next to them where ``rsvg-convert`` exists (librsvg2-bin).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from affmon.sources.stream import ReplaySource  # noqa: E402
from affmon.tui.app import AffmonApp  # noqa: E402
from affmon.tui.pinner import ReplayPinner  # noqa: E402

RECORDINGS = ROOT / "tests" / "fixtures" / "recordings"
DEMO = str(ROOT / "affmon" / "data" / "demo.jsonl.gz")
SIZE = (160, 48)


async def shoot(recording: str, out: Path, keys: tuple[str, ...] = (), size: tuple[int, int] = SIZE) -> None:
    path = recording if "/" in recording else str(RECORDINGS / recording)
    app = AffmonApp(ReplaySource(path), ReplayPinner(), autostart=False)
    async with app.run_test(size=size) as pilot:
        while not app.source.exhausted:
            app.tick()
            await app.workers.wait_for_complete()
            await pilot.pause()
        for key in keys:
            await pilot.press(key)
            await pilot.pause()
        await pilot.pause()
        title = "affmon --demo" if recording == DEMO else f"affmon --replay {recording}"
        out.write_text(app.export_screenshot(title=title), encoding="utf-8")
    print(f"wrote {out.relative_to(ROOT)}")


async def main(png: bool) -> None:
    target = ROOT / "screenshots"
    target.mkdir(exist_ok=True)
    shots = [
        ("overlap.jsonl.gz", target / "main.svg", ()),
        ("hogs.jsonl.gz", target / "findings.svg", ()),
        ("narrow.jsonl.gz", target / "pin_modal.svg", ("r",)),
        (DEMO, target / "demo.svg", ("down",) * 4),  # the rank, below the 4 busiest hogs
    ]
    for recording, out, keys in shots:
        await shoot(recording, out, keys)
    if png and shutil.which("rsvg-convert"):
        for _, out, _ in shots:
            subprocess.run(["rsvg-convert", "-o", str(out.with_suffix(".png")), str(out)], check=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--png", action="store_true", help="also convert to PNG with rsvg-convert")
    asyncio.run(main(parser.parse_args().png))
