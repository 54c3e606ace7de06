"""``affmon fleet`` end to end: the five replaying exporters of tests/export/test_export_fleet.py
scraped by a real Prometheus (tests/helpers/prom.py), read by the command as a user runs it: ``--json``,
and the terminal view in tmux at 80x24 and 160x45 (capture-pane). What it shows is held
against what Prometheus itself holds at the time (the exporters' recordings, as served):
every training job's root and every finding. Then one exporter is killed and the view says
that node is stale; then Prometheus is killed and the view says it is unreachable. Every
wait polls with a deadline."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from affmon.core.fmt import short_code
from tests.helpers.prom import (
    FLEET,
    KILLED,
    Prometheus,
    query,
    replaying_exporters,
    running,
    scrape_config,
    shared_port,
)
from tests.helpers.tmux import Tmux, tmux_server

REPO = Path(__file__).resolve().parent.parent.parent
TIMEOUT_S = 90.0  # a loaded 2-core machine: generous, and every wait polls


def wait_for(what: Callable[[], Any], timeout_s: float, message: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"waited {timeout_s:.0f} s: {message}")


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, int, dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("fleet")
    port = shared_port(FLEET)
    config = scrape_config({"affmon": [f"{a}:{port}" for a in FLEET]})
    with replaying_exporters(FLEET, port) as procs, running(tmp, config) as prometheus:
        base = prometheus.base
        wait_for(lambda: len(query(base, 'up{job="affmon"} == 1')) == len(FLEET), TIMEOUT_S, "every exporter scraped")
        wait_for(
            lambda: (
                {s["metric"]["instance"] for s in query(base, "affmon_finding_info")}
                >= {f"{a}:{port}" for a, r in FLEET.items() if r != "clean"}
            ),
            TIMEOUT_S,
            "findings of every recording but the clean one",
        )
        yield prometheus, port, procs


def roots(base: str) -> set[tuple[str, int]]:
    return {
        (s["metric"]["instance"], int(s["metric"]["pid"]))
        for s in query(base, 'affmon_process_info{training="true"}')
        if s["metric"].get("job_pid") == s["metric"]["pid"]
    }


def held(base: str) -> set[tuple[str, int, str]]:
    return {
        (s["metric"]["instance"], int(s["metric"]["pid"]), s["metric"]["code"])
        for s in query(base, "affmon_finding_info")
        if s["metric"].get("pid")
    }


def fleet_json(base: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "affmon", "fleet", "--prometheus", base, "--json", "--window", "120"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def test_json_lists_every_job_and_finding_prometheus_holds(rig):
    prometheus, _, _ = rig
    base = prometheus.base
    # Findings come and go with the recorded loops' phases: compare readings that agree.
    for _ in range(20):
        before, data, after = held(base), fleet_json(base), held(base)
        if before == after:
            break
    assert before == after, "the findings never held still for one reading"
    shown = {(f["instance"], f["pid"], f["code"]) for j in data["jobs"] for f in j["findings"]}
    assert shown == after and shown
    assert {(r["instance"], r["pid"]) for j in data["jobs"] for r in j["ranks"]} == roots(base)
    assert data["queries"] == 3
    assert [n["stale"] for n in data["nodes"]] == [None] * len(FLEET)
    severities = [
        max(({"info": 0, "warn": 1, "bad": 2}[f["severity"]] for f in j["findings"]), default=-1) for j in data["jobs"]
    ]
    assert severities == sorted(severities, reverse=True)  # worst first


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    if shutil.which("tmux") is None:
        pytest.fail("needs tmux (tests/run installs it)")
    with tmux_server("fleet", "fleet", TIMEOUT_S) as t:  # a server of its own per test
        yield t


def start(tmux: Tmux, base: str, width: int, height: int) -> str:
    # The view is started once the pane has its size, and without COLUMNS and LINES: a test
    # process's (80 and 24 where seen) would pass to tmux and the view would draw at 80x24.
    command = (
        f'while [ "$(stty size)" != "{height} {width}" ]; do sleep 0.1; done; '
        f"cd {REPO} && exec env -u COLUMNS -u LINES TERM=xterm-256color {sys.executable} -m affmon fleet "
        f"--prometheus {base} --interval 1 --window 120 --timeout 5"
    )
    tmux.run("new-session", "-d", "-s", "fleet", "-x", str(width), "-y", str(height), command)
    size = tmux.run("display-message", "-p", "-t", "fleet", "#{pane_width}x#{pane_height}").strip()
    assert size == f"{width}x{height}", size
    return tmux.wait_for(lambda s: "Jobs, worst first" in s and "Nodes, worst first" in s, "the fleet view")


@pytest.mark.parametrize(("width", "height"), [(160, 45), (80, 24)])
def test_the_view_shows_the_jobs_and_their_findings(rig, tmux, width, height):
    prometheus, _, _ = rig
    base = prometheus.base
    start(tmux, base, width, height)
    expected_roots = roots(base)
    screen = tmux.wait_for(
        lambda s: all(f" {pid} @ " in s or f" {pid} " in s for _, pid in expected_roots), "every job's root pid"
    )
    lines = screen.splitlines()
    assert len(lines) <= height and all(len(line) <= width for line in lines)
    assert f"{len(FLEET)} nodes" in screen and f"{len(expected_roots)} jobs" in screen
    # Each job's row names its worst finding's code (short), as Prometheus holds them now.
    for instance, pid in expected_roots:
        codes = {code for i, p, code in held(base) if (i, p) == (instance, pid)}
        row = next(line for line in lines if re.search(rf"\b{pid} @ ", line))
        if not codes:
            assert "none" in row, row
        else:
            assert any(short_code(code) in row for code in codes), (row, codes)
    # Enter on the top job: its node's processes, as the monitor's table shows them.
    tmux.keys("Enter")
    screen = tmux.wait_for(lambda s: "Processes, from the metrics" in s and "COMMAND" in s, "the node's processes")
    node = re.search(r"node (\S+)", screen)
    assert node is not None
    served = {int(s["metric"]["pid"]) for s in query(base, f'affmon_process_info{{instance="{node.group(1)}"}}')}
    rank = next(pid for instance, pid in expected_roots if instance == node.group(1))
    assert re.search(rf"\b{rank}\b +python\S* rank", screen), screen
    room = height - 14  # header, status, borders, column header, detail, footer

    def rows_shown(s: str) -> bool:
        return len([pid for pid in served if re.search(rf"│\s*{pid}\b", s)]) >= min(len(served), room)

    tmux.wait_for(rows_shown, f"the rows of the {len(served)} processes Prometheus holds of the node")
    tmux.keys("Escape")
    tmux.wait_for(lambda s: "Jobs, worst first" in s, "the fleet again")
    tmux.keys("q")
    wait_for(lambda: "fleet" not in tmux.run("list-sessions"), 30, "the view to quit")


def test_a_killed_exporter_is_stale_then_prometheus_killed_is_unreachable(rig, tmux):
    prometheus, port, procs = rig
    start(tmux, prometheus.base, 160, 45)
    killed = f"{KILLED}:{port}"
    tmux.wait_for(lambda s: re.search(rf"{re.escape(killed)} +ok\b", s) is not None, "the node to be fresh first")
    procs[KILLED].kill()
    procs[KILLED].wait()
    screen = tmux.wait_for(
        lambda s: re.search(rf"{re.escape(killed)} +STALE\b.*last scrape failed", s) is not None, "the node said stale"
    )
    assert "1 node stale" in screen
    lines = [line for line in screen.splitlines() if "STALE" in line or re.search(r"127\.0\.0\.\d:\d+ +ok\b", line)]
    assert killed in lines[0]  # a stale node is on top: its findings are unknown
    prometheus.kill()
    screen = tmux.wait_for(lambda s: "is unreachable" in s, "Prometheus said unreachable")
    assert f"Prometheus at {prometheus.base} is unreachable" in screen
    assert "the figures below were read at" in screen, screen  # the last ones stay, said to be old
    tmux.keys("q")
    wait_for(lambda: "fleet" not in tmux.run("list-sessions"), 30, "the view to quit")
