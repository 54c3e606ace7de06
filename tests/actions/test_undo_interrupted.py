"""Undo names what was interrupted and what someone else changed, each scenario in a
private PID namespace with its own journal (``unshare --pid --fork --mount-proc``: the
pins touch only the namespace's processes):

* a pin killed half way under a later pin: one ``undo PID`` completes both;
* an undo killed half way leaves its entry pending (not a pin "other software reset"),
  and the next undo completes it;
* two journals on one job (root's and the user's): an undo restores a thread only when
  its mask is the one its entry left, otherwise it names the thread and leaves it, and
  the job ends where the remaining pin says;
* threads born during an undo of a thread it had already put back are not reported as
  "created after the pin with its own mask";
* a pin refused before it changed any mask leaves no entry.

Run alone: ``python tests/actions/test_undo_interrupted.py SCENARIO`` prints the scenario's JSON.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO))  # run as a script inside the namespace too

from tests.helpers.crash import crashing_pin, crashing_undo  # noqa: E402
from tests.helpers.live import needs_namespace, run_in_namespace, scenario_main  # noqa: E402
from tests.helpers.proc import sleepers, thread_masks  # noqa: E402

# -- the tests -----------------------------------------------------------------------------


@needs_namespace
def test_one_undo_completes_a_pin_killed_half_way_under_a_later_pin() -> None:
    got = run_in_namespace(__file__, "killed_pin_then_pin")
    assert got["states_before"] == ["pending", "applied"]
    assert got["undo_ok"], got["undo_error"]
    assert got["undone"] == 2  # the later pin and the killed one below it, in one undo
    assert got["left_on_pins"] == 0 and got["all_back"]
    assert got["states_after"] == ["undone", "undone"]


@needs_namespace
def test_an_undo_killed_half_way_is_pending_not_drift_and_the_next_undo_completes_it() -> None:
    got = run_in_namespace(__file__, "killed_undo")
    assert got["killed_code"] == 70
    assert got["some_back"] and not got["all_back_after_kill"]  # killed with the job half put back
    assert got["state_after_kill"] == "pending"
    assert not got["expected_after_kill"]  # the drift rule expects no pin of it: none to "reset"
    assert got["again_ok"], got["again_error"]
    assert got["all_back"] and got["state_after"] == "undone"


@needs_namespace
def test_two_journals_on_one_job_end_where_the_remaining_pin_says() -> None:
    got = run_in_namespace(__file__, "two_journals")
    # Root's undo finds the user's mask on every thread: it names them and leaves them.
    assert not got["root_undo_ok"]
    assert "left alone" in got["root_undo_error"]
    assert got["root_left"] == got["threads"] and got["root_changed"] == 0
    assert got["after_root_undo"] == [got["B"]]
    assert got["root_state"] == "applied"  # root's pin still stands, under the user's
    # The user's undo puts back root's mask; root's pin is in force and its undo ends it.
    assert got["user_undo_ok"] and got["after_user_undo"] == [got["A"]]
    assert got["root_again_ok"] and got["after_root_again"] == [got["BOTH"]]


@needs_namespace
def test_threads_born_of_a_thread_undo_already_put_back_are_not_named_as_their_own() -> None:
    got = run_in_namespace(__file__, "born_during_undo")
    assert got["undo_ok"], got["undo_error"]
    assert len(got["born"]) == 3 and got["born_masks"] == [got["BOTH"]] * 3
    assert got["own_mask_lines"] == []


@needs_namespace
def test_a_pin_refused_before_any_change_leaves_no_entry() -> None:
    got = run_in_namespace(__file__, "refused_pin")
    assert not got["ok"] and not got["changed"] and "not permitted" in got["error"]
    assert got["masks_unchanged"]
    assert got["entries"] == []


# -- the scenarios, inside the namespace ---------------------------------------------------


def killed_pin_then_pin(state: Path) -> dict[str, Any]:
    from affmon.actions.journal import Journal
    from affmon.actions.pin import pin
    from affmon.actions.undo import undo

    a, b = sorted(os.sched_getaffinity(0))[:2]
    path = state / "journal.jsonl"
    journal = Journal(path)
    job = sleepers(30)
    try:
        before = thread_masks(job.pid, skip_exited=True)
        crashed = subprocess.run(crashing_pin(job.pid, a, path, after=11), cwd=REPO)
        assert crashed.returncode == 70
        assert pin(job.pid, {b}, journal=journal).ok
        states_before = [e.state for e in journal.heads()]
        result = undo(journal, job.pid)
        now = thread_masks(job.pid, skip_exited=True)
        return {
            "states_before": states_before,
            "undo_ok": result.ok,
            "undo_error": result.error,
            "undone": len(result.entry_ids),
            "left_on_pins": sum(m in ({a}, {b}) for m in now.values()),
            "all_back": now == before,
            "states_after": [e.state for e in journal.heads()],
        }
    finally:
        job.kill()


def killed_undo(state: Path) -> dict[str, Any]:
    from affmon.actions.journal import Journal, expected_masks
    from affmon.actions.pin import pin
    from affmon.actions.undo import undo

    a = sorted(os.sched_getaffinity(0))[0]
    path = state / "journal.jsonl"
    journal = Journal(path)
    job = sleepers(30)
    try:
        before = thread_masks(job.pid, skip_exited=True)
        pinned = pin(job.pid, {a}, journal=journal)
        assert pinned.ok and pinned.journal_id is not None
        killed = subprocess.run(crashing_undo(job.pid, path, after=11), cwd=REPO)
        half = thread_masks(job.pid, skip_exited=True)
        state_after_kill = journal.get(pinned.journal_id).state
        expected = expected_masks(journal)
        again = undo(journal, job.pid)
        return {
            "killed_code": killed.returncode,
            "some_back": sum(half[t] == before[t] for t in before) > 0,
            "all_back_after_kill": half == before,
            "state_after_kill": state_after_kill,
            "expected_after_kill": [list(k) for k in expected],
            "again_ok": again.ok,
            "again_error": again.error,
            "all_back": thread_masks(job.pid, skip_exited=True) == before,
            "state_after": journal.get(pinned.journal_id).state,
        }
    finally:
        job.kill()


def two_journals(state: Path) -> dict[str, Any]:
    from affmon.actions.journal import Journal
    from affmon.actions.pin import pin
    from affmon.actions.undo import undo

    a, b = sorted(os.sched_getaffinity(0))[:2]
    roots, users = Journal(state / "root.jsonl"), Journal(state / "user.jsonl")
    job = sleepers(5)
    try:
        theirs = pin(job.pid, {a}, journal=roots)
        assert theirs.ok and theirs.journal_id is not None
        assert pin(job.pid, {b}, journal=users).ok
        root_undo = undo(roots, job.pid)
        after_root_undo = sorted({tuple(sorted(m)) for m in thread_masks(job.pid, skip_exited=True).values()})
        root_state = roots.get(theirs.journal_id).state
        user_undo = undo(users, job.pid)
        after_user_undo = sorted({tuple(sorted(m)) for m in thread_masks(job.pid, skip_exited=True).values()})
        root_again = undo(roots, job.pid)
        return {
            "A": [a],
            "B": [b],
            "BOTH": sorted(os.sched_getaffinity(0)),
            "threads": len(thread_masks(job.pid, skip_exited=True)),
            "root_undo_ok": root_undo.ok,
            "root_undo_error": root_undo.error or "",
            "root_left": sum(
                t.status == "not-moved" and "changed since the pin" in t.message for t in root_undo.threads
            ),
            "root_changed": sum(t.status == "restored" for t in root_undo.threads),
            "after_root_undo": [list(m) for m in after_root_undo],
            "root_state": root_state,
            "user_undo_ok": user_undo.ok,
            "after_user_undo": [list(m) for m in after_user_undo],
            "root_again_ok": root_again.ok,
            "after_root_again": [
                sorted(m) for m in {frozenset(m) for m in thread_masks(job.pid, skip_exited=True).values()}
            ],
        }
    finally:
        job.kill()


def born_during_undo(state: Path) -> dict[str, Any]:
    from affmon.actions.journal import Journal
    from affmon.actions.pin import pin
    from affmon.actions.threads import OsAffinity
    from affmon.actions.undo import undo
    from affmon.core.model.cpuset import CpuSet
    from tests.helpers.live import driven

    a = sorted(os.sched_getaffinity(0))[0]
    journal = Journal(state / "journal.jsonl")
    with driven(REPO / "tests" / "helpers" / "thread_spawner.py") as spawner:
        creator = spawner.info["creator"]
        assert pin(spawner.pid, {a}, journal=journal).ok
        born: list[int] = []

        class Breeding(OsAffinity):
            """Once the creator thread is back on its old mask, it starts three threads."""

            def set(self, tid: int, cpus: CpuSet) -> None:
                super().set(tid, cpus)
                if tid == creator and not born:
                    born.extend(spawner.send("via-creator 3"))

        result = undo(journal, spawner.pid, ops=Breeding())
        return {
            "BOTH": sorted(os.sched_getaffinity(0)),
            "undo_ok": result.ok,
            "undo_error": result.error,
            "born": born,
            "born_masks": [sorted(os.sched_getaffinity(t)) for t in born],
            "own_mask_lines": [t.message for t in result.threads if "its own mask" in t.message],
        }


def refused_pin(state: Path) -> dict[str, Any]:
    import errno

    from affmon.actions.journal import Journal
    from affmon.actions.pin import pin
    from affmon.actions.threads import OsAffinity
    from affmon.core.model.cpuset import CpuSet

    a = sorted(os.sched_getaffinity(0))[0]
    journal = Journal(state / "journal.jsonl")

    class Refusing(OsAffinity):
        def set(self, tid: int, cpus: CpuSet) -> None:
            raise OSError(errno.EPERM, "Operation not permitted")

    job = sleepers(3)
    try:
        before = thread_masks(job.pid, skip_exited=True)
        result = pin(job.pid, {a}, ops=Refusing(), journal=journal)
        return {
            "ok": result.ok,
            "changed": result.changed,
            "error": result.error or "",
            "masks_unchanged": thread_masks(job.pid, skip_exited=True) == before,
            "entries": [e.state for e in journal.heads()],
        }
    finally:
        job.kill()


if __name__ == "__main__":
    sys.exit(scenario_main([killed_pin_then_pin, killed_undo, two_journals, born_during_undo, refused_pin]))
