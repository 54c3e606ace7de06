"""The GPU jobs' measured loop (bench/workloads/rate_loop.py) on a fake clock: what the RATE lines
that the scenario harnesses parse say, and when the job's sync is called."""

from __future__ import annotations

import re

from bench.workloads.rate_loop import measured_loop


class Clock:
    """Advances 0.25 s per step; reads between steps cost nothing."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_rate_lines_cover_each_window_and_the_total(capsys):
    clock = Clock()
    syncs: list[float] = []

    def step() -> int:
        clock.now += 0.25
        return 32

    done, elapsed = measured_loop(step, 5.0, 2.0, lambda: syncs.append(clock.now), "rank=1", clock)
    assert (done, elapsed) == (20 * 32, 5.0)
    lines = capsys.readouterr().out.splitlines()
    rates = [re.fullmatch(r"RATE rank=1 t=([\d.]+) samples_per_s=([\d.]+)", line) for line in lines]
    assert all(rates) and [(float(m[1]), float(m[2])) for m in rates if m] == [(2.0, 128.0), (4.0, 128.0)]
    assert syncs == [102.0, 104.0, 105.0]  # before each RATE line, and at the end


def test_no_rate_lines_without_report_every_and_no_label(capsys):
    clock = Clock()

    def step() -> int:
        clock.now += 1.0
        return 8

    assert measured_loop(step, 3.0, 0.0, lambda: None, clock=clock) == (24, 3.0)
    assert capsys.readouterr().out == ""
    measured_loop(step, 1.0, 0.5, lambda: None, clock=clock)
    assert capsys.readouterr().out.startswith("RATE t=1.0 samples_per_s=8.0")
