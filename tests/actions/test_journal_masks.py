"""A journal entry's per-process masks (a split placement: the main loop on some of the
entry's CPUs, the workers on the others): they survive the file, an entry written before
they existed still reads with the shape it had, the drift rule expects each process's own
part, finished entries drop them, and ``Journal.refine`` records only parts of the entry's
CPUs, for the entry's own processes, while it is in force."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from affmon.actions.journal import (
    Journal,
    JournalEntry,
    JournalError,
    ProcessMask,
    ThreadRecord,
    expected_masks,
    new_entry_id,
)
from affmon.actions.journal_records import decode, encode

# An entry as affmon wrote it before entries could carry per-process masks.
OLD_LINE = (
    '{"version":1,"id":"20260101T000000-42-abcdef","time":1767225600.5,"pid":10,"start_ticks":100,'
    '"cpus":"0-3","state":"applied","since_ticks":99,"threads":['
    '{"pid":10,"tid":10,"start_ticks":100,"old":"0-7","role":"pin"},'
    '{"pid":11,"tid":11,"start_ticks":101,"old":"0-7","role":"pin"}]}'
)


def split_entry(*, state: str = "applied") -> JournalEntry:
    """PID 10 and its workers 21 and 22 pinned to 0-3; 10 then on 0, 21 on 1-3 (22 never
    refined: it keeps the entry's CPUs)."""
    threads = (
        ThreadRecord(10, 10, 100, frozenset(range(8))),
        ThreadRecord(10, 11, 101, frozenset(range(8))),
        ThreadRecord(21, 21, 200, frozenset(range(8))),
        ThreadRecord(22, 22, 300, frozenset(range(8))),
    )
    return JournalEntry(
        id=new_entry_id(),
        time_s=1.5,
        pid=10,
        start_ticks=100,
        cpus=frozenset(range(4)),
        state=state,  # type: ignore[arg-type]
        threads=threads,
        since_ticks=99,
        masks=(ProcessMask(10, 100, frozenset({0})), ProcessMask(21, 200, frozenset({1, 2, 3}))),
    )


@st.composite
def entries_with_masks(draw: st.DrawFn) -> JournalEntry:
    cpus = draw(st.frozensets(st.integers(0, 255), min_size=1, max_size=16))
    parts = draw(
        st.lists(
            st.builds(
                ProcessMask,
                st.integers(1, 1 << 22),
                st.integers(0, 1 << 40),
                st.frozensets(st.sampled_from(sorted(cpus)), min_size=1),
            ),
            max_size=4,
            unique_by=lambda m: m.key,
        )
    )
    return JournalEntry(new_entry_id(), 1.0, 10, 100, cpus, masks=tuple(parts))


@given(entries_with_masks())
def test_masks_survive_the_line_and_are_written_only_for_a_split(entry: JournalEntry) -> None:
    line = json.dumps(encode(entry))
    assert ('"masks"' in line) == bool(entry.masks)
    back = decode(json.loads(line))
    assert back == entry
    for m in entry.masks:
        assert back.cpus_of(m.key) == m.cpus
    assert back.cpus_of((10, 99)) == entry.cpus  # a process without a part of its own
    assert back.set_masks == {entry.cpus, *(m.cpus for m in entry.masks)}


def test_an_entry_written_before_masks_existed_reads_and_keeps_its_shape(tmp_path: Path) -> None:
    entry = decode(json.loads(OLD_LINE))
    assert entry.masks == () and entry.set_masks == {frozenset(range(4))}
    assert encode(entry) == json.loads(OLD_LINE)
    journal = Journal(tmp_path / "journal.jsonl")
    journal.path.write_text(OLD_LINE + "\n")
    journal.path.chmod(0o600)
    assert expected_masks(journal) == {(10, 100): frozenset(range(4)), (11, 101): frozenset(range(4))}


def test_the_drift_rule_expects_each_processs_own_part_until_the_entry_is_finished(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    entry = split_entry()
    journal.add(entry)
    assert journal.entries() == [entry]
    assert expected_masks(journal) == {(10, 100): {0}, (21, 200): {1, 2, 3}, (22, 300): {0, 1, 2, 3}}
    undone = journal.set_state(entry.id, "undone")
    assert undone.masks and journal.entries()[0].masks == ()  # nothing is left to expect from it
    assert expected_masks(journal) == {}


def test_refine_records_parts_of_the_entrys_cpus_for_its_own_processes_only(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    entry = split_entry()
    plain = JournalEntry(entry.id, entry.time_s, 10, 100, entry.cpus, "applied", entry.threads, since_ticks=99)
    journal.add(plain)
    first = journal.refine(plain.id, {(10, 100): frozenset({0}), (21, 200): frozenset({1, 2, 3})})
    assert journal.get(plain.id) == first == entry
    again = journal.refine(plain.id, {(10, 100): frozenset({0, 1})})  # replaces 10's part, keeps 21's
    assert again.cpus_of((10, 100)) == {0, 1} and again.cpus_of((21, 200)) == {1, 2, 3}
    assert len(again.masks) == 2
    wrong: dict[tuple[int, int], frozenset[int]]
    for wrong in (
        {(10, 99): frozenset({0})},  # PID 10 with another start: not the process pinned
        {(77, 1): frozenset({0})},  # not a process of this entry
        {(21, 200): frozenset({4})},  # outside the entry's CPUs
        {(21, 200): frozenset[int]()},
    ):
        with pytest.raises(JournalError, match="cannot refine"):
            journal.refine(plain.id, wrong)
    assert journal.get(plain.id) == again  # a refused refinement changes nothing
    journal.set_state(plain.id, "undone")
    with pytest.raises(JournalError, match="not in force"):
        journal.refine(plain.id, {(10, 100): frozenset({0})})
