"""The demo shipped in the package: a real H200 run, starved by hogs, then fixed by pin."""

import gzip
import itertools
import subprocess
import sys

from affmon.commands.tui import demo_recording
from affmon.core.model.rates import make_snapshot
from affmon.core.recording.format import read_recording
from affmon.core.rules.base import RuleInputs
from affmon.core.rules.evaluate import FindingTracker, evaluate


def test_demo_shows_the_findings_and_then_the_fix():
    with gzip.open(demo_recording(), "rt", encoding="utf-8") as f:
        header, samples = read_recording(f, "demo")
        samples = list(samples)
    assert len(samples) >= 40 and header.nvml and header.nvml.startswith("NVML:")
    tracker = FindingTracker()
    active = []
    for a, b in itertools.pairwise(samples):
        tracker = tracker.update(evaluate(make_snapshot(a, b, header.topology), RuleInputs(header.topology)))
        active.append({f.code for f in tracker.active})
    assert {"STARVED", "CONTENDED"} <= active[len(active) // 4]  # the hogs starve the job
    assert active[-1] == set()  # after affmon's pin --isolate, nothing is left


def test_demo_needs_a_terminal_and_says_so_in_one_line():
    out = subprocess.run(
        [sys.executable, "-m", "affmon", "--demo"], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1 and "needs a terminal" in out.stderr
