"""Re-pinning real processes on this machine (two CPUs): every thread, new threads,
children, rollback, undo, the write-ahead journal, dry run, isolation, refusals."""

from __future__ import annotations

import errno
import json
import os
import pwd
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from affmon.actions.journal import Journal, expected_masks
from affmon.actions.pin import pin
from affmon.actions.threads import DryRunAffinity, OsAffinity
from affmon.actions.undo import undo
from affmon.collect.procfs import PF_KTHREAD, PF_NO_SETAFFINITY, ProcFs
from affmon.core.model.cpuset import CpuSet, parse_cpulist
from tests.helpers.crash import crashing_pin
from tests.helpers.live import workload
from tests.helpers.pinning import BOTH, REPO, A, B, HookedOps, cpus, masks, spawner
from tests.helpers.proc import start_ticks

PROC = ProcFs("/")


def kernel_thread(*, fixed: bool, on: int) -> int:
    """A kernel thread whose mask includes CPU ``on``, with or without PF_NO_SETAFFINITY."""
    for pid in sorted(PROC.pids()):
        stat = PROC.stat(pid)
        if stat is None or not stat.flags & PF_KTHREAD or bool(stat.flags & PF_NO_SETAFFINITY) != fixed:
            continue
        try:
            if on in os.sched_getaffinity(pid):
                return pid
        except ProcessLookupError:
            continue
    pytest.fail(f"no kernel thread (fixed={fixed}) on CPU {on}")


# -- pinning ---------------------------------------------------------------------


def test_every_thread_gets_the_cpus_and_each_result_says_set(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    with workload("--cpus", f"{A},{B}", "--busy", "1", "--sleepers", "3") as w:
        pid = w["pid"]
        previous = BOTH
        start = start_ticks(pid)
        for target in (cpus(B), cpus(A)):
            result = pin(pid, target, journal=journal)
            assert result.ok and result.error is None and not result.rolled_back and result.changed
            if target == cpus(B):
                assert result.warning is None
            else:  # a second pin of the same process is said, not silent
                assert result.warning is not None and result.warning.startswith(
                    f"PID {pid} was already pinned by affmon to CPUs {B}"
                )
            now = masks(pid)
            assert len(now) == 5 and set(now.values()) == {target}
            by_tid = {t.tid: t for t in result.threads}
            assert set(by_tid) == set(now)
            for t in by_tid.values():
                assert (t.pid, t.status, t.before, t.after) == (pid, "set", previous, target)
            assert result.journal_id is not None and journal.get(result.journal_id).state == "applied"
            assert expected_masks(journal) == {(pid, start): target}
            previous = target


def test_threads_created_during_the_pin_are_caught_by_the_next_round() -> None:
    with spawner("--cpus", f"{A},{B}") as s:
        new: list[int] = []

        def hook(n: int, tid: int, cpus: CpuSet) -> None:
            if n == 1:  # before the main thread is set: its new threads inherit the old mask
                new.extend(s.send("spawn 3"))

        result = pin(s.pid, cpus(B), ops=HookedOps(hook))
        assert result.ok, result.error
        now = masks(s.pid)
        assert len(new) == 3 and set(new) <= set(now)
        assert set(now.values()) == {cpus(B)}
        assert {t.tid for t in result.threads if t.status == "set"} == set(now)


def test_a_process_that_keeps_creating_threads_ends_up_with_every_thread_pinned() -> None:
    # Chains of creators that hand over every 40 ms: the newest threads are always the
    # creators, so a single pass over /proc/PID/task leaves some with the old mask.
    with spawner("--cpus", str(A), "--churn", "4") as s:
        time.sleep(0.2)
        result = pin(s.pid, cpus(B))
        assert result.ok, result.error
        for _ in range(3):
            now = masks(s.pid)
            assert len(now) > 20
            assert {tid: m for tid, m in now.items() if m != cpus(B)} == {}
            time.sleep(0.05)


def test_children_are_pinned_only_with_children() -> None:
    with workload("--cpus", f"{A},{B}", "--sleepers", "1", "--child") as w:
        pid, child = w["pid"], w["child"]
        child_before = masks(child)
        assert set(child_before.values()) == {BOTH}

        alone = pin(pid, cpus(B))
        assert alone.ok and {t.pid for t in alone.threads} == {pid}
        assert set(masks(pid).values()) == {cpus(B)}
        assert masks(child) == child_before

        both = pin(pid, cpus(A), with_children=True)
        assert both.ok and {t.pid for t in both.threads} == {pid, child}
        assert set(masks(pid).values()) == {cpus(A)}
        assert set(masks(child).values()) == {cpus(A)}


def test_a_thread_that_exits_mid_way_is_exited_not_a_failure() -> None:
    with workload("--cpus", f"{A},{B}", "--sleepers", "3") as w:
        victim = w["sleepers"][1]

        def hook(n: int, tid: int, cpus: CpuSet) -> None:
            if tid == victim:
                raise OSError(errno.ESRCH, "No such process")

        result = pin(w["pid"], cpus(B), ops=HookedOps(hook))
        assert result.ok and result.error is None
        statuses = {t.tid: t.status for t in result.threads}
        assert statuses.pop(victim) == "exited"
        assert set(statuses.values()) == {"set"} and len(statuses) == 3
        assert {tid: m for tid, m in masks(w["pid"]).items() if tid != victim} == dict.fromkeys(statuses, cpus(B))


def test_a_mask_the_kernel_narrowed_is_reported() -> None:
    class Cpuset(OsAffinity):  # what a cpuset of {A} does: silently intersect
        def set(self, tid: int, cpus: CpuSet) -> None:
            super().set(tid, cpus & {A})

    with workload("--cpus", str(B), "--sleepers", "1") as w:
        result = pin(w["pid"], BOTH, ops=Cpuset())
        assert result.ok
        assert result.warning is not None and "2 thread(s) run on" in result.warning
        for t in result.threads:
            assert t.after == cpus(A)
            assert t.message == f"mask in force is {A}, not {A}-{B} as asked"


# -- failures and rollback ----------------------------------------------------------


def test_a_failure_half_way_puts_every_thread_back(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    with workload("--cpus", f"{A},{B}", "--busy", "1", "--sleepers", "3", "--sleeper-cpus", str(A)) as w:
        pid = w["pid"]
        before = masks(pid)
        assert len(set(before.values())) == 2  # the sleepers have a mask of their own

        def hook(n: int, tid: int, cpus: CpuSet) -> None:
            if n == 4:
                raise OSError(errno.EPERM, "Operation not permitted")

        ops = HookedOps(hook)
        result = pin(pid, cpus(B), ops=ops, journal=journal)
        assert not result.ok and result.rolled_back
        # Our own process: EPERM can only come from a security policy (seccomp, an LSM).
        user = pwd.getpwuid(os.getuid()).pw_name
        assert (
            result.error
            == f"not permitted to set the affinity of PID {pid} (user {user}): refused by a security policy"
        )
        assert masks(pid) == before
        changed = [tid for tid, _ in ops.calls[:3]]
        assert ops.calls[4:] == [(tid, before[tid]) for tid in reversed(changed)]  # newest first
        statuses = sorted(t.status for t in result.threads)
        assert statuses == ["failed", "restored", "restored", "restored"]
        for t in result.threads:
            assert t.status != "restored" or t.after == before[t.tid]
        assert result.journal_id is not None and journal.get(result.journal_id).state == "rolled-back"
        assert expected_masks(journal) == {}


def test_cpus_outside_what_the_process_may_use_fail_and_change_nothing() -> None:
    online = parse_cpulist(Path("/sys/devices/system/cpu/online").read_text())
    absent = min(set(range(max(online) + 2)) - online)
    with workload("--cpus", f"{A},{B}", "--sleepers", "2", "--sleeper-cpus", str(B)) as w:
        before = masks(w["pid"])
        result = pin(w["pid"], cpus(absent))
        assert not result.ok and result.rolled_back
        assert result.error == (
            f"CPUs {absent} are outside what PID {w['pid']} may use (its cgroup cpuset, or offline CPUs)"
        )
        assert masks(w["pid"]) == before


def test_threads_that_keep_appearing_with_other_masks_give_up_after_ten_rounds() -> None:
    with spawner("--cpus", f"{A},{B}") as s:
        before = masks(s.pid)

        def hook(n: int, tid: int, cpus: CpuSet) -> bool:
            if cpus != {B}:
                return False  # the rollback
            if tid == s.info["creator"]:
                return True  # the creator escapes the pin...
            s.send("via-creator 1")  # ...and keeps making threads with the old mask
            return False

        result = pin(s.pid, cpus(B), ops=HookedOps(hook))
        assert not result.ok and result.rolled_back
        assert result.error == f"threads of PID {s.pid} kept appearing with other masks: gave up after 10 rounds"
        now = masks(s.pid)
        assert len(now) == len(before) + 10  # one thread made per round, ten rounds
        assert set(now.values()) == {BOTH}


def test_kernel_threads_are_refused_as_targets() -> None:
    fixed = kernel_thread(fixed=True, on=A)
    result = pin(fixed, cpus(B))
    assert not result.ok and result.threads == ()
    assert result.error is not None and result.error.startswith(f"CPUs {B} are outside what PID {fixed} may use")
    kthreadd = kernel_thread(fixed=False, on=A)
    before = os.sched_getaffinity(kthreadd)
    result = pin(kthreadd, cpus(B))
    assert result.error == f"PID {kthreadd} is a kernel thread: affmon pins user processes only"
    assert os.sched_getaffinity(kthreadd) == before


def test_bad_requests_fail_with_a_message() -> None:
    empty = pin(os.getpid(), ())
    assert empty.error == "no CPUs given to pin to" and not empty.changed
    result = pin(2**22 + 1, cpus(A))  # above pid_max's ceiling: never a process
    assert not result.ok and result.error == f"no such process: {2**22 + 1}"


def test_a_pin_that_cannot_write_its_journal_changes_nothing(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    journal.path.write_text("garbage\n")
    with workload("--cpus", f"{A},{B}", "--sleepers", "1") as w:
        before = masks(w["pid"])
        result = pin(w["pid"], cpus(B), journal=journal)
        assert not result.ok and result.journal_id is None
        assert result.error is not None
        assert result.error.startswith(f"the affmon journal {journal.path} is corrupt at line 1 (")
        assert masks(w["pid"]) == before
        assert journal.path.read_text() == "garbage\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a pin as another user")
def test_another_users_process_is_refused_and_left_alone() -> None:
    code = (
        "import json, sys\n"
        "from affmon.actions.pin import pin\n"
        "r = pin(int(sys.argv[1]), {int(sys.argv[2])})\n"
        "print(json.dumps([r.ok, r.error, r.rolled_back, len(r.threads)]))\n"
    )
    with workload("--cpus", f"{A},{B}", "--sleepers", "2") as w:
        before = masks(w["pid"])
        argv = [sys.executable, "-c", code, str(w["pid"]), str(B)]
        setpriv = shutil.which("setpriv")
        if setpriv:
            out = subprocess.run(
                [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *argv], cwd=REPO, capture_output=True
            )
        else:

            def drop() -> None:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)

            out = subprocess.run(argv, cwd=REPO, capture_output=True, preexec_fn=drop)
        assert out.returncode == 0, out.stderr.decode()
        ok, error, rolled_back, n_threads = json.loads(out.stdout)
        assert not ok and rolled_back and n_threads == 1
        assert error == (
            f"not permitted to set the affinity of PID {w['pid']} (user root):"
            " another user's process needs CAP_SYS_NICE"
        )
        assert masks(w["pid"]) == before


# -- the write-ahead journal and undo ------------------------------------------------


def test_undo_restores_each_thread_s_own_mask(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    with workload("--cpus", f"{A},{B}", "--busy", "1", "--sleepers", "2", "--sleeper-cpus", str(B)) as w:
        pid = w["pid"]
        before = masks(pid)
        assert pin(pid, cpus(A), journal=journal).ok
        assert set(masks(pid).values()) == {cpus(A)}
        result = undo(journal, pid)
        assert result.ok and result.error is None
        assert masks(pid) == before
        assert {t.tid: (t.status, t.before, t.after) for t in result.threads} == {
            tid: ("restored", cpus(A), mask) for tid, mask in before.items()
        }
        (entry,) = journal.entries()
        assert result.entry_ids == (entry.id,) and entry.state == "undone"
        assert expected_masks(journal) == {}
        again = undo(journal, pid)
        assert not again.ok
        assert again.error == f"nothing to undo for PID {pid} (no pin of it is in force) in the journal {journal.path}"


def test_undo_of_everything_goes_newest_first(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    with workload("--cpus", f"{A},{B}", "--sleepers", "1") as w:
        before = masks(w["pid"])
        assert pin(w["pid"], cpus(A), journal=journal).ok
        assert pin(w["pid"], cpus(B), journal=journal).ok
        result = undo(journal)
        assert result.ok and len(result.entry_ids) == 2
        assert result.entry_ids == tuple(e.id for e in reversed(journal.entries()))
        assert masks(w["pid"]) == before
        assert {e.state for e in journal.entries()} == {"undone"}


def test_the_journal_entry_is_on_disk_before_the_first_change(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    with workload("--cpus", f"{A},{B}", "--sleepers", "2", "--sleeper-cpus", str(A)) as w:
        before = masks(w["pid"])
        on_disk: list[Any] = []

        def hook(n: int, tid: int, cpus: CpuSet) -> None:
            if n == 1:
                on_disk.extend(Journal(journal.path).entries())  # a fresh reader: the file itself
                assert masks(w["pid"]) == before

        assert pin(w["pid"], cpus(B), ops=HookedOps(hook), journal=journal).ok
        (entry,) = on_disk
        assert (entry.state, entry.pid, entry.cpus) == ("pending", w["pid"], cpus(B))
        assert entry.start_ticks == PROC.stat(w["pid"]).start_ticks  # type: ignore[union-attr]
        assert {t.tid: t.old_cpus for t in entry.threads} == before
        assert all(t.start_ticks == PROC.stat(w["pid"], t.tid).start_ticks for t in entry.threads)  # type: ignore[union-attr]


def test_a_pin_that_crashed_half_way_is_undone_from_the_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    with workload("--cpus", f"{A},{B}", "--sleepers", "3", "--sleeper-cpus", str(A)) as w:
        before = masks(w["pid"])
        argv = crashing_pin(w["pid"], B, path, after=3)
        crashed = subprocess.run(argv, cwd=REPO, capture_output=True)
        assert crashed.returncode == 70, crashed.stderr.decode()
        half = masks(w["pid"])
        assert sum(half[t] != before[t] for t in before) == 2  # two threads changed, then the crash
        journal = Journal(path)
        (entry,) = journal.entries()
        assert entry.state == "pending" and {t.tid: t.old_cpus for t in entry.threads} == before
        assert expected_masks(journal) == {}  # a crashed pin is not a pin to watch for drift
        result = undo(journal, w["pid"])
        assert result.ok and masks(w["pid"]) == before
        assert journal.get(entry.id).state == "undone"


def test_undo_skips_a_thread_whose_tid_was_reused(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    with workload("--cpus", f"{A},{B}", "--sleepers", "2") as w:
        result = pin(w["pid"], cpus(A), journal=journal)
        assert result.journal_id is not None
        entry = journal.get(result.journal_id)
        reused = w["sleepers"][0]
        # As if the recorded thread had exited and a newer one got its TID.
        threads = tuple(
            replace(t, start_ticks=(t.start_ticks or 0) + 1) if t.tid == reused else t for t in entry.threads
        )
        journal.update(replace(entry, threads=threads))
        undone = undo(journal, w["pid"])
        assert undone.ok
        about = [(t.status, t.message) for t in undone.threads if t.tid == reused]
        # The journaled thread is gone; the newer thread holding its TID inherited the pinned
        # mask from the pinned process, so it gets the main thread's old mask back.
        assert about == [
            ("exited", "its TID now belongs to a newer thread"),
            ("restored", "created after the pin: its pinned process's old mask"),
        ]
        now = masks(w["pid"])
        assert now == dict.fromkeys(now, BOTH)
        assert len(now) == 3


def test_undo_of_a_process_that_has_exited_reports_it_and_marks_the_entry(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    with workload("--sleepers", "2") as w:
        result = pin(w["pid"], cpus(A), journal=journal)
        assert result.ok and result.journal_id is not None
    undone = undo(journal, w["pid"])
    assert not undone.ok and undone.threads == ()
    assert undone.error is not None and "every process its pin touched has exited" in undone.error
    # Expired when the journal was next prepared, and compacted: no thread records kept.
    assert journal.get(result.journal_id).state == "expired"
    assert journal.get(result.journal_id).threads == ()


def test_undo_gives_new_threads_the_main_thread_s_mask_unless_they_chose_their_own(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    with spawner("--cpus", f"{A},{B}") as s:
        assert pin(s.pid, cpus(B), journal=journal).ok
        inherited = s.send("spawn 2")  # created by the pinned main thread: {B}
        own = s.send(f"own {A}")  # sets its own mask
        result = undo(journal, s.pid)
        assert result.ok
        now = masks(s.pid)
        assert set(now.values()) == {BOTH, cpus(A)}
        assert [now[t] for t in inherited] == [BOTH, BOTH] and now[own] == cpus(A)
        by_tid = {t.tid: t for t in result.threads}
        assert [by_tid[t].status for t in inherited] == ["restored", "restored"]
        assert by_tid[own].status == "not-moved" and "left alone" in by_tid[own].message


# -- dry run -------------------------------------------------------------------------


def test_a_dry_run_changes_nothing_and_says_what_it_would_set(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    with workload("--cpus", f"{A},{B}", "--sleepers", "2", "--sleeper-cpus", str(A)) as w:
        before = masks(w["pid"])
        ops = DryRunAffinity()
        result = pin(w["pid"], cpus(B), ops=ops, journal=journal)
        assert result.ok and result.dry_run and result.journal_id is None
        assert masks(w["pid"]) == before
        assert not journal.path.exists()
        assert sorted(ops.would_set) == [(tid, cpus(B)) for tid in sorted(before)]
        assert {t.tid: (t.status, t.before, t.after) for t in result.threads} == {
            tid: ("set", mask, cpus(B)) for tid, mask in before.items()
        }
        # undo's dry run, after a real pin: reports, restores nothing, leaves the entry
        assert pin(w["pid"], cpus(B), journal=journal).ok
        dry_undo = DryRunAffinity()
        result_undo = undo(journal, w["pid"], ops=dry_undo)
        assert result_undo.ok and set(masks(w["pid"]).values()) == {cpus(B)}
        assert sorted(dry_undo.would_set) == sorted(before.items())
        assert journal.entries()[0].state == "applied"


# -- isolation -------------------------------------------------------------------------


def test_isolate_moves_busy_tasks_off_the_cpus_and_undo_brings_them_back(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    kthreadd = kernel_thread(fixed=False, on=B)
    percpu = kernel_thread(fixed=True, on=B)
    kernel_before = {k: os.sched_getaffinity(k) for k in (kthreadd, percpu)}
    with (
        workload("--cpus", str(A), "--sleepers", "1") as target,
        workload("--busy", "1") as hog,
        workload("--cpus", str(B), "--busy", "1") as hog_inside,
        workload("--busy", "1") as refuser,
        workload("--cpus", str(A), "--busy", "1") as elsewhere,
    ):
        candidates = (hog, hog_inside, refuser, elsewhere)
        before = {w["pid"]: masks(w["pid"]) for w in (target, *candidates)}

        def hook(n: int, tid: int, cpus: CpuSet) -> None:
            if tid in before[refuser["pid"]]:
                raise OSError(errno.EPERM, "Operation not permitted")

        result = pin(
            target["pid"],
            cpus(B),
            journal=journal,
            ops=HookedOps(hook),
            isolate=True,
            isolate_candidates=tuple((p, start_ticks(p)) for p in (*(w["pid"] for w in candidates), kthreadd, percpu)),
            isolate_all=True,  # hog_inside was pinned on purpose: only --isolate-all moves it
        )
        assert result.ok, result.error
        assert set(masks(target["pid"]).values()) == {cpus(B)}
        assert set(masks(hog["pid"]).values()) == {cpus(A)}  # {A,B} - {B}
        assert set(masks(hog_inside["pid"]).values()) == {cpus(A)}  # nothing left: allowed - {B}
        assert masks(refuser["pid"]) == before[refuser["pid"]]
        assert masks(elsewhere["pid"]) == before[elsewhere["pid"]]
        assert {k: os.sched_getaffinity(k) for k in kernel_before} == kernel_before
        by_pid: dict[int, set[tuple[str, str]]] = {}
        for t in result.threads:
            by_pid.setdefault(t.pid, set()).add((t.status, t.message))
        assert by_pid[hog["pid"]] == by_pid[hog_inside["pid"]] == {("moved", "")}
        assert by_pid[kthreadd] == {("not-moved", "left alone: a kernel thread")}
        assert by_pid[percpu] == {("not-moved", "left alone: a kernel thread")}
        ((status, message),) = by_pid[refuser["pid"]]
        assert status == "not-moved" and message.startswith(
            f"not moved: not permitted to set the affinity of PID {refuser['pid']}"
        )
        assert elsewhere["pid"] not in by_pid
        assert expected_masks(journal) == {(target["pid"], start_ticks(target["pid"])): cpus(B)}

        undone = undo(journal, target["pid"])
        assert undone.ok
        for w in (target, hog, hog_inside, refuser, elsewhere):
            assert masks(w["pid"]) == before[w["pid"]]


def test_undo_of_a_worker_pinned_with_its_parent_names_the_pin_to_undo(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    with workload("--cpus", f"{A},{B}", "--child") as w:
        pid, child = w["pid"], w["child"]
        result = pin(pid, cpus(A), with_children=True, journal=journal)
        assert result.ok and result.journal_id is not None
        alone = undo(journal, child)
        assert not alone.ok and alone.threads == ()
        assert alone.error == (
            f"nothing to undo for PID {child} on its own: it was pinned with PID {pid} ({result.journal_id});"
            f" `affmon undo {pid}` undoes that pin"
        )
        assert set(masks(child).values()) == {cpus(A)}  # nothing was changed
        assert undo(journal, pid).ok
        assert set(masks(child).values()) == {BOTH}
