"""The loop breakdown through the commands, on real processes (CPU only: no GPU here, so no
GPU busy share and no INPUT_BOUND; the breakdown is still shown). A loop fed by a slow
worker (``tests/helpers/loop_workload.py queue``: a batch every 50 ms, 5 ms of work on each) waits
for data most of the time. The machine may be loaded by other work: every bound leaves
room for that."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from affmon.core.model.loop import CPU_WAIT, DATA_WAIT, SHARES
from affmon.core.recording.format import read_recording
from affmon.core.rules import tick
from affmon.sources.stream import LiveSource
from tests.helpers.live import loop, workload

REPO = Path(__file__).resolve().parent.parent.parent


def affmon(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "affmon", *args], capture_output=True, text=True, timeout=timeout)


def waits_for_data(shares: dict[str, Any]) -> bool:
    """Data is the largest share of the time the loop was not queued for a CPU, at least half
    of it. On a machine loaded by other work the loop can queue for a CPU longer than it
    waits for data after each wake-up (schedstat's run-queue time, which ``test_loop_live``
    checks against the kernel's own counter): then ``cpu_wait`` may be the largest share."""
    rest = {name: shares[name] for name in SHARES if name != CPU_WAIT}
    not_queued = 1.0 - shares[CPU_WAIT]
    return max(rest, key=lambda n: rest[n]) == DATA_WAIT and shares[DATA_WAIT] >= 0.5 * not_queued


def loop_of(data: dict[str, Any], pid: int) -> dict[str, Any]:
    [process] = [p for p in data["processes"] if p["pid"] == pid]
    loop: dict[str, Any] = process["loop"]
    return loop


def test_snapshot_json_of_a_loop_fed_by_a_slow_pipeline_has_data_wait_largest() -> None:
    with loop("queue") as info:
        out = affmon("snapshot", "--pid", str(info["pid"]), "--json", "--interval", "2")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    got = loop_of(data, info["pid"])
    assert waits_for_data(got), got
    assert got["available"] is True and got["unavailable"] is None
    assert got["rate_hz"] == 20.0 and got["samples"] >= 2 * 20 * 0.3  # tens of Hz even when loaded
    assert got["gpu_busy"] is None and got["workers"]["count"] == 1
    assert sum(got[name] for name in SHARES) == pytest.approx(1.0, abs=0.01)
    # Only the loop named (its worker is watched as its descendant, not probed).
    assert [p["pid"] for p in data["processes"] if "loop" in p] == [info["pid"]]


def test_diagnose_shows_the_loop_over_its_run_and_raises_no_input_bound_without_a_gpu() -> None:
    with loop("queue") as info:
        pid = str(info["pid"])
        out = affmon("diagnose", "--pid", pid, "--json", "--interval", "1", "--samples", "4")
        text = affmon("diagnose", "--pid", pid, "--interval", "1", "--samples", "3")
    assert out.returncode in (0, 1), out.stderr
    data = json.loads(out.stdout)
    [got] = data["loops"]
    assert (got["pid"] == info["pid"] and got["name"] == "python") or got["pid"] == info["pid"]
    assert waits_for_data(got), got
    assert got["verdict"] == {DATA_WAIT: "input_bound", CPU_WAIT: "cpu_starved"}[max(SHARES, key=lambda n: got[n])]
    assert got["seconds"] >= 2.5  # the three intervals of the run, merged
    assert not {"INPUT_BOUND", "LOOP_BOUND"} & {f["code"] for f in data["findings"]}
    assert text.returncode in (0, 1), text.stderr
    [line] = [ln for ln in text.stdout.splitlines() if "loop of" in ln]
    assert f"loop of {pid}" in line and "GPU busy -; loop: " in line and "data " in line


def test_record_stores_the_loop_window_and_a_replay_recomputes_it(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with loop("queue") as info:
        out = affmon("record", "--pid", str(info["pid"]), "--duration", "2", "--interval", "1", str(path))
    assert out.returncode == 0, out.stderr
    header, samples = read_recording(path.read_text().splitlines(), "run")
    got = list(samples)
    assert len(got) == 3
    mine = [next(p for p in s.processes if p.pid == info["pid"]) for s in got]
    assert mine[0].loop is None  # the first sample closes no interval
    assert all(p.loop is not None and p.loop.probes_taken > 0 for p in mine[1:])
    state = tick.start(header.topology)
    for s in got:
        state = tick.advance(state, s)
    b = state.loops[info["pid"]].breakdown
    assert b is not None and waits_for_data(dict(b.shares)), b.to_json()


def loop_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "affmon-loop"]


def test_the_live_source_starts_the_probe_and_close_stops_its_thread() -> None:
    before = loop_threads()
    with loop("queue") as info:
        source = LiveSource((info["pid"],), interval_s=0.5)
        try:
            source.next_sample()
            probing = loop_threads()
            second = source.next_sample()
        finally:
            source.close()
        after = loop_threads()
    assert len(probing) == len(before) + 1 and probing[-1].daemon
    assert next(p for p in second.processes if p.pid == info["pid"]).loop is not None
    assert after == before and not any(t.is_alive() for t in probing if t not in before)


FORGETS_TO_CLOSE = """
import sys
from affmon.sources.stream import LiveSource
s = LiveSource((int(sys.argv[1]),))
s.next_sample(); s.next_sample()
print("sampled", flush=True)
"""


def test_a_process_that_never_closes_the_source_still_exits() -> None:
    with loop("queue") as info:
        out = subprocess.run(
            [sys.executable, "-c", FORGETS_TO_CLOSE, str(info["pid"])],
            capture_output=True,
            text=True,
            timeout=60,  # the probe's thread would hold it here forever if it were not a daemon
            cwd=REPO,
        )
    assert out.returncode == 0 and out.stdout == "sampled\n", out.stderr


# Everything imported and the arguments parsed as root: the interpreter's stdlib may be root's only.
SNAPSHOT_AS_NOBODY = """
import json, os, sys
from affmon.cli import build_parser
from affmon.commands.observe import cmd_snapshot
args = build_parser().parse_args(["snapshot", "--pid", sys.argv[1], "--json", "--interval", "1"])
os.setgroups([]); os.setgid(65534); os.setuid(65534)
sys.exit(cmd_snapshot(args))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_without_ptrace_permission_the_loop_says_unavailable_and_why() -> None:
    with loop("queue") as info:
        out = subprocess.run(
            [sys.executable, "-c", SNAPSHOT_AS_NOBODY, str(info["pid"])],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    assert out.returncode == 0, out.stderr
    got = loop_of(json.loads(out.stdout), info["pid"])
    assert got["available"] is False and "not readable" in got["unavailable"]
    assert got["blocked_split"] is False and got[DATA_WAIT] == 0


def test_a_sample_read_ahead_is_the_next_one_and_counts_from_when_its_reading_began() -> None:
    with workload("--sleepers", "2") as info:
        source = LiveSource((info["pid"],), interval_s=0.5, loops=False)
        try:
            before = time.monotonic()
            source.read_ahead()
            source.read_ahead()  # once: a second call waits on the same read
            began = source.read_started_s
            time.sleep(0.3)
            first = source.next_sample()  # the read-ahead: no new read began
            assert before <= began <= before + 0.3 and source.read_started_s == began
            assert first.monotonic_s < time.monotonic() - 0.2  # read before the sleep ended, not now
            assert any(p.pid == info["pid"] for p in first.processes)
            second = source.next_sample()  # read now
            assert source.read_started_s > began + 0.3 and second.monotonic_s > first.monotonic_s + 0.3
        finally:
            source.close()


def test_a_read_ahead_that_fails_raises_on_next_sample() -> None:
    source = LiveSource((), loops=False)
    try:

        def broken() -> None:
            raise OSError("proc went away")

        source._sources.sample = broken  # type: ignore[method-assign]
        source.read_ahead()
        with pytest.raises(OSError, match="proc went away"):
            source.next_sample()
    finally:
        source.close()
