"""The fleet model (``affmon.fleet.model``), pure: on the answers a real Prometheus gave to the
fleet's queries over the five replaying exporters (tests/fixtures/fleet/, recorded by the
command in its README), each checked against the plain series recorded at the same instant;
and table-driven cases of the findings' ages, the stale rules and the sort."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from affmon.core import fmt
from affmon.core.rules.base import Severity
from affmon.fleet.model import (
    FleetFinding,
    Node,
    age_text,
    findings_with_age,
    node_order,
    node_processes,
    stale_reason,
)
from affmon.fleet.source import Answers, Cost
from affmon.fleet.text import findings_text, fleet_json, plain, shares_text

FIXTURES = Path(__file__).parent.parent / "fixtures" / "fleet"
SEVERITY = {"info": Severity.INFO, "warn": Severity.WARN, "bad": Severity.BAD}


def recorded(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


def raw_findings(data: dict[str, Any]) -> dict[tuple[str, str, str, str], Severity]:
    """(instance, pid, gpu, code) -> the worst severity, from the plain affmon_finding_info series."""
    out: dict[tuple[str, str, str, str], Severity] = {}
    for series in data["raw"]["affmon_finding_info"]:
        m = series["metric"]
        key = (m["instance"], m.get("pid", ""), m.get("gpu", ""), m["code"])
        out[key] = max(out.get(key, Severity.INFO), SEVERITY[m["severity"]])
    return out


def raw_roots(data: dict[str, Any]) -> set[tuple[str, int]]:
    """(instance, pid) of every training job's root: its own job_pid."""
    return {
        (s["metric"]["instance"], int(s["metric"]["pid"]))
        for s in data["raw"]["affmon_process_info"]
        if s["metric"].get("training") == "true" and s["metric"].get("job_pid") == s["metric"]["pid"]
    }


@pytest.mark.parametrize("name", ["five", "one_killed"])
def test_the_findings_are_the_ones_prometheus_holds(name):
    data = recorded(name)
    fleet = Answers.from_json(data["answers"]).fleet()
    got = {
        (f.instance, str(f.pid or ""), "" if f.gpu is None else str(f.gpu), f.code): f.severity for f in fleet.findings
    }
    assert got == raw_findings(data)
    assert got  # the recordings hold findings: a model that drops them all fails here
    for f in fleet.findings:
        assert 0 <= f.age_s <= data["answers"]["window_s"]


@pytest.mark.parametrize("name", ["five", "one_killed"])
def test_every_training_job_is_listed_once_with_its_findings(name):
    data = recorded(name)
    fleet = Answers.from_json(data["answers"]).fleet()
    roots = {(r.instance, r.pid) for j in fleet.jobs for r in j.ranks}
    assert roots == raw_roots(data)
    assert sum(len(j.ranks) for j in fleet.jobs) == len(roots)
    held = raw_findings(data)
    for job in fleet.jobs:
        (rank,) = job.ranks  # no scheduler placed these recordings' ranks: one job each
        assert {(f.code, f.gpu) for f in job.findings} == {
            (code, int(gpu) if gpu else None)
            for (instance, pid, gpu, code) in held
            if instance == rank.instance and pid == str(rank.pid)
        }
        assert job.gpus == len(rank.gpus) >= 1


def test_jobs_and_nodes_are_worst_first():
    fleet = Answers.from_json(recorded("five")["answers"]).fleet()
    worst = [max((int(f.severity) for f in j.findings), default=-1) for j in fleet.jobs]
    assert worst == sorted(worst, reverse=True)
    clean = [j for j in fleet.jobs if not j.findings]
    assert clean and fleet.jobs[-len(clean) :] == tuple(clean)  # a healthy job is last
    nodes = [max((int(f.severity) for f in n.findings), default=-1) for n in fleet.nodes]
    assert nodes == sorted(nodes, reverse=True)


def test_a_killed_exporter_is_stale_and_first():
    data = recorded("one_killed")
    fleet = Answers.from_json(data["answers"]).fleet()
    down = {s["metric"]["instance"] for s in data["raw"]["up"] if s["value"][1] == "0"}
    assert down  # the recording killed one
    assert {n.instance for n in fleet.nodes if n.stale} == down
    assert fleet.nodes[0].instance in down and "last scrape failed" in (fleet.nodes[0].stale or "")
    assert all(n.up for n in fleet.nodes if n.instance not in down)
    five = Answers.from_json(recorded("five")["answers"]).fleet()
    assert not [n for n in five.nodes if n.stale]


def test_each_nodes_processes_are_the_ones_prometheus_holds():
    data = recorded("five")
    for instance, answer in data["node_answers"].items():
        processes = node_processes(answer)
        served = {
            int(s["metric"]["pid"]) for s in data["raw"]["affmon_process_info"] if s["metric"]["instance"] == instance
        }
        assert {p.pid for p in processes} == served
        ranks = [p for p in processes if p.role == "rank"]
        assert {(instance, p.pid) for p in ranks} == {r for r in raw_roots(data) if r[0] == instance}
        for p in processes:  # each worker follows its rank
            if p.role == "worker":
                before = processes[: processes.index(p)]
                assert any(q.pid == p.job_pid for q in before)
        assert any(p.threads and p.wait_ratio is not None and p.cpu_percent is not None for p in processes)


def series(values: list[tuple[float, str]], **labels: str) -> dict[str, Any]:
    return {"metric": {"instance": "n:1", "pid": "7", "code": "STARVED", **labels}, "values": [list(v) for v in values]}


@pytest.mark.parametrize(
    ("values", "age", "at_least", "severity"),
    [
        ([(t, "2") for t in range(60, 101, 10)], 40, False, Severity.WARN),  # raised at 60
        ([(t, "3") for t in range(0, 101, 10)], 100, True, Severity.BAD),  # there since the window's start
        (
            [(0, "2"), (10, "2"), (40, "3"), (50, "3"), (60, "3"), (70, "2"), (80, "2"), (90, "2"), (100, "2")],
            60,
            False,
            Severity.WARN,
        ),
        ([(100, "3")], 0, False, Severity.BAD),  # just raised
    ],
)
def test_a_findings_age_runs_back_to_its_last_gap(values, age, at_least, severity):
    (f,) = findings_with_age([series(values)], start=0, end=100, step_s=10)
    assert (f.age_s, f.age_at_least, f.severity) == (age, at_least, severity)


def test_a_cleared_finding_is_not_held():
    assert findings_with_age([series([(t, "2") for t in range(0, 61, 10)])], start=0, end=100, step_s=10) == ()


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"gone": False, "up": True, "scrape_age_s": 1.0, "sample_age_s": 1.0}, None),
        ({"gone": False, "up": False, "scrape_age_s": 1.0, "sample_age_s": None}, "last scrape failed"),
        ({"gone": False, "up": True, "scrape_age_s": 300.0, "sample_age_s": 1.0}, "last scraped 5m 00s ago"),
        ({"gone": False, "up": True, "scrape_age_s": 1.0, "sample_age_s": 200.0}, "last sample is 3m 20s old"),
        ({"gone": True, "up": None, "scrape_age_s": None, "sample_age_s": None}, "no longer scraped"),
    ],
)
def test_what_makes_a_node_stale(kwargs, words):
    reason = stale_reason(stale_after_s=120, **kwargs)
    assert (reason is None) if words is None else (words in (reason or ""))


def test_a_stale_node_sorts_before_one_with_bad_findings():
    bad = FleetFinding("b:1", 1, None, "STARVED", Severity.BAD, 10.0, False)
    healthy = Node("a:1", ("affmon",), True, 1.0, 1.0, 1, 0.5, 3, (), None)
    starved = Node("b:1", ("affmon",), True, 1.0, 1.0, 1, 0.5, 3, (bad,), None)
    stale = Node("c:1", ("affmon",), False, 1.0, None, 0, None, 0, (), "stale: its last scrape failed")
    assert sorted([healthy, starved, stale], key=node_order) == [stale, starved, healthy]


@pytest.mark.parametrize(
    ("seconds", "at_least", "text"),
    [(5, False, "5 s"), (200, False, "3m 20s"), (7500, False, "2h 05m"), (3600 * 30, True, "≥1d 6h")],
)
def test_ages_in_words(seconds, at_least, text):
    assert age_text(seconds, at_least) == text


def test_labels_reach_the_text_escaped_and_the_json_raw():
    data = recorded("five")
    answers = Answers.from_json(data["answers"])
    hostile = "\x1b]0;owned\x07x"
    for s in answers.jobs:
        if s["metric"].get("name"):
            s["metric"]["name"] = hostile
    fleet = answers.fleet()
    text = plain(fleet, "http://p:9090", Cost(3, 0.01))
    assert "\x1b" not in text and "\x07" not in text and "?]0;owned?x" in text
    document = json.dumps(fleet_json(fleet, "http://p:9090", Cost(3, 0.01)))
    assert json.loads(document)["jobs"][0]["name"] == hostile


def test_the_model_imports_no_textual_and_does_no_io():
    code = (
        "import sys\nimport affmon.fleet.model, affmon.fleet.queries, affmon.fleet.text\n"
        "print(sorted(m for m in sys.modules if m in ('textual', 'urllib.request', 'http.client', 'socket')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_node_lists_each_code_once_with_how_many_hold_it_and_the_oldest_age():
    data = recorded("five")
    fleet = Answers.from_json(data["answers"]).fleet()
    held = raw_findings(data)
    shared = 0
    for node in fleet.nodes:
        text = findings_text(node.findings)
        codes = [c for (i, _, _, c) in held if i == node.instance]
        for code in set(codes):
            short = fmt.short_code(code)
            # once per code, however many ranks or GPUs of the node hold it
            assert len(re.findall(rf"\b{short}\b", text)) == 1, text
            count = codes.count(code)
            assert (f"{short} x{count} " in text) == (count > 1), text
            shared += count > 1
            oldest = max((f for f in node.findings if f.code == code), key=lambda f: (f.age_at_least, f.age_s))
            assert f"{age_text(oldest.age_s, oldest.age_at_least)}" in text.split(short, 1)[1].split(",")[0]
    assert shared  # the recording has a node where two ranks hold one code: a list that repeats it fails


def test_the_loop_is_its_shares_largest_first_without_those_that_round_to_nothing():
    # As the input-bound recording's rank serves them: waiting for data, some on-CPU time,
    # and waiting for a CPU, the GPU and "other" at (or next to) nothing.
    shares = (("on_cpu", 0.0846), ("cpu_wait", 5.4e-05), ("data_wait", 0.9153), ("gpu_wait", 0.0), ("other", 0.0))
    assert shares_text(shares) == "data 92% CPU 8%"
    assert shares_text((("gpu_wait", 0.5), ("data_wait", 0.5), ("on_cpu", 0.006))) == "data 50% GPU 50% CPU 1%"
    assert shares_text((("gpu_wait", 0.004),)) == shares_text(()) == fmt.UNKNOWN
