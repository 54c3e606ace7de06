"""``affmon export --replay`` and ``--demo``: a recording served as if live
(affmon.export.replay). The feed and the exporter are stepped tick by tick, without
threads or sleeps; the command is run for its errors and for one short served replay."""

from __future__ import annotations

import gzip
import os
import re
import select
import signal
import subprocess
import sys

import pytest

from affmon.export.replay import ReplayFeed, check
from affmon.export.service import Exporter
from tests.helpers.export import (
    RECORDINGS,
    REPO,
    affmon,
    exposition,
    fetch,
    hogs_feed,
    one_line_error,
    parsed,
    wait_for,
)

LOOPBACK = "127.0.0.1:0"


def exporter_of(feed: ReplayFeed) -> Exporter:
    return Exporter(feed.sample, feed.topology, pace_s=feed.pace_s, replay=lambda: feed.status)


def findings(exporter: Exporter) -> set[tuple[str, str, int | None]]:
    return {(f.code, str(f.severity), f.pid) for f in exporter.state.findings}


def counter(exporter: Exporter, name: str, pid: str) -> float:
    (sample,) = [s for s in parsed(exposition(exporter.state))[name][1] if s.labels.get("pid") == pid]
    return float(sample.value)


def test_a_looping_replay_keeps_its_findings_and_counters_across_the_seam():
    """hogs: 5 samples, findings from the third on. Over three passes the findings never
    leave once raised (no alert is reset at the seam), the job's CPU counter never falls,
    and each pass adds the recording's increase again."""
    feed = hogs_feed()
    assert feed.samples == 5
    exporter = exporter_of(feed)
    seen = []
    cpu = []
    for _ in range(15):
        exporter.tick()
        seen.append(findings(exporter))
        cpu.append(counter(exporter, "affmon_process_cpu_seconds_total", "608") if exporter.state.snapshot else None)
    expected = {("CONTENDED", "bad", 608), ("GPU_STARVED", "bad", 608), ("STARVED", "bad", 608)}
    assert seen[:2] == [set(), set()]
    assert all(s == expected for s in seen[2:]), seen
    assert feed.status.restarts == 3 and not feed.status.ended
    assert exporter.state.samples_total == 15 and exporter.state.errors_total == 0
    rising = [c for c in cpu if c is not None]
    assert rising == sorted(rising) and len(rising) == 14
    # The seam (tick 6, the recording's first sample again) adds nothing; the next pass
    # adds what the first added (its counter starts at the second sample: ticks 2 to 5).
    assert cpu[5] == cpu[4]
    assert cpu[9] - cpu[6] == pytest.approx(cpu[4] - cpu[1]) and cpu[9] - cpu[6] > 0
    text = exposition(exporter.state)
    assert "affmon_export_replay_ended 0.0" in text and "affmon_export_replay_restarts_total 3.0" in text


def test_a_replay_played_once_serves_the_state_it_left_and_says_so():
    feed = hogs_feed(loop=False)
    exporter = exporter_of(feed)
    for _ in range(5):
        exporter.tick()
    last = exporter.state
    assert feed.status.ended and last.replay is not None and last.replay.ended
    for _ in range(3):
        exporter.tick()
    assert exporter.state is last  # nothing new to render
    assert exporter.state.samples_total == 5 and exporter.state.errors_total == 0
    assert len(findings(exporter)) == 3
    text = exposition(exporter.state)
    assert "affmon_export_replay_ended 1.0" in text and "affmon_export_replay_restarts_total 0.0" in text


def test_wall_time_is_when_played_and_the_pace_is_the_recorded_gap_over_the_speed():
    clock = iter([1000.0, 1001.0, 1002.5])
    feed = ReplayFeed(str(RECORDINGS / "clean.jsonl.gz"), 4.0, clock=lambda: next(clock))
    recorded = [feed.sample() for _ in range(3)]
    assert [s.wall_time_s for s in recorded if s is not None] == [1000.0, 1001.0, 1002.5]
    gap = feed._source.pace_s() * 4.0  # the recorded gap after the third sample
    assert 0.5 < gap < 2.0 and feed.pace_s() == pytest.approx(gap / 4.0)


def test_a_live_exporter_serves_no_replay_series():
    exporter = Exporter(lambda: None, hogs_feed().topology)
    exporter.tick()
    assert "affmon_export_replay_ended" not in parsed(exposition(exporter.state))


def damaged(tmp_path, name: str, edit) -> str:
    with gzip.open(RECORDINGS / "hogs.jsonl.gz", "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    path = tmp_path / name
    path.write_text("\n".join(edit(lines)) + "\n", encoding="utf-8")
    return str(path)


def test_check_refuses_a_bad_line_anywhere_naming_it(tmp_path):
    path = damaged(tmp_path, "late.jsonl", lambda lines: [*lines[:4], '{"sample": {"monotonic_s": "x"}}', *lines[5:]])
    with pytest.raises(Exception, match="line 5"):
        check(path)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--replay", "/nonexistent/rec.jsonl.gz"], "no such file"),
        (["--replay", "/"], "directory"),
        (["--replay", "FIFO"], "not a regular file"),
        (["--replay", "LATE"], "line 5"),
        (["--replay", "TRUNCATED_GZIP"], "hogs-cut.jsonl.gz"),
        (["--replay", "EMPTY"], "empty.jsonl"),
        (["--demo", "--replay", "LATE"], "do not go together"),
        (["--demo", "--pid", "1"], "do not go together"),
        (["--demo", "--interval", "2"], "own pace"),
        (["--once"], "goes with --replay"),
        (["--speed", "2"], "goes with --replay"),
        (["--demo", "--speed", "0"], "--speed"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, says):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cut = tmp_path / "hogs-cut.jsonl.gz"
    data = (RECORDINGS / "hogs.jsonl.gz").read_bytes()
    cut.write_bytes(data[: len(data) // 2] + bytes(64) + data[len(data) // 2 :])
    (tmp_path / "empty.jsonl").write_text("")
    files = {
        "FIFO": str(fifo),
        "LATE": damaged(tmp_path, "late.jsonl", lambda ls: [*ls[:4], "{not json", *ls[5:]]),
        "TRUNCATED_GZIP": str(cut),
        "EMPTY": str(tmp_path / "empty.jsonl"),
    }
    err = one_line_error(affmon("export", *[files.get(a, a) for a in args], "--listen", "127.0.0.1:0"))
    assert says in err


def test_the_command_plays_a_recording_once_fast_and_stops_on_sigterm():
    command = ["export", "--replay", str(RECORDINGS / "narrow.jsonl.gz"), "--once", "--speed", "5"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "affmon", *command, "--listen", LOOPBACK],
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert proc.stderr is not None
        ready, _, _ = select.select([proc.stderr], [], [], 30)
        line = proc.stderr.readline() if ready else ""
        match = re.search(r"serving http://127\.0\.0\.1:(\d+)/metrics, replaying narrow\.jsonl\.gz .*, once$", line)
        assert match, line
        url = f"http://127.0.0.1:{match[1]}/metrics"
        wait_for(lambda: "affmon_export_replay_ended 1.0" in fetch(url), 30, "the replay to end")
        text = fetch(url)
        assert "affmon_export_samples_total 5.0" in text
        assert 'affmon_finding_info{code="MASK_TOO_NARROW",gpu="",pid="695",severity="bad"} 1.0' in text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_demo_is_the_recording_the_monitor_replays():
    """``export --demo`` serves affmon/data's run: the job starved by the hogs first."""
    from affmon.commands.tui import demo_recording

    feed = ReplayFeed(demo_recording())
    assert feed.samples == 46
    exporter = exporter_of(feed)
    for _ in range(4):
        exporter.tick()
    assert {code for code, _, _ in findings(exporter)} >= {"STARVED", "CONTENDED"}
