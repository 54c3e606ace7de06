"""A cpuset that changes under a pin, in a cpuset cgroup the test makes (cgroup v2 where
the machine delegates the cpuset controller, v1 otherwise) and removes after, with each
scenario in a private PID namespace with its own journal (``unshare --pid --fork
--mount-proc``: the pins touch only the namespace's processes).

The kernel keeps the mask a task asked for across cpuset changes, and a thread started
inherits it: a job pinned to one CPU whose cpuset then shrinks away from that CPU runs on
what the cpuset allows, and returns to the pinned CPU when the cpuset grows again, unless
undo gave every task (those started meanwhile too) its old mask as a new request.

Run alone: ``python tests/actions/test_cpuset_pin.py SCENARIO CGROUP`` prints the scenario's JSON.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO))  # run as a script inside the namespace too

from tests.helpers.live import run_in_namespace, scenario_main  # noqa: E402
from tests.helpers.proc import distinct_masks, thread_masks  # noqa: E402

V2 = Path("/sys/fs/cgroup")
V1 = Path("/sys/fs/cgroup/cpuset")


def _cpuset_root() -> Path | None:
    """Where a cpuset cgroup can be made: the v2 root when it delegates the cpuset
    controller to its children, else the v1 cpuset hierarchy; None when neither."""
    control = V2 / "cgroup.subtree_control"
    if control.exists() and "cpuset" in control.read_text().split():
        return V2
    if (V1 / "cpuset.cpus").exists() and (V1 / "cgroup.procs").exists():
        return V1
    return None


needs_cpuset = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or len(os.sched_getaffinity(0)) < 2 or _cpuset_root() is None,
    reason="needs root, unshare (a private PID namespace), two CPUs and a cpuset cgroup hierarchy",
)


@pytest.fixture
def cpuset() -> Iterator[Path]:
    root = _cpuset_root()
    assert root is not None
    path = root / f"affmon-test-{os.getpid()}-{os.urandom(3).hex()}"
    path.mkdir()
    try:
        if root == V1:  # a v1 cpuset starts empty: it takes no task until given CPUs and memory nodes
            (path / "cpuset.mems").write_text((V1 / "cpuset.mems").read_text())
        (path / "cpuset.cpus").write_text(",".join(map(str, sorted(os.sched_getaffinity(0)))))
        yield path
    finally:
        for _ in range(100):  # the namespace's processes are gone; the cgroup empties as they are reaped
            try:
                path.rmdir()
                break
            except OSError:
                time.sleep(0.05)
        assert not path.exists(), f"could not remove {path}"


@needs_cpuset
def test_undo_after_the_cpuset_shrank_away_from_the_pin_outlasts_the_cpuset_growing_back(cpuset: Path) -> None:
    got = run_in_namespace(__file__, "shrinks_under_pin", str(cpuset))
    assert got["pinned"] == [got["B"]]
    assert got["while_shrunk"] == [got["A"]]  # the cpuset's doing: every thread on what it allows
    assert got["born"] == 5
    assert got["undo_ok"], got["undo_error"]
    assert got["left_alone"] == []
    # The cpuset grows back: no thread returns to the pin's CPU; each has its old mask.
    assert got["on_pins_cpu_after_growth"] == 0
    assert got["after_growth"] == [got["BOTH"]]


@needs_cpuset
def test_a_pin_partly_outside_its_cpuset_says_so_before_it_applies_and_records_both(cpuset: Path) -> None:
    got = run_in_namespace(__file__, "partly_outside", str(cpuset))
    outside = f"CPU {got['B'][0]} is outside PID {got['pid']}'s cpuset ({got['A'][0]})"
    assert outside in (got["dry_run_warning"] or "")
    assert got["masks_after_dry_run"] == [got["A"]]
    assert got["pin_ok"] and outside in (got["pin_warning"] or "")
    assert "not" not in (got["pin_warning"] or "").split(";")[0]  # no second "runs on 0, not 0-1" line
    assert got["recorded_cpus"] == got["BOTH"] and got["recorded_allowed"] == got["A"]
    assert got["undo_ok"], got["undo_error"]
    assert got["left_alone"] == []


# -- the scenarios, inside the namespace ---------------------------------------------------


def _settle(pid: int, wanted: frozenset[int]) -> None:
    """Wait (up to 5 s) until every thread of ``pid`` shows ``wanted``: a cpuset change
    reaches each task as the kernel walks the cgroup."""
    deadline = time.monotonic() + 5
    while set(thread_masks(pid, skip_exited=True).values()) != {wanted} and time.monotonic() < deadline:
        time.sleep(0.02)


def _cpus(cgroup: Path, cpus: set[int] | frozenset[int]) -> None:
    (cgroup / "cpuset.cpus").write_text(",".join(map(str, sorted(cpus))))


def shrinks_under_pin(state: Path, cgroup: Path) -> dict[str, Any]:
    from affmon.actions.journal import Journal
    from affmon.actions.pin import pin
    from affmon.actions.undo import undo
    from tests.helpers.live import driven

    both = frozenset(os.sched_getaffinity(0))
    a, b = sorted(both)[:2]
    journal = Journal(state / "journal.jsonl")
    with driven(REPO / "tests" / "helpers" / "thread_spawner.py") as job:
        job.send("spawn 5")
        (cgroup / "cgroup.procs").write_text(str(job.pid))
        assert pin(job.pid, {b}, journal=journal).ok
        pinned = distinct_masks(job.pid)
        _cpus(cgroup, {a})  # the cpuset shrinks away from the pin's CPU
        _settle(job.pid, frozenset({a}))
        born = job.send("spawn 5")  # started meanwhile: they inherit the pin's request
        while_shrunk = distinct_masks(job.pid)
        result = undo(journal, job.pid)
        _cpus(cgroup, both)  # and grows back
        time.sleep(0.2)
        _settle(job.pid, both)
        now = thread_masks(job.pid, skip_exited=True)
        return {
            "A": [a],
            "B": [b],
            "BOTH": sorted(both),
            "pinned": pinned,
            "while_shrunk": while_shrunk,
            "born": len(born),
            "undo_ok": result.ok,
            "undo_error": result.error,
            "left_alone": [t.message for t in result.threads if "left alone" in t.message],
            "on_pins_cpu_after_growth": sum(m == {b} for m in now.values()),
            "after_growth": distinct_masks(job.pid),
        }


def partly_outside(state: Path, cgroup: Path) -> dict[str, Any]:
    from affmon.actions.journal import Journal
    from affmon.actions.pin import pin
    from affmon.actions.threads import DryRunAffinity
    from affmon.actions.undo import undo
    from tests.helpers.live import driven

    both = frozenset(os.sched_getaffinity(0))
    a, b = sorted(both)[:2]
    journal = Journal(state / "journal.jsonl")
    _cpus(cgroup, {a})
    with driven(REPO / "tests" / "helpers" / "thread_spawner.py") as job:
        job.send("spawn 5")
        (cgroup / "cgroup.procs").write_text(str(job.pid))
        _settle(job.pid, frozenset({a}))
        dry = pin(job.pid, {a, b}, journal=journal, ops=DryRunAffinity())
        masks_after_dry_run = distinct_masks(job.pid)
        result = pin(job.pid, {a, b}, journal=journal)
        assert result.journal_id is not None
        entry = journal.get(result.journal_id)
        job.send("spawn 3")
        undone = undo(journal, job.pid)
        return {
            "A": [a],
            "B": [b],
            "BOTH": sorted(both),
            "pid": job.pid,
            "dry_run_warning": dry.warning,
            "masks_after_dry_run": masks_after_dry_run,
            "pin_ok": result.ok,
            "pin_warning": result.warning,
            "recorded_cpus": sorted(entry.cpus),
            "recorded_allowed": None if entry.allowed is None else sorted(entry.allowed),
            "undo_ok": undone.ok,
            "undo_error": undone.error,
            "left_alone": [t.message for t in undone.threads if "left alone" in t.message],
        }


if __name__ == "__main__":
    sys.exit(scenario_main([shrinks_under_pin, partly_outside]))
