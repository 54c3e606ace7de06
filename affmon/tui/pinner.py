"""What ``r`` and ``u`` do, behind a protocol the app is given: ``SystemPinner`` changes
this machine through ``affmon.actions.pin`` (journaled, undoable), ``ReplayPinner``
refuses (a recording's PIDs are not this machine's), and tests pass a fake.

The suggestion is the one ``affmon pin ROOT --suggest --with-children`` makes
(``advice.propose_pin`` on the latest snapshot), so the TUI and the command agree.
"""

from __future__ import annotations

import os
from typing import Protocol

from affmon.actions.journal import Journal, JournalEntry, default_journal_path
from affmon.actions.pin import PinResult, pin
from affmon.actions.undo import UndoResult, still_there, undo
from affmon.collect.procfs import ProcFs
from affmon.core.advice import PinProposal, propose_pin
from affmon.core.cpuset import format_cpulist
from affmon.core.errors import AffmonError
from affmon.core.rates import Snapshot


class Pinner(Protocol):
    def propose(self, snapshot: Snapshot, pid: int) -> PinProposal | None:
        """What ``r`` on ``pid`` would do; None when the process is gone."""
        ...

    def apply(self, proposal: PinProposal, *, isolate: bool, with_children: bool) -> PinResult:
        """Pin ``proposal.pid`` to ``proposal.suggestion.cpus``. Runs in a worker thread."""
        ...

    def last_pin(self) -> str | None:
        """One line about the pin ``undo_last`` would undo; None when there is none."""
        ...

    def undo_last(self) -> UndoResult:
        """Put back the masks of the newest pin not yet undone. Runs in a worker thread."""
        ...


class SystemPinner:
    """Pins for real, journaled in ``journal`` (default: ``$XDG_STATE_HOME/affmon``)."""

    def __init__(self, journal: Journal | None = None) -> None:
        self.journal = journal

    def _journal(self) -> Journal:
        return self.journal if self.journal is not None else Journal(default_journal_path())

    def propose(self, snapshot: Snapshot, pid: int) -> PinProposal | None:
        try:
            in_force = [e for e in self._journal().entries() if e.state == "applied"]
        except AffmonError:
            in_force = []  # the pin will say what is wrong with the journal
        moved = {
            (r.pid, r.start_ticks)
            for e in in_force
            for r in e.threads
            if r.role == "isolate" and r.tid == r.pid and r.start_ticks is not None
        }
        return propose_pin(snapshot, pid, my_uid=os.geteuid(), moved_by_affmon=moved)

    def apply(self, proposal: PinProposal, *, isolate: bool, with_children: bool) -> PinResult:
        return pin(
            proposal.pid,
            proposal.suggestion.cpus,
            start_ticks=proposal.start_ticks,
            with_children=with_children,
            journal=self._journal(),
            isolate=isolate,
            isolate_candidates=proposal.isolate_candidates,
        )

    def _newest(self) -> JournalEntry | None:
        """The newest pin still in force: some thread it recorded still runs (a pin whose
        processes have all exited has nothing to undo). Raises ``AffmonError`` when the
        journal cannot be read or is not trusted."""
        journal = self._journal()
        if not journal.path.exists():
            return None
        proc = ProcFs("/")
        live = [
            e
            for e in journal.entries()
            if e.state in ("pending", "applied") and any(still_there(proc, r) for r in e.threads)
        ]
        return live[-1] if live else None

    def last_pin(self) -> str | None:
        """One line about the pin ``undo_last`` would undo; None when there is none. Raises
        ``AffmonError`` when the journal cannot be read or is not trusted."""
        entry = self._newest()
        if entry is None:
            return None
        return f"PID {entry.pid} pinned to CPUs {format_cpulist(entry.cpus)} ({len(entry.threads)} threads journaled)"

    def undo_last(self) -> UndoResult:
        try:
            entry = self._newest()
        except AffmonError as exc:
            return UndoResult(False, (), (), str(exc))
        if entry is None:
            return UndoResult(False, (), (), "nothing to undo: affmon has no pin in its journal")
        return undo(self._journal(), entry.pid)


class ReplayPinner:
    """For a replay: shows what ``r`` would suggest, changes nothing."""

    REFUSAL = "this is a replay: its processes are not on this machine, so nothing was pinned"

    def propose(self, snapshot: Snapshot, pid: int) -> PinProposal | None:
        return propose_pin(snapshot, pid)

    def apply(self, proposal: PinProposal, *, isolate: bool, with_children: bool) -> PinResult:
        return PinResult(False, proposal.suggestion.cpus, (), self.REFUSAL, False, None)

    def last_pin(self) -> str | None:
        return None

    def undo_last(self) -> UndoResult:
        return UndoResult(False, (), (), "this is a replay: nothing was pinned, nothing to undo")
