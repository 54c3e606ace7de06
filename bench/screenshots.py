"""Render the README's screenshots from recordings: ``python bench/screenshots.py``.

Every shot marked for the README in ``tests/tui/shots.py`` (main, findings, pin_modal,
help, demo, a CPU-only run, the tune dialog, and a starved job at 80x24, 120x30, 160x30
and 200x50) is rendered through
``shots.render``: the path the snapshot tests compare against, so the pictures and the
baselines are the same screens. They are written under ``screenshots/``.

``--png`` also writes PNGs next to them where ``rsvg-convert`` exists (librsvg2-bin).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.tui.shots import SHOTS, render  # noqa: E402


def main(png: bool) -> None:
    os.environ["TZ"] = "UTC"  # the header shows the recorded time, as the snapshot tests do
    time.tzset()
    target = ROOT / "screenshots"
    target.mkdir(exist_ok=True)
    written = []
    for shot in SHOTS:
        if shot.readme is None:
            continue
        out = target / shot.readme
        out.write_text(render(shot, title=shot.title), encoding="utf-8")
        written.append(out)
        print(f"wrote {out.relative_to(ROOT)}")
    if png and shutil.which("rsvg-convert"):
        for out in written:
            subprocess.run(["rsvg-convert", "-o", str(out.with_suffix(".png")), str(out)], check=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--png", action="store_true", help="also convert to PNG with rsvg-convert")
    main(parser.parse_args().png)
