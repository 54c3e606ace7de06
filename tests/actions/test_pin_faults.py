"""Pinning faults that ``tests/actions/test_pin.py`` does not already cover: a thread
the kernel places itself (PF_NO_SETAFFINITY) among the target's threads, threads that
exit between the listing and the first read or before the read-back, EINVAL half way,
a rollback that is itself refused, and crashes around the write-ahead journal (after it
is written but before any mask changed; inside the rename of its second-round update;
a journal damaged beyond JSON's nesting limit)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from affmon.actions.journal import Journal
from affmon.actions.journal_records import JournalEntry, JournalError
from affmon.actions.pin import pin
from affmon.actions.threads import OsAffinity
from affmon.actions.undo import undo
from affmon.collect.procfs import PF_NO_SETAFFINITY
from affmon.core.model.cpuset import CpuSet
from tests.helpers.live import workload
from tests.helpers.pinning import BOTH, REPO, A, B, HookedOps, cpus, masks, spawner


def recorded_proc(root: Path, pid: int, flagged: set[int]) -> None:
    """A /proc tree of ``pid``'s stat files, the threads in ``flagged`` with
    PF_NO_SETAFFINITY added to their flags (what the kernel shows for threads it places
    itself: per-CPU kernel threads, io_uring workers on older kernels)."""
    for name in ("stat", "status"):
        (root / f"proc/{pid}").mkdir(parents=True, exist_ok=True)
        (root / f"proc/{pid}/{name}").write_bytes(Path(f"/proc/{pid}/{name}").read_bytes())
    for tid in os.listdir(f"/proc/{pid}/task"):
        task = root / f"proc/{pid}/task/{tid}"
        task.mkdir(parents=True)
        text = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        if int(tid) in flagged:
            head, paren, tail = text.rpartition(")")
            fields = tail.split()
            fields[6] = str(int(fields[6]) | PF_NO_SETAFFINITY)  # field 9: flags
            text = f"{head}{paren} {' '.join(fields)}\n"
        (task / "stat").write_text(text)


def test_a_thread_the_kernel_places_is_skipped_reported_and_left_alone(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    with workload("--cpus", f"{A},{B}", "--sleepers", "2") as w:
        fixed = w["sleepers"][0]
        recorded_proc(tmp_path, w["pid"], {fixed})
        result = pin(w["pid"], cpus(B), root=str(tmp_path), journal=journal)
        assert result.ok and result.error is None and result.warning is None
        by_tid = {t.tid: t for t in result.threads}
        assert by_tid[fixed].status == "not-moved" and by_tid[fixed].message == "the kernel fixes its affinity"
        assert {t.status for tid, t in by_tid.items() if tid != fixed} == {"set"}
        now = masks(w["pid"])
        assert now.pop(fixed) == BOTH  # never touched
        assert set(now.values()) == {cpus(B)}
        assert result.journal_id is not None
        assert fixed not in {t.tid for t in journal.get(result.journal_id).threads}  # nothing to undo there
        assert undo(journal, w["pid"], root=str(tmp_path)).ok
        assert set(masks(w["pid"]).values()) == {BOTH}


class ExitingOps(OsAffinity):
    """The real calls, but ``victim`` "exits" (ESRCH) at its ``gets``-th read."""

    def __init__(self, victim: int, gets: int) -> None:
        self.victim = victim
        self.gets = gets
        self.seen = 0

    def get(self, tid: int) -> CpuSet:
        if tid == self.victim:
            self.seen += 1
            if self.seen >= self.gets:
                raise OSError(errno.ESRCH, "No such process")
        return super().get(tid)


@pytest.mark.parametrize(("gets", "message"), [(1, "exited while being pinned"), (2, "exited after the change")])
def test_a_thread_that_exits_before_its_first_read_or_the_read_back(gets: int, message: str) -> None:
    with workload("--cpus", f"{A},{B}", "--sleepers", "3") as w:
        victim = w["sleepers"][1]
        result = pin(w["pid"], cpus(B), ops=ExitingOps(victim, gets))
        assert result.ok and result.error is None
        by_tid = {t.tid: t for t in result.threads}
        assert (by_tid[victim].status, by_tid[victim].message, by_tid[victim].after) == ("exited", message, None)
        assert {t.status for tid, t in by_tid.items() if tid != victim} == {"set"}
        now = masks(w["pid"])
        assert now.pop(victim) == (BOTH if gets == 1 else cpus(B))  # gets == 2: it was set, then "left"
        assert set(now.values()) == {cpus(B)}


def test_einval_half_way_puts_every_thread_back(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    with workload("--cpus", f"{A},{B}", "--sleepers", "3", "--sleeper-cpus", str(A)) as w:
        before = masks(w["pid"])

        def hook(n: int, tid: int, cpus: CpuSet) -> None:
            if n == 3:  # as a thread in a narrower cpuset of its own would answer
                raise OSError(errno.EINVAL, "Invalid argument")

        result = pin(w["pid"], cpus(B), ops=HookedOps(hook), journal=journal)
        assert not result.ok and result.rolled_back
        assert result.error == f"CPUs {B} are outside what PID {w['pid']} may use (its cgroup cpuset, or offline CPUs)"
        assert masks(w["pid"]) == before
        assert sorted(t.status for t in result.threads) == ["failed", "restored", "restored"]
        assert result.journal_id is not None and journal.get(result.journal_id).state == "rolled-back"


def test_a_rollback_that_is_refused_leaves_the_entry_pending_for_undo(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    with workload("--cpus", f"{A},{B}", "--sleepers", "3") as w:
        before = masks(w["pid"])

        def hook(n: int, tid: int, cpus: CpuSet) -> None:
            if n == 3 or (n == 4 and cpus == BOTH):  # the pin fails, then so does the first undo step
                raise OSError(errno.EPERM, "Operation not permitted")

        result = pin(w["pid"], cpus(B), ops=HookedOps(hook), journal=journal)
        assert not result.ok and not result.rolled_back
        assert result.error is not None and result.error.endswith(
            "; some threads could not be put back (`affmon undo` retries)"
        )
        assert "\n" not in result.error
        assert masks(w["pid"]) != before  # one thread is still on B...
        assert result.journal_id is not None and journal.get(result.journal_id).state == "pending"
        assert undo(journal, w["pid"]).ok  # ...until undo, which the entry still allows
        assert masks(w["pid"]) == before


# -- crashes around the journal -------------------------------------------------------

CRASHING_PIN = """
import os, sys, json, subprocess
from affmon.actions.journal import Journal
from affmon.actions.threads import OsAffinity
from affmon.actions.pin import pin

mode, pid, cpu, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
class Ops(OsAffinity):
    sets = 0
    def set(self, tid, cpus):
        Ops.sets += 1
        if mode == "before-first-set":
            os._exit(70)  # the journal is written; not one mask changed yet
        if mode == "in-second-update" and Ops.sets == 1:
            print("spawn", flush=True)  # the test's spawner makes threads with the old mask
            sys.stdin.readline()
        super().set(tid, cpus)

def crash_in_append(journal, text):
    fd = os.open(journal.path, os.O_WRONLY | os.O_APPEND)
    os.write(fd, text[: len(text) // 2].encode())
    os._exit(71)  # round two's records, appended to the journal: killed half way through the line

if mode == "in-second-update":
    from affmon.actions import journal as journal_module
    journal_module.Journal._append = crash_in_append
pin(pid, {cpu}, ops=Ops(), journal=Journal(path))
"""


def test_a_crash_after_journaling_before_the_first_change(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    with workload("--cpus", f"{A},{B}", "--sleepers", "2", "--sleeper-cpus", str(A)) as w:
        before = masks(w["pid"])
        argv = [sys.executable, "-c", CRASHING_PIN, "before-first-set", str(w["pid"]), str(B), str(path)]
        crashed = subprocess.run(argv, cwd=REPO, capture_output=True)
        assert crashed.returncode == 70, crashed.stderr.decode()
        assert masks(w["pid"]) == before
        journal = Journal(path)
        (entry,) = journal.entries()
        assert entry.state == "pending" and {t.tid: t.old_cpus for t in entry.threads} == before
        assert oct(path.stat().st_mode & 0o777) == "0o600"
        result = undo(journal, w["pid"])
        assert result.ok and masks(w["pid"]) == before
        assert journal.get(entry.id).state == "undone"


def test_a_crash_inside_the_second_rounds_journal_update(tmp_path: Path) -> None:
    """Round one changed the threads it found; threads born meanwhile need round two,
    whose journal update (a line appended) dies half way through its line. The file on
    disk is the round-one entry, whole, and the unfinished line, which readers skip; undo
    puts round one's threads back and leaves the newer ones (which never changed) alone."""
    path = tmp_path / "journal.jsonl"
    Journal(path).add(JournalEntry(id="older", time_s=1.0, pid=1, start_ticks=1, cpus=cpus(A), state="undone"))
    with spawner("--cpus", f"{A},{B}") as s:
        before = masks(s.pid)
        argv = [sys.executable, "-c", CRASHING_PIN, "in-second-update", str(s.pid), str(B), str(path)]
        proc = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert proc.stdin is not None and proc.stdout is not None
        assert proc.stdout.readline().strip() == "spawn"
        born = s.send("spawn 2")  # created by the main thread, not yet pinned: the old mask
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.wait(timeout=30) == 71
        proc.stdin.close()
        proc.stdout.close()
        now = masks(s.pid)
        assert {now[t] for t in born} == {BOTH}
        journal = Journal(path)
        older, entry = journal.entries()  # the older entry kept, the new one whole
        assert older.id == "older" and entry.state == "pending"
        assert {t.tid for t in entry.threads} == set(before)  # round one's threads, none of round two's
        result = undo(journal, s.pid)
        assert result.ok, result.error
        assert masks(s.pid) == {**before, **dict.fromkeys(born, BOTH)}
        # The unfinished line does no harm: the next write rewrites the file without it.
        assert pin(s.pid, cpus(A), journal=journal).ok
        assert path.read_text().endswith("\n")


def test_a_journal_nested_past_jsons_limit_is_one_line(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    journal.path.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(JournalError) as info:
        journal.entries()
    assert "\n" not in str(info.value) and "corrupt at line 1" in str(info.value)
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    state = tmp_path / "state/affmon"
    state.mkdir(parents=True)
    (state / "journal.jsonl").write_text(journal.path.read_text())
    out = subprocess.run(
        [sys.executable, "-m", "affmon", "undo", "--all"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.splitlines()) == 1
    assert out.stderr.startswith("affmon: the affmon journal ")
