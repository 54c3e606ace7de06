"""The loop breakdown in the tick every front end shares: reports per probed process,
INPUT_BOUND and LOOP_BOUND debounced like the other findings, nothing raised without a
GPU's busy share or without the probe, and the JSON and text the commands print. The
samples are the H200 "clean" recording (a rank on GPU 0 with four DataLoader workers)
with synthetic loop windows and GPU utilisation put in."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from affmon.commands.diagnose import diagnose_run, findings_text, loops_text
from affmon.commands.report import snapshot_json, snapshot_text
from affmon.core.model.loop import (
    GPU_WAIT,
    OTHER,
    RUNNING,
    SHARES,
    LoopWindow,
    TaskWait,
    merge_windows,
)
from affmon.core.model.samples import Sample
from affmon.core.rules import tick
from affmon.core.rules.base import DEFAULT_THRESHOLDS, Severity
from affmon.core.rules.loop_report import combined_reports, loop_targets
from tests.helpers.loop_windows import RANK, input_window, samples, windows_st
from tests.helpers.recordings import load


def gpu_bound_window(seconds: float = 1.0) -> LoopWindow:
    return dataclasses.replace(input_window(seconds), probes={RUNNING: 2, GPU_WAIT: 18})


def run(sequence: list[Sample]) -> list[tick.Tick]:
    header, _ = load("clean")
    state = tick.start(header.topology)
    states = []
    for s in sequence:
        state = tick.advance(state, s)
        states.append(state)
    return states


def codes(state: tick.Tick) -> set[str]:
    return {f.code for f in state.findings if f.pid == RANK}


def test_input_bound_is_raised_after_raise_after_intervals_and_cleared_after_clear_after() -> None:
    t = DEFAULT_THRESHOLDS
    bad = t.raise_after + 1
    healthy = t.clear_after
    windows = [input_window()] * bad + [gpu_bound_window()] * healthy
    states = run(samples(windows, [15] * bad + [97] * healthy))[1:]  # the first sample closes nothing
    raised = ["INPUT_BOUND" in codes(s) for s in states]
    # Raised at the raise_after-th bad interval, held while bad and for clear_after - 1 clean
    # ones, gone at the clear_after-th.
    assert raised == [False] * (t.raise_after - 1) + [True] * (bad - t.raise_after + 1) + [True] * (healthy - 1) + [
        False
    ]
    found = next(f for f in states[bad - 1].findings if f.code == "INPUT_BOUND")
    assert found.severity == Severity.BAD  # the GPU under 25% busy
    assert found.evidence["loop"]["data_wait"] == pytest.approx(0.9)
    assert found.evidence["advice"]["action"] == "check_pipeline"  # 4 workers at 0.1 CPU each, not queued
    assert found.suggestion is None
    assert "GPU is busy only 15%" in found.message
    # The breakdown of each interval is on the tick, healthy ones too.
    assert states[-1].loops[RANK].verdict == "gpu_bound"
    assert states[0].loops[RANK].verdict == "input_bound"


def test_one_bad_interval_is_not_a_finding() -> None:
    states = run(samples([input_window(), gpu_bound_window(), input_window()], [15, 97, 15]))
    assert all("INPUT_BOUND" not in codes(s) for s in states)


def test_without_a_gpu_the_breakdown_is_shown_and_no_finding_raised() -> None:
    states = run(samples([input_window()] * 4, [None] * 4, gpu=False))
    last = states[-1]
    assert not codes(last) & {"INPUT_BOUND", "LOOP_BOUND"}
    r = last.loops[RANK]
    assert r.breakdown is not None and r.breakdown.gpu_busy is None and r.verdict == "input_bound"
    assert r.to_json()["gpu_busy"] is None and r.line == "GPU busy -; loop: data 90%, CPU 10%"


def test_a_gpu_without_a_utilisation_reading_is_no_gpu_busy_share() -> None:
    states = run(samples([input_window()] * 4, [None] * 4))
    assert states[-1].loops[RANK].breakdown.gpu_busy is None  # type: ignore[union-attr]
    assert not codes(states[-1]) & {"INPUT_BOUND", "LOOP_BOUND"}


def test_without_ptrace_permission_the_loop_says_unavailable_and_raises_nothing() -> None:
    states = run(samples([input_window(readable=False)] * 4, [5] * 4))
    assert not codes(states[-1]) & {"INPUT_BOUND", "LOOP_BOUND"}
    data = states[-1].loops[RANK].to_json()
    assert data["available"] is False and "not readable" in data["unavailable"]
    assert data["on_cpu"] == pytest.approx(0.1) and data["other"] == pytest.approx(0.9)  # schedstat stays exact
    assert data["samples"] == 20 and data["rate_hz"] == 20.0


def test_a_window_without_schedstat_has_no_shares_and_says_why() -> None:
    empty = dataclasses.replace(input_window(), run_ns=None, wait_ns=None)
    states = run(samples([empty] * 3, [15] * 3))
    data = states[-1].loops[RANK].to_json()
    assert data["available"] is False and "schedstat" in data["unavailable"]
    assert all(data[name] is None for name in SHARES) and data["verdict"] is None
    assert not codes(states[-1]) & {"INPUT_BOUND", "LOOP_BOUND"}


def test_loop_bound_is_raised_on_a_loop_running_python_beside_an_idle_gpu() -> None:
    busy = dataclasses.replace(input_window(), run_ns=int(0.8e9), probes={RUNNING: 16, OTHER: 4})
    states = run(samples([busy] * 3, [30] * 3))
    found = next(f for f in states[-1].findings if f.code == "LOOP_BOUND")
    assert found.pid == RANK and found.severity == Severity.WARN and found.evidence["loop"]["on_cpu"] == 0.8


def test_snapshot_json_and_text_carry_the_loop_of_the_probed_process_only() -> None:
    state = run(samples([input_window()], [34]))[-1]
    assert state.snapshot is not None
    data = snapshot_json(state.snapshot)
    loops = {p["pid"]: p["loop"] for p in data["processes"] if "loop" in p}
    assert set(loops) == {RANK}
    loop = loops[RANK]
    assert {*SHARES, "rate_hz", "samples", "verdict", "line", "workers", "available", "unavailable"} <= set(loop)
    assert sum(loop[name] for name in SHARES) == pytest.approx(1.0, abs=0.01)
    assert loop["verdict"] == "input_bound" and loop["workers"]["count"] == 4
    assert loop["line"] == "GPU busy 34%; loop: data 90%, CPU 10%"
    json.dumps(data)
    text = snapshot_text(state.snapshot)
    [line] = [ln for ln in text.splitlines() if "loop of" in ln]
    assert f"loop of {RANK}" in line and "data 90%" in line and "[input_bound]" in line


def test_diagnose_prints_one_loop_line_per_rank_and_input_bound_without_a_suggestion() -> None:
    header, _ = load("clean")
    sequence = samples([input_window()] * 3, [15] * 3)
    findings, last, loops = diagnose_run(sequence, header.topology, {})
    assert [f.code for f in findings if f.pid == RANK] == ["INPUT_BOUND"]
    text = findings_text(findings, last, 3)
    assert f"INPUT_BOUND pid {RANK}" in text and "suggested CPUs" not in text
    lines = loops_text(loops)
    assert len([ln for ln in lines if "loop of" in ln]) == 1
    assert loops[RANK].window.seconds == pytest.approx(3.0)  # the whole run, merged
    assert loops[RANK].window.probes_taken == 60


def test_combined_reports_weigh_the_gpu_busy_share_by_interval_length() -> None:
    windows = [input_window(1.0), input_window(3.0)]
    states = run(samples(windows, [10, 50]))
    merged = combined_reports([s.loops for s in states if s.closed])[RANK]
    assert merged.breakdown is not None and merged.breakdown.gpu_busy == pytest.approx((0.1 * 1 + 0.5 * 3) / 4)


@given(st.lists(windows_st, min_size=1, max_size=6))
def test_merged_windows_add_up(windows: list[LoopWindow]) -> None:
    m = merge_windows(windows)
    assert m.seconds == pytest.approx(sum(w.seconds for w in windows))
    assert m.probes_taken == sum(w.probes_taken for w in windows)
    runs = [w.run_ns for w in windows]
    assert m.run_ns == (None if None in runs else sum(r or 0 for r in runs))
    assert m.syscall_readable == all(w.syscall_readable for w in windows)


def test_merged_windows_keep_the_newest_places_the_workers_were_read_asleep_in() -> None:
    """A window reads where the workers sleep only when the loop waited for data in it; the
    merged window (``diagnose`` over its run) keeps the newest places read, not nothing
    because the last window had none."""
    window = input_window(1.0)
    assert window.workers is not None
    older, newer = (TaskWait(201, 201, "S", place, "read") for place in ("pipe_read", "futex_wait_queue"))
    read = [
        dataclasses.replace(window, workers=dataclasses.replace(window.workers, waits=(w,))) for w in (older, newer)
    ]
    none = dataclasses.replace(window, workers=dataclasses.replace(window.workers, waits=()))
    merged = merge_windows([read[0], read[1], none])
    assert merged.workers is not None and merged.workers.waits == (newer,)
    merged = merge_windows([none, none])
    assert merged.workers is not None and merged.workers.waits == ()


def test_loop_targets_are_the_ranks_and_the_named_pids() -> None:
    _, recorded = load("clean")
    s = recorded[0]
    assert loop_targets(s) == [RANK]  # the rank on a GPU, not its workers
    assert loop_targets(s, pids=(476,)) == [476, RANK]
    no_gpu = dataclasses.replace(s, processes=tuple(dataclasses.replace(p, gpu_indices=()) for p in s.processes))
    assert RANK in loop_targets(no_gpu) and not {475, 476, 477, 478} & set(loop_targets(no_gpu))
    assert loop_targets(s, pids=(999999,)) == [RANK]  # a named PID that is gone
    assert len(loop_targets(no_gpu, pids=tuple(p.pid for p in s.processes), most=3)) == 3
