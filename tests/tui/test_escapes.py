"""A crafted recording replayed in the monitor: process, thread, user, GPU and host names
that hold escape sequences, C1 and bidi controls and Rich markup reach no widget as such.
Every pane on screen (process table with thread rows, detail pane, thread table, status
line, header, GPU panel, and the ``r`` dialog that names the processes to move off) is
rendered, and its text holds none of them; the markup is shown literally."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

from rich.console import Console

from affmon.sources.stream import ReplaySource
from affmon.tui.app import AffmonApp
from affmon.tui.screens import PinScreen
from tests.helpers.recordings import RECORDINGS
from tests.tui.helpers import FakePinner, is_active, play

SIZE = (160, 48)
TITLE = "\x1b]0;PWNED\x07"
WIPE = "\x1b[2J\x1b[H"
MARKUP = "[red]w[/red]"
HOGS = range(591, 607)  # the 16 `python -c 'while True: pass'` tenants of hogs.jsonl.gz
WORKERS = range(659, 663)  # the job's DataLoader workers
JOB = 608


def crafted_recording(tmp_path: Path) -> Path:
    """hogs.jsonl.gz with hostile names, written under a hostile file name."""
    with gzip.open(RECORDINGS / "hogs.jsonl.gz", "rt", encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    header, samples = lines[0], lines[1:]
    header["host"] = f"{TITLE}host"
    header["nvml"] = "NVML: \x1b[5mblink\u202e"
    for record in samples:
        sample = record["sample"]
        for gpu in sample["gpus"]:
            gpu["name"] = f"\x1b]0;GPU\x07{gpu['name']}"
        for p in sample["processes"]:
            if p["pid"] in HOGS:
                p["name"], p["user"], p["cmdline"] = TITLE, "\x1b[31mroot", f"{WIPE}python -c spin\n\u202eevil"
                for t in p["threads"]:
                    t[2] = "\x1b[2J"
            elif p["pid"] in WORKERS:
                p["name"] = MARKUP
            elif p["pid"] == JOB:
                p["cmdline"] = f"python3 train.py \x9b2J\u2028{TITLE}"
                for t in p["threads"][1:]:
                    t[2] = "\x9b2J\x07"
    path = tmp_path / f"{TITLE}\n.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    return path


def screen_text(app: AffmonApp) -> str:
    """What the terminal would be sent for the whole screen, without Textual's own
    cursor moves and styles: the text of every segment drawn."""
    console = Console(width=SIZE[0], height=SIZE[1], file=io.StringIO(), record=True, force_terminal=True)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text(styles=False)


async def test_a_crafted_replay_puts_no_control_character_on_screen(tmp_path):

    shots = []
    app = AffmonApp(ReplaySource(str(crafted_recording(tmp_path))), FakePinner(), autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        assert app.selected_pid == JOB  # its CONTENDED finding names the hogs
        shots.append(("table and detail", screen_text(app)))
        shots.append(("svg", app.export_screenshot()))
        await pilot.press("t")  # thread rows under each process
        shots.append(("threads", screen_text(app)))
        await pilot.press("t", "r")
        assert isinstance(app.screen, PinScreen)
        await pilot.press("i")  # isolate: lists the hogs it would move off
        shots.append(("pin dialog", screen_text(app)))
        shots.append(("pin dialog svg", app.export_screenshot()))
    shots = shots
    for what, text in shots:
        assert [c for c in text if c != "\n" and is_active(c)] == [], what
    table, _, threads, dialog, _ = (text for _, text in shots)
    assert "?]0;PWNED?host" in table  # the header's host
    assert "?]0;PWNED?" in table and MARKUP in table  # hogs named in the finding, workers in the table
    assert "?2J?" in threads and "python3 train.py ?2J??" in table  # the job's threads and command line
    assert "?]0;PWNED?" in dialog
