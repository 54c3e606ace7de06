"""The journal's readers in front of a pin or an undo parse the thread records of the
entries they act on, not the others': the bare ``affmon undo`` (which pin is the newest
in force) and the monitor's pin dialog (which processes an earlier isolate moved; the
newest pin, for ``u``). A journal of two pins of live processes, one with 300 records, is
read with ``read_threads`` counted; nothing is pinned or undone (the undo itself is
replaced by a stub: it has its own test in ``tests/actions/test_journal_stack.py``)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from affmon.actions import journal as journal_module
from affmon.actions.journal import Journal, JournalEntry, ThreadRecord, default_journal_path, new_entry_id
from affmon.actions.journal_records import read_head
from affmon.actions.undo import UndoResult
from affmon.commands import pinning
from affmon.core.plan import advice
from tests.helpers.proc import start_ticks


@pytest.fixture
def two_pins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Journal, JournalEntry, JournalEntry]]:
    """An older pin of one sleeper (50 records) and a newer one of another (300 records,
    and the first sleeper's main thread moved aside by its isolation), in the default
    journal of a temporary ``XDG_STATE_HOME``."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    sleepers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
    try:
        (one, two) = ((p.pid, start_ticks(p.pid)) for p in sleepers)
        mask = frozenset(os.sched_getaffinity(0))
        older = JournalEntry(
            new_entry_id(),
            1.0,
            one[0],
            one[1],
            frozenset({0}),
            "applied",
            tuple(ThreadRecord(one[0], one[0] + i, one[1], mask) for i in range(50)),
        )
        newer = JournalEntry(
            new_entry_id(),
            2.0,
            two[0],
            two[1],
            frozenset({0}),
            "applied",
            (
                *(ThreadRecord(two[0], two[0] + i, two[1], mask) for i in range(300)),
                ThreadRecord(one[0], one[0], one[1], mask, "isolate"),
            ),
        )
        journal = Journal(default_journal_path())
        journal.add(older)
        journal.add(newer)
        yield journal, older, newer
    finally:
        for p in sleepers:
            p.kill()
            p.wait()


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """(entry, thread records) for each line whose records are parsed from now on."""
    found: list[tuple[str, int]] = []
    real = journal_module.read_threads

    def counted(line: str) -> tuple[ThreadRecord, ...]:
        records = real(line)
        found.append((read_head(line).id, len(records)))
        return records

    monkeypatch.setattr(journal_module, "read_threads", counted)
    return found


def test_a_bare_undo_chooses_the_newest_pin_from_the_heads(
    two_pins: tuple[Journal, JournalEntry, JournalEntry], parsed: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    _journal, _older, newer = two_pins
    asked: list[int | None] = []

    def stub(journal: Journal, pid: int | None = None) -> UndoResult:
        asked.append(pid)
        return UndoResult(True, (), (), None)

    monkeypatch.setattr(pinning, "undo", stub)
    assert pinning.cmd_undo(argparse.Namespace(pid=None, all=False, json=True)) == 0
    assert asked == [newer.pid]
    assert parsed == []


def test_the_pin_dialog_reads_heads_and_only_the_newest_pins_records(
    two_pins: tuple[Journal, JournalEntry, JournalEntry], parsed: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from affmon.tui.pinner import SystemPinner

    journal, older, newer = two_pins
    seen: list[set[tuple[int, int]]] = []

    def propose(*args: object, moved_by_affmon: set[tuple[int, int]], **kwargs: object) -> None:
        seen.append(moved_by_affmon)

    monkeypatch.setattr(advice, "propose_pin", propose)
    pinner = SystemPinner(journal)
    assert pinner.propose(SimpleNamespace(topology=None), newer.pid) is None  # type: ignore[arg-type]
    assert seen == [{(older.pid, older.start_ticks)}]  # moved aside by the newer pin's isolation
    assert parsed == []
    line = pinner.last_pin()
    assert line is not None and f"PID {newer.pid}" in line and "301 threads journaled" in line
    assert parsed == [(newer.id, 301)]
