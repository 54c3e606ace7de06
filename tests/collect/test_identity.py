"""A task is (number, start time): pin and undo against the real kernel when processes are
forked after a pin, when TIDs are recycled, and when a PID names a different process than
the one chosen (the CLI, the TUI's pinner, the drift rule, and a PID namespace where the
kernel is made to hand the same number out again)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from affmon.actions.journal import Journal, JournalEntry, expected_masks
from affmon.actions.pin import pin
from affmon.actions.undo import undo
from affmon.collect.identity import uptime_ticks
from affmon.collect.sampler import Sampler, Selection
from affmon.collect.sysfs_topology import read_topology
from affmon.core.model.rates import make_snapshot
from affmon.core.plan.advice import propose_pin
from affmon.tui.pinner import SystemPinner
from tests.helpers.live import Driven, driven, workload
from tests.helpers.pinning import BOTH, REPO, A, B, cpus, masks, spawner
from tests.helpers.proc import start_ticks

FORKER = Path(__file__).parent.parent / "helpers" / "forker.py"
PID_REUSE = Path(__file__).parent.parent / "helpers" / "pid_reuse.py"


def forker(*args: str) -> AbstractContextManager[Driven]:
    """``tests/helpers/forker.py``: a process that forks children (and they theirs) on request."""
    return driven(FORKER, *args)


def wait_past(*pids: int) -> None:
    """Until the boot clock's tick count is past these processes' start times, so that a pin
    begun now is later than each of them (the unit is 10 ms)."""
    latest = max(start_ticks(pid) for pid in pids)
    deadline = time.monotonic() + 10
    while (uptime_ticks() or 0) <= latest:
        assert time.monotonic() < deadline, "the boot clock did not advance"
        time.sleep(0.005)


def mask_of(pid: int) -> frozenset[int]:
    """The one mask every thread of ``pid`` has (the forker's processes have one thread)."""
    (mask,) = set(masks(pid).values())
    return mask


def said(result: Any, pid: int) -> set[tuple[str, str]]:
    return {(t.status, t.message) for t in result.threads if t.pid == pid}


RESTORED_NEW = ("restored", "process started after the pin: its pinned process's old mask")


# -- processes forked after the pin ------------------------------------------------------


def test_undo_gives_processes_forked_after_a_pin_the_mask_they_would_have_had(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    with forker("--cpus", f"{A},{B}") as f:
        older = f.send(f"fork {B}")  # forked before the pin, on B by its own choice: not the pin's doing
        wait_past(f.pid, older)
        assert pin(f.pid, cpus(B), journal=journal).ok
        worker = f.send("fork")  # a worker forked after the pin inherits the pinned mask...
        grandchild = f.send(f"to {worker} fork")  # ...and so does its child
        chose = f.send(f"fork {A}")  # forked after the pin, then set its own mask
        under_older = f.send(f"to {older} fork")  # inherited B from a process the pin never touched
        assert mask_of(f.pid) == mask_of(worker) == mask_of(grandchild) == mask_of(under_older) == cpus(B)
        assert mask_of(chose) == cpus(A)

        result = undo(journal, f.pid)

        assert result.ok, result.error
        assert mask_of(f.pid) == BOTH
        assert mask_of(worker) == mask_of(grandchild) == BOTH  # the pinned process's old mask
        assert mask_of(chose) == cpus(A)
        assert mask_of(older) == mask_of(under_older) == cpus(B)
        assert said(result, worker) == said(result, grandchild) == {RESTORED_NEW}
        assert said(result, chose) == {
            ("not-moved", f"process started after the pin with its own mask {A}: left alone")
        }
        assert said(result, older) == said(result, under_older) == set()


def test_with_children_a_worker_re_forked_after_the_pin_gets_its_own_pinned_ancestor_s_old_mask(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    with forker("--cpus", f"{A},{B}") as f:
        epoch_one = f.send("fork")  # a DataLoader worker: the parent's mask
        keeper = f.send(f"fork {A}")  # a child with a mask of its own
        wait_past(f.pid, epoch_one, keeper)
        result = pin(f.pid, cpus(B), with_children=True, journal=journal)
        assert result.ok and {t.pid for t in result.threads} == {f.pid, epoch_one, keeper}
        f.send(f"end {epoch_one}")  # the epoch ends...
        epoch_two = f.send("fork")  # ...and the next one forks a new worker, on B
        under_keeper = f.send(f"to {keeper} fork")  # on B, inherited from the pinned keeper
        chose = f.send(f"to {keeper} fork {A},{B}")  # set its own mask
        assert mask_of(f.pid) == mask_of(keeper) == mask_of(epoch_two) == mask_of(under_keeper) == cpus(B)
        assert mask_of(chose) == BOTH

        undone = undo(journal, f.pid)

        assert undone.ok, undone.error
        assert mask_of(f.pid) == mask_of(epoch_two) == BOTH
        assert mask_of(keeper) == mask_of(under_keeper) == cpus(A)  # the keeper's old mask, not its parent's
        assert mask_of(chose) == BOTH  # left as it chose (restoring would have given it A)
        assert said(undone, epoch_one) == {("exited", "no longer exists")}
        assert said(undone, epoch_two) == said(undone, under_keeper) == {RESTORED_NEW}
        assert said(undone, chose) == {
            ("not-moved", f"process started after the pin with its own mask {A}-{B}: left alone")
        }


# -- recycled TIDs -------------------------------------------------------------------------


def test_threads_born_and_ended_through_pin_and_undo_end_on_the_old_mask(tmp_path: Path) -> None:
    """Four chains of creators start a thread every 2 ms and hand over to a new creator every
    20 (``thread_spawner.py --churn``): journaled threads exit and new ones appear while pin
    and undo run. Three seconds after undo (a churned thread lives 0.1 s), every thread the
    kernel lists has the process's old mask, except the one that set its own."""
    journal = Journal(tmp_path / "journal.jsonl")
    with spawner("--cpus", f"{A},{B}", "--churn", "4") as s:
        deadline = time.monotonic() + 10
        while len(masks(s.pid)) < 20:
            assert time.monotonic() < deadline, "the churn did not start"
            time.sleep(0.01)
        result = pin(s.pid, cpus(B), journal=journal)
        assert result.ok, result.error
        assert result.journal_id is not None
        journaled = {t.tid for t in journal.get(result.journal_id).threads}
        own = s.send(f"own {A}")
        deadline = time.monotonic() + 10
        while journaled <= set(masks(s.pid)):
            assert time.monotonic() < deadline, "no journaled thread exited"
            time.sleep(0.01)

        undone = undo(journal, s.pid)

        assert undone.ok, undone.error
        statuses = {(t.status, t.message) for t in undone.threads}
        assert any(status == "exited" for status, _message in statuses)
        assert ("restored", "created after the pin: its pinned process's old mask") in statuses
        assert ("not-moved", f"created after the pin with its own mask {A}: left alone") in {
            (t.status, t.message) for t in undone.threads if t.tid == own
        }
        time.sleep(3)
        now = masks(s.pid)
        assert len(now) > 20  # still churning
        assert now.pop(own) == cpus(A)
        assert {tid: mask for tid, mask in now.items() if mask != BOTH} == {}


@pytest.mark.skipif(os.geteuid() != 0, reason="a PID namespace and ns_last_pid need root")
@pytest.mark.parametrize("scenario", ["pid", "tid"])
def test_a_number_the_kernel_hands_out_again_is_not_the_task_affmon_pinned(scenario: str) -> None:
    """``tests/helpers/pid_reuse.py``: in a PID namespace, the kernel is made to give a pinned
    process's PID (or a pinned thread's TID) to a new task; undo and diagnose must tell them
    apart (the script's docstring lists the checks)."""
    out = subprocess.run(
        [sys.executable, str(PID_REUSE), "--only", scenario], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    checks = [line for line in out.stdout.splitlines() if line.startswith("check: ")]
    assert len(checks) == 4 and all(line.startswith("check: PASS ") for line in checks), out.stdout
    assert out.stdout.splitlines()[-1] == "result: 0 check(s) failed"


# -- a start time that does not match -------------------------------------------------------


def test_a_pin_for_a_start_time_the_process_does_not_have_changes_nothing(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    with workload("--cpus", str(A), "--sleepers", "2") as w:
        pid = w["pid"]
        before = masks(pid)
        result = pin(pid, cpus(B), start_ticks=start_ticks(pid) - 1, journal=journal)
        assert not result.ok and not result.changed and result.threads == () and result.journal_id is None
        assert result.error == (
            f"PID {pid} is no longer the process chosen: that one exited and the PID now belongs to"
            f" {Path(f'/proc/{pid}/comm').read_text().strip()}, started later"
        )
        assert masks(pid) == before
        assert journal.entries() == []
        assert pin(pid, cpus(B), start_ticks=start_ticks(pid), journal=journal).ok  # the right one is pinned
        assert set(masks(pid).values()) == {cpus(B)}


def test_isolate_skips_a_candidate_whose_start_time_differs(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    with workload("--cpus", str(A), "--sleepers", "1") as target, workload("--busy", "1") as hog:
        hog_before = masks(hog["pid"])
        assert set(hog_before.values()) == {BOTH}
        stale = ((hog["pid"], start_ticks(hog["pid"]) + 1),)  # a process that once had this PID
        result = pin(target["pid"], cpus(B), journal=journal, isolate=True, isolate_candidates=stale)
        assert result.ok, result.error
        assert masks(hog["pid"]) == hog_before
        assert said(result, hog["pid"]) == set()
        assert result.journal_id is not None
        assert {t.role for t in journal.get(result.journal_id).threads} == {"pin"}
        assert undo(journal, target["pid"]).ok

        right = ((hog["pid"], start_ticks(hog["pid"])),)
        result = pin(target["pid"], cpus(B), journal=journal, isolate=True, isolate_candidates=right)
        assert result.ok and said(result, hog["pid"]) == {("moved", "")}
        assert set(masks(hog["pid"]).values()) == {cpus(A)}
        assert undo(journal, target["pid"]).ok
        assert masks(hog["pid"]) == hog_before


def test_the_tui_pinner_refuses_a_proposal_for_a_process_that_is_no_longer_there(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    with workload("--cpus", str(A), "--busy", "1", "--sleepers", "1") as w:
        pid = w["pid"]
        sampler = Sampler("/", Selection(pids=(pid,), others=True))
        first = sampler.sample()
        time.sleep(0.3)
        snapshot = make_snapshot(first, sampler.sample(), read_topology("/"))
        proposal = propose_pin(snapshot, pid)
        assert proposal is not None and proposal.pid == pid and proposal.start_ticks == start_ticks(pid)
        # Pin to B, so that a pin that went through would show in the masks.
        proposal = replace(proposal, suggestion=replace(proposal.suggestion, cpus=cpus(B)))
        before = masks(pid)
        pinner = SystemPinner(journal)
        for isolate in (False, True):
            stale = replace(proposal, start_ticks=proposal.start_ticks - 1)
            result = pinner.apply(stale, isolate=isolate, with_children=True)
            assert not result.ok and not result.changed and result.threads == ()
            assert result.error is not None and result.error.startswith(
                f"PID {pid} is no longer the process chosen: that one exited and the PID now belongs to "
            )
            assert masks(pid) == before
            assert journal.entries() == []
        result = pinner.apply(proposal, isolate=False, with_children=True)
        assert result.ok, result.error
        assert set(masks(pid).values()) == {cpus(B)}
        assert pinner.undo_last().ok
        assert masks(pid) == before


# -- the drift rule ------------------------------------------------------------------------


def drift_codes(state: Path, pid: int) -> list[str]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "affmon",
            "diagnose",
            "--pid",
            str(pid),
            "--samples",
            "3",
            "--interval",
            "0.2",
            "--json",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "XDG_STATE_HOME": str(state)},
    )
    assert out.returncode in (0, 1), out.stderr
    return [f["code"] for f in json.loads(out.stdout)["findings"] if f["pid"] == pid]


def test_drift_is_raised_for_the_pinned_process_only_not_for_another_with_its_pid(tmp_path: Path) -> None:
    state = tmp_path / "state"
    journal = Journal(state / "affmon" / "journal.jsonl")
    with workload("--cpus", f"{A},{B}", "--sleepers", "1") as w:
        pid = w["pid"]
        result = pin(pid, cpus(B), journal=journal)
        assert result.ok and result.journal_id is not None
        entry = journal.get(result.journal_id)
        for tid in masks(pid):
            os.sched_setaffinity(tid, BOTH)  # the pin lost behind affmon's back
        # The same journal, as if its entry were of an older process that had this PID.
        older: JournalEntry = replace(
            entry,
            start_ticks=start_ticks(pid) - 1,
            threads=tuple(replace(t, start_ticks=(t.start_ticks or 1) - 1) for t in entry.threads),
        )
        journal.update(older)
        assert expected_masks(journal) == {(pid, start_ticks(pid) - 1): cpus(B)}
        assert "AFFINITY_DRIFT" not in drift_codes(state, pid)
        journal.update(entry)
        assert expected_masks(journal) == {(pid, start_ticks(pid)): cpus(B)}
        assert "AFFINITY_DRIFT" in drift_codes(state, pid)


def test_the_tui_pinner_refuses_a_proposal_for_a_process_that_exec_d_another_program_since(tmp_path: Path) -> None:
    """The same PID and start time, another program: the proposal was made for the one
    before, so Enter pins nothing and says so."""
    journal = Journal(tmp_path / "journal.jsonl")
    shell = subprocess.Popen(
        ["sh", "-c", "read line; exec sleep 300"], stdin=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert shell.stdin is not None
        time.sleep(0.2)
        sampler = Sampler("/", Selection(pids=(shell.pid,), others=True))
        first = sampler.sample()
        time.sleep(0.3)
        snapshot = make_snapshot(first, sampler.sample(), read_topology("/"))
        pinner = SystemPinner(journal)
        proposal = pinner.propose(snapshot, shell.pid)
        assert proposal is not None and proposal.pid == shell.pid
        shell.stdin.write("go\n")
        shell.stdin.flush()
        deadline = time.monotonic() + 10
        while os.readlink(f"/proc/{shell.pid}/exe").endswith("sh") and time.monotonic() < deadline:
            time.sleep(0.02)
        before = masks(shell.pid)
        result = pinner.apply(replace(proposal, no_change=None), isolate=False, with_children=False)
        assert not result.ok and result.threads == ()
        assert result.error is not None and "it exec'd since the dialog opened" in result.error
        assert masks(shell.pid) == before and journal.entries() == []
    finally:
        shell.kill()
        shell.wait()
