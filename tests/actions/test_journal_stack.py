"""Stacked pins: a job pinned again and again keeps the journal near one pin's size and
undo still puts back exactly what each pin found (threads started since, a thread whose
mask changed between pins, a pin killed half way); a journal an older affmon wrote full
is compacted by the next write; a reader asked about one process parses the thread
records of that process's entries only; a line changed since it was written is corrupt;
a writer killed at any moment leaves a journal whose every line parses, and its
temporary file is removed by the next write; a pin's later rounds are appended, and an
append cut short is skipped."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from affmon.actions import journal as journal_module
from affmon.actions.journal import Journal, PinnedMasks, ProcessMask, expected_masks, new_entry_id, stacked
from affmon.actions.journal_records import (
    JournalEntry,
    JournalError,
    ThreadRecord,
    decode,
    encode,
    is_sealed,
    read_head,
    read_threads,
    seal,
    seal_more,
)
from affmon.actions.pin import pin
from affmon.actions.threads import OsAffinity
from affmon.actions.undo import undo
from affmon.collect.identity import uptime_ticks
from affmon.core.model.cpuset import CpuSet
from tests.helpers.crash import crashing_pin
from tests.helpers.live import workload
from tests.helpers.pinning import BOTH, REPO, A, B, cpus, masks, spawner
from tests.helpers.proc import start_ticks

PINS = 20


def a_tick_later() -> None:
    """Until the boot clock's tick (10 ms) changes: a pin begun now starts after every task
    started so far, as the kernel counts start times."""
    now = uptime_ticks()
    assert now is not None
    deadline = time.monotonic() + 5
    while uptime_ticks() == now:
        assert time.monotonic() < deadline, "the boot clock did not advance"
        time.sleep(0.002)


def sleepers_on(pid: int, count: int, cpu: int) -> None:
    """Until ``count`` threads of the workload ``pid`` are on ``cpu`` alone: its sleepers set
    their masks after it printed its line."""
    deadline = time.monotonic() + 10
    while sorted(masks(pid).values(), key=sorted).count(cpus(cpu)) < count:
        assert time.monotonic() < deadline, "the sleepers did not set their masks"
        time.sleep(0.01)


def alternate(n: int) -> CpuSet:
    """The CPUs of the n-th stacked pin (from 1): B, A, B, ..."""
    return cpus(B) if n % 2 else cpus(A)


# -- what a stacked pin keeps -------------------------------------------------------------


def record(tid: int, start: int | None, old: set[int], *, pid: int = 10, role: str = "pin") -> ThreadRecord:
    return ThreadRecord(pid, tid, start, frozenset(old), role)  # type: ignore[arg-type]


def stacked_entry(*threads: ThreadRecord, since: int | None = 500) -> JournalEntry:
    return JournalEntry(new_entry_id(), 1.0, 10, 100, frozenset({1}), "applied", threads, since_ticks=since)


MAIN = record(10, 100, {0})


@pytest.mark.parametrize(
    ("threads", "kept_tids", "unlisted"),
    [
        # The mask most threads had goes into ``unlisted``; the main thread keeps its record.
        ((MAIN, record(11, 200, {0}), record(12, 201, {0})), [10], {0}),
        # A thread on another mask (it set its own between the pins) keeps its record.
        ((MAIN, record(11, 200, {0}), record(12, 201, {0}), record(13, 202, {3})), [10, 13], {0}),
        # The usual mask is the one most threads had, not the main thread's.
        ((MAIN, record(11, 200, {2}), record(12, 201, {2})), [10], {2}),
        # Started since the pin began (or in its tick), or of unknown start: kept.
        (
            (MAIN, record(11, 200, {0}), record(12, 500, {0}), record(13, 600, {0}), record(14, None, {0})),
            [10, 12, 13, 14],
            {0},
        ),
        # Another process's threads moved aside by --isolate: kept.
        ((MAIN, record(11, 200, {0}), record(70, 50, {0}, pid=70, role="isolate")), [10, 70], {0}),
    ],
)
def test_a_stacked_pin_keeps_the_records_undo_could_not_tell(
    threads: tuple[ThreadRecord, ...], kept_tids: list[int], unlisted: set[int]
) -> None:
    entry = stacked_entry(*threads)
    below = {(10, 100)}
    out = stacked(entry, below)
    assert [t.tid for t in out.threads] == kept_tids
    assert out.unlisted == (ProcessMask(10, 100, frozenset(unlisted)),)
    assert stacked(out, below) == out  # compacting again changes nothing
    assert out.pinned_processes() == out.head().pinned_processes() == entry.pinned_processes()


@pytest.mark.parametrize(
    ("entry", "below"),
    [
        (stacked_entry(MAIN, record(11, 200, {0})), {(99, 1)}),  # nothing below pinned PID 10...
        (stacked_entry(MAIN, record(11, 200, {0})), {(10, 50)}),  # ...only a PID 10 started at another time
        (stacked_entry(MAIN, record(11, 200, {0}), since=None), {(10, 100)}),  # no start of the pin to tell by
        (replace(stacked_entry(MAIN, record(11, 200, {0})), state="undone"), {(10, 100)}),
        (stacked_entry(record(11, 200, {0})), {(10, 100)}),  # no main thread's record (its new tasks' mask)
    ],
)
def test_an_entry_with_nothing_below_it_or_nothing_to_tell_by_is_kept_whole(
    entry: JournalEntry, below: set[tuple[int, int]]
) -> None:
    assert stacked(entry, below) == entry


thread_records = st.builds(
    ThreadRecord,
    st.sampled_from([10, 11, 12]),
    st.integers(1, 1 << 22),
    st.one_of(st.none(), st.integers(0, 1 << 40)),
    st.frozensets(st.integers(0, 255), min_size=1, max_size=8),
    st.sampled_from(["pin", "isolate"]),
)


@given(
    st.lists(thread_records, max_size=30),
    st.lists(st.frozensets(st.integers(0, 255), min_size=1, max_size=8), max_size=2),
    st.sampled_from(["pending", "applied", "undone"]),
)
def test_a_sealed_line_reads_back_head_and_records_and_is_still_one_json_object(
    threads: list[ThreadRecord], unlisted: list[CpuSet], state: str
) -> None:
    entry = JournalEntry(
        new_entry_id(),
        1.5,
        10,
        100,
        frozenset({0, 1}),
        state,  # type: ignore[arg-type]
        tuple(threads),
        since_ticks=99,
        unlisted=tuple(ProcessMask(10 + i, 100, old) for i, old in enumerate(unlisted)),
    )
    line = seal(entry)
    assert "\n" not in line and is_sealed(line)
    head = read_head(line)
    assert head == entry.head() and read_threads(line) == entry.threads
    assert head.pinned_processes() == entry.pinned_processes() and head.pinned_pids == entry.pinned_pids
    assert decode(json.loads(line)) == entry  # what a reader of unsealed lines makes of it
    assert json.loads(line)["version"] == (2 if unlisted else 1)  # an older affmon refuses what it would misread


# -- live: size and exact undo ------------------------------------------------------------


def test_twenty_stacked_pins_keep_the_journal_within_twice_one_pins_entry(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    with workload("--cpus", f"{A},{B}", "--sleepers", "200") as w:
        pid = w["pid"]
        a_tick_later()
        assert pin(pid, alternate(1), journal=journal).ok
        one_pin = journal.path.stat().st_size
        for n in range(2, PINS + 1):
            assert pin(pid, alternate(n), journal=journal).ok
        size = journal.path.stat().st_size
        assert size <= 2 * one_pin, (size, one_pin)
        first, *rest = journal.entries()
        assert len(first.threads) == 201 and first.unlisted == ()
        assert len(rest) == PINS - 1 and {e.state for e in rest} == {"applied"}
        for n, entry in enumerate(rest, start=2):
            # The main thread's record, and the mask the pin below left on every other thread.
            assert [t.tid for t in entry.threads] == [pid]
            assert entry.unlisted == (ProcessMask(pid, start_ticks(pid), alternate(n - 1)),)
        assert expected_masks(journal) == {(pid, start_ticks(pid)): alternate(PINS)}


def test_undo_after_twenty_stacked_pins_restores_the_masks_from_before_the_first(tmp_path: Path) -> None:
    """Each ``undo PID`` takes back one pin, newest first, to exactly the masks before it:
    threads on masks of their own, threads started between pins (given what the main
    thread had when the pin they missed began), a thread whose mask was changed behind
    affmon's back between two pins (that pin's record of it)."""
    journal = Journal(tmp_path / "journal.jsonl")
    with spawner("--cpus", f"{A},{B}") as s:
        pid = s.pid
        s.send("spawn 3")
        s.send(f"own {A}")
        a_tick_later()
        after = [masks(pid)]  # after[k]: every thread's mask once pin k is in force
        for n in range(1, PINS + 1):
            assert pin(pid, alternate(n), journal=journal).ok
            if n == 5:
                s.send("spawn 2")  # started between pins, with pin 5's mask
                a_tick_later()
            if n == 7:
                changed = max(after[0])
                os.sched_setaffinity(changed, cpus(A))  # pin 7 set B; pin 8 (A) finds A
            after.append(masks(pid))
        kept = [e for e in journal.entries() if e.threads[1:]]
        assert [len(e.threads) for e in kept] == [6, 2]  # the first pin's 6 threads; pin 8's exception
        for n in range(PINS, 0, -1):
            result = undo(journal, pid)
            assert result.ok, result.error
            assert len(result.entry_ids) == 1
            below = after[n - 1]
            assert masks(pid) == {tid: below.get(tid, below[pid]) for tid in masks(pid)}, n
        assert masks(pid) == {tid: after[0].get(tid, BOTH) for tid in masks(pid)}
        assert {e.state for e in journal.entries()} == {"undone"}
        assert not undo(journal, pid).ok  # nothing left


def test_a_stacked_pin_killed_half_way_is_undone_to_the_pin_below(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    with workload("--cpus", f"{A},{B}", "--sleepers", "4", "--sleeper-cpus", str(A)) as w:
        pid = w["pid"]
        sleepers_on(pid, 4, A)
        before = masks(pid)
        a_tick_later()
        assert pin(pid, cpus(A), journal=journal).ok
        below = masks(pid)
        crashed = subprocess.run(crashing_pin(pid, B, path, after=3), cwd=REPO)
        assert crashed.returncode == 70
        assert sorted(masks(pid).values(), key=sorted).count(cpus(B)) == 2  # two threads moved, then the kill
        first, killed = journal.entries()
        assert (first.state, killed.state) == ("applied", "pending")
        assert [t.tid for t in killed.threads] == [pid] and killed.unlisted == (
            ProcessMask(pid, start_ticks(pid), cpus(A)),
        )
        assert undo(journal, pid).ok and masks(pid) == below
        assert undo(journal, pid).ok and masks(pid) == before


def test_a_journal_an_older_affmon_wrote_whole_is_compacted_by_the_next_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five stacked pins, every thread recorded in each, on lines without a checksum (as
    affmon wrote them before): the next write keeps the first whole and each later one as
    its main thread's record, and undo still puts every mask back."""
    journal = Journal(tmp_path / "journal.jsonl")
    with workload("--cpus", f"{A},{B}", "--sleepers", "50", "--sleeper-cpus", str(A)) as w:
        pid = w["pid"]
        sleepers_on(pid, 50, A)
        before = masks(pid)
        a_tick_later()
        monkeypatch.setattr(journal_module, "stacked", lambda entry, below: entry)
        for n in range(1, 6):
            assert pin(pid, alternate(n), journal=journal).ok
        monkeypatch.undo()
        whole = journal.entries()
        assert [len(e.threads) for e in whole] == [51] * 5
        lines = [json.dumps(encode(e), separators=(",", ":")) for e in whole]
        journal.path.write_text("".join(f"{line}\n" for line in lines))
        journal.path.chmod(0o600)
        journal.prepare()
        assert journal.path.stat().st_size <= 2 * len(lines[0])
        assert [len(e.threads) for e in journal.entries()] == [51, 1, 1, 1, 1]
        assert undo(journal).ok
        assert masks(pid) == before


# -- a reader pays for what it reads ------------------------------------------------------


def test_a_reader_asked_about_one_process_parses_only_its_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    with workload("--cpus", f"{A},{B}", "--sleepers", "300") as job, workload("--cpus", f"{A},{B}") as other:
        for n in range(1, 4):
            assert pin(job["pid"], alternate(n), journal=journal).ok
        mine = pin(other["pid"], cpus(A), journal=journal)
        assert mine.ok and mine.journal_id is not None
        parsed: list[tuple[str, int]] = []  # (entry, thread records) for each line whose records were parsed
        real = journal_module.read_threads

        def counted(line: str) -> tuple[ThreadRecord, ...]:
            records = real(line)
            parsed.append((read_head(line).id, len(records)))
            return records

        monkeypatch.setattr(journal_module, "read_threads", counted)
        # The views: heads only, every tick and on a change.
        assert expected_masks(journal)[(other["pid"], start_ticks(other["pid"]))] == cpus(A)
        assert PinnedMasks(journal.path)() == expected_masks(journal)
        assert [h.id for h in journal.heads()][-1] == mine.journal_id
        assert parsed == []
        # The undo of the other process: its entry's one record, none of the job's 300 and more.
        job_before = masks(job["pid"])
        assert undo(journal, other["pid"]).ok
        assert parsed == [(mine.journal_id, 1)]
        assert masks(job["pid"]) == job_before
        parsed.clear()
        assert journal.get(mine.journal_id).state == "undone"
        assert parsed == [(mine.journal_id, 0)]
        monkeypatch.undo()
        assert undo(journal).ok  # the job's three, newest first


def test_a_line_changed_since_it_was_written_is_corrupt_and_left_alone(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    journal.add(JournalEntry(new_entry_id(), 1.0, 10, 100, cpus(0), "applied", (record(10, 100, {0, 1}),)))
    journal.add(JournalEntry(new_entry_id(), 2.0, 20, 100, cpus(0), "applied", (record(20, 100, {0, 1}, pid=20),)))
    good = journal.path.read_text()
    first, second = good.splitlines()
    for damaged in (
        second.replace('"old":"0-1"', '"old":"0-2"'),  # in the thread records, which a head read skips
        second[: len(second) // 2],  # cut short
        second.replace('"sum":"', '"sum":"x', 1),
    ):
        text = f"{first}\n{damaged}\n"
        journal.path.write_text(text)
        for read in (journal.heads, journal.entries, lambda: expected_masks(journal)):
            with pytest.raises(JournalError, match=r"is corrupt at line 2 \(.*\); move it aside to continue$"):
                read()
        with pytest.raises(JournalError):
            journal.add(JournalEntry(new_entry_id(), 3.0, 30, 100, cpus(0)))
        assert journal.path.read_text() == text  # never rewritten over the user's data
    assert PinnedMasks(journal.path)() == {}  # a view is not stopped by it


# -- a pin of many rounds -------------------------------------------------------------------


def test_a_pin_of_many_rounds_appends_each_later_round_instead_of_rewriting_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each round after the first adds one line (its records, synced before its sets)
    instead of rewriting the journal; the pin's last write folds them into its entry."""
    journal = Journal(tmp_path / "journal.jsonl")
    rewrites: list[int] = []
    appends: list[str] = []
    real_replace, real_append = Journal._replace, Journal._append

    def replacing(self: Journal, text: str) -> None:
        rewrites.append(len(text))
        real_replace(self, text)

    def appending(self: Journal, text: str) -> None:
        appends.append(text)
        real_append(self, text)

    monkeypatch.setattr(Journal, "_replace", replacing)
    monkeypatch.setattr(Journal, "_append", appending)
    with spawner("--cpus", f"{A},{B}") as s:
        s.send("spawn 20")
        before = masks(s.pid)

        spawned: list[int] = []

        class EachRound(OsAffinity):
            """On the first set, and then on the set of the thread it started (the one new
            thread of each later round), a thread on a mask of its own starts: the next
            round finds it."""

            def set(self, tid: int, cpus: CpuSet) -> None:
                super().set(tid, cpus)
                if len(spawned) < 4 and (not spawned or tid == spawned[-1]):
                    spawned.append(s.send(f"own {A}"))

        result = pin(s.pid, cpus(B), ops=EachRound(), journal=journal)
        assert result.ok, result.error
        assert len(appends) == 4  # rounds 2 to 5, one line each
        assert len(rewrites) == 3  # proving the journal writable, the first round, "applied"
        (entry,) = journal.entries()
        assert entry.state == "applied" and len(entry.threads) == len(before) + 4
        assert len(journal.path.read_text().splitlines()) == 1  # folded into the entry
        assert undo(journal, s.pid).ok
        assert {tid: m for tid, m in masks(s.pid).items() if tid in before} == before


def test_an_append_cut_short_is_ignored_and_the_next_write_rewrites_the_file(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    first = JournalEntry(new_entry_id(), 1.0, 10, 100, cpus(0), "pending", (record(10, 100, {0, 1}),))
    journal.add(first)
    journal.extend(first.id, (record(11, 101, {0, 1}),))
    whole = journal.path.read_text()
    assert len(whole.splitlines()) == 2 and whole.endswith("\n")
    assert [len(e.threads) for e in journal.entries()] == [2]
    # A pin killed in the middle of its next append: the line has no end.
    with journal.path.open("a") as f:
        f.write(seal_more(first.id, (record(12, 102, {0, 1}),))[:40])
    assert [len(e.threads) for e in journal.entries()] == [2]  # every reader skips the unfinished line
    assert [h.id for h in journal.heads()] == [first.id]
    journal.extend(first.id, (record(13, 103, {0, 1}),))  # rewritten, not appended to the cut line
    text = journal.path.read_text()
    assert len(text.splitlines()) == 1 and text.endswith("\n")
    assert [t.tid for t in journal.get(first.id).threads] == [10, 11, 13]
    # A line adding records to no entry above it is corrupt.
    journal.path.write_text(text + seal_more("nothing-here", (record(14, 104, {0}),)) + "\n")
    with pytest.raises(JournalError, match=r"is corrupt at line 2 .*no entry above it"):
        journal.entries()


# -- killed writers ----------------------------------------------------------------------

WRITER = """
import os, sys, time
from affmon.actions.journal import Journal, JournalEntry, ThreadRecord, new_entry_id
journal = Journal(sys.argv[1])
mode = sys.argv[2]
if mode == "before-rename":
    os.replace = lambda *args, **kwargs: os._exit(71)  # the new file is written, not yet renamed
print("ready", flush=True)
n = 0
while True:
    heads = journal.heads()
    if len(heads) < 6:  # then rewrites of those: the file stays about 1 MB
        pid = 10_000 + len(heads)
        records = tuple(ThreadRecord(pid, pid + i, 7, frozenset({0, 1}), "pin") for i in range(3000))
        entry = JournalEntry(new_entry_id(), time.time(), pid, 7, frozenset({0}), "pending", records, since_ticks=9)
        journal.add(entry)
        journal.set_state(entry.id, "applied")
    else:
        journal.set_state(heads[n % len(heads)].id, "applied")
        n += 1
"""


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_a_writer_killed_between_its_write_and_its_rename_leaves_the_old_file_and_a_temporary_the_next_write_removes(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    journal.add(JournalEntry(new_entry_id(), 1.0, 10, 100, cpus(0), "applied", (record(10, 100, {0, 1}),)))
    text = journal.path.read_text()
    out = subprocess.run(
        [sys.executable, "-c", WRITER, str(journal.path), "before-rename"], cwd=REPO, capture_output=True
    )
    assert out.returncode == 71, out.stderr
    assert journal.path.read_text() == text
    (left,) = leftovers(tmp_path)
    assert left.startswith(".journal.jsonl.") and len(left) == len(".journal.jsonl.") + 12 + len(".tmp")
    (tmp_path / "notes.tmp").write_text("not the journal's")  # named otherwise: never touched
    (tmp_path / ".journal.jsonl.mine.tmp").write_text("")
    assert len(journal.entries()) == 1  # a reader takes the temporary for nothing
    journal.add(JournalEntry(new_entry_id(), 2.0, 20, 100, cpus(0)))
    assert leftovers(tmp_path) == [".journal.jsonl.mine.tmp", "notes.tmp"]


def test_a_writer_killed_at_any_moment_leaves_a_journal_whose_every_line_parses(tmp_path: Path) -> None:
    """SIGKILL at random moments of a writer that keeps adding and updating entries of 3,000
    records: after every kill each line parses and no entry is lost; the next write removes
    what the killed one left."""
    path = tmp_path / "journal.jsonl"
    chance = random.Random(20261130)
    seen: set[str] = set()
    for _kill in range(12):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), "run"], cwd=REPO, stdout=subprocess.PIPE, text=True
        )
        assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
        time.sleep(chance.uniform(0.0, 0.4))
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        writer.stdout.close()
        entries = Journal(path).entries()  # every line parses, sums and all
        assert all(len(e.threads) == 3000 for e in entries)
        assert seen <= {e.id for e in entries}  # nothing written before is lost
        seen = {e.id for e in entries}
    assert seen
    Journal(path).add(JournalEntry(new_entry_id(), 1.0, 10, 100, cpus(0)))
    assert leftovers(tmp_path) == []
