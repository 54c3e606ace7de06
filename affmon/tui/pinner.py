"""What ``r``, ``u`` and ``T`` do, behind a protocol the app is given: ``SystemPinner``
changes this machine through ``affmon.actions.pin`` and ``affmon.actions.tune``
(journaled, undoable), ``ReplayPinner`` refuses (a recording's PIDs are not this
machine's), and tests pass a fake.

The suggestion is the one ``affmon pin ROOT --suggest --with-children`` makes
(``advice.propose_pin``), sized over the monitor's recent intervals (``window``), so the
TUI and the command agree. Moving the memory too (``move_memory``) is what ``pin
--migrate-memory`` does. A tune session is the ``Tuner`` that ``affmon tune`` runs, with a
sampler of its own (the monitor's belongs to its sampling thread).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from affmon.actions.journal import EntryHead, Journal, JournalEntry, default_journal_path
from affmon.collect.procfs import ProcFs
from affmon.collect.sampler import Selection
from affmon.core.errors import AffmonError
from affmon.core.model.cpuset import format_cpulist
from affmon.core.model.rates import Snapshot
from affmon.core.model.topology import Topology
from affmon.core.plan.tuning import ScoreKind

# The pin, undo and tune code and the planner load when a key asks for them, not before
# the monitor's first frame.
if TYPE_CHECKING:
    from affmon.actions.pin import PinResult
    from affmon.actions.tune import Row, TuneResult
    from affmon.actions.undo import UndoResult
    from affmon.core.plan.advice import PinProposal

TUNE_NEEDS_LIVE = "tune needs a live process: this is a replay, its processes are not on this machine"


class TuneSession(Protocol):
    """What the tune dialog drives: ``affmon.actions.tune.Tuner`` (its docs), and ``close``
    for what the session opened (its sampler, NVML). ``prepare``, ``step`` and ``close`` run
    in the dialog's worker thread; ``abort`` from any thread."""

    settle_s: float
    window_s: float
    score_kind: ScoreKind

    @property
    def rows(self) -> tuple[Row, ...]: ...

    def prepare(self) -> tuple[Row, ...]: ...

    def step(self) -> bool: ...

    def result(self) -> TuneResult: ...

    def abort(self) -> None: ...

    def set_isolation(self, on: bool) -> tuple[Row, ...]: ...

    def close(self) -> None: ...


class Pinner(Protocol):
    replay: bool  # True: nothing here acts on this machine (a recording's processes)
    readonly: bool  # True: a monitor that changes nothing; its dialogs show the command to run

    def propose(self, snapshot: Snapshot, pid: int, window: Sequence[Snapshot] = ()) -> PinProposal | None:
        """What ``r`` on ``pid`` would do, sized over ``window`` (the recent snapshots,
        oldest first, ending with ``snapshot``); None when the process is gone."""
        ...

    def apply(
        self, proposal: PinProposal, *, isolate: bool, with_children: bool, move_memory: bool = False
    ) -> PinResult:
        """Pin ``proposal.pid`` to ``proposal.suggestion.cpus``; with ``move_memory``, then
        move its pages to the node of those CPUs. Runs in a worker thread."""
        ...

    def last_pin(self) -> str | None:
        """One line about the pin ``undo_last`` would undo; None when there is none."""
        ...

    def undo_last(self) -> UndoResult:
        """Put back the masks of the newest pin not yet undone. Runs in a worker thread."""
        ...

    def tuner(self, pid: int, start_ticks: int, on_change: Callable[[Row], None]) -> TuneSession:
        """A tune session of the job rooted at ``pid`` (the process started at
        ``start_ticks``); ``on_change`` gets each changed row, from the worker thread.
        Raises ``AffmonError`` when it cannot tune (a replay; the process is gone)."""
        ...


class SystemPinner:
    """Pins for real, journaled in ``journal`` (default: ``$XDG_STATE_HOME/affmon``)."""

    replay = False
    readonly = False

    def __init__(self, journal: Journal | None = None) -> None:
        self.journal = journal
        self._topology: Topology | None = None  # this machine's, as the last proposal saw it
        self._programs: dict[int, str | None] = {}  # the program each proposal's process ran then

    def _journal(self) -> Journal:
        return self.journal if self.journal is not None else Journal(default_journal_path())

    def propose(self, snapshot: Snapshot, pid: int, window: Sequence[Snapshot] = ()) -> PinProposal | None:
        from affmon.core.plan.advice import propose_pin

        self._topology = snapshot.topology
        try:  # heads only: no pin's thread records are needed to propose one
            in_force = [e for e in self._journal().heads() if e.state == "applied"]
        except AffmonError:
            in_force = []  # the pin will say what is wrong with the journal
        moved = {key for e in in_force for key in e.isolated_processes()}
        from affmon.actions.isolate import judge

        def judged(job_pid: int, other: int, start: int) -> str | None:
            why = judge(other, start, job_pid=job_pid, in_force=in_force)
            return None if why == "gone" else why

        proposal = propose_pin(snapshot, pid, my_uid=os.geteuid(), moved_by_affmon=moved, window=window, judge=judged)
        if proposal is not None:
            self._programs[proposal.pid] = _program(proposal.pid)
        return proposal

    def apply(
        self, proposal: PinProposal, *, isolate: bool, with_children: bool, move_memory: bool = False
    ) -> PinResult:
        from affmon.actions.lease import tuning
        from affmon.actions.pin import MoveMemory, PinResult, pin

        tuned, holder, _ = tuning(proposal.pid)
        if holder is not None:  # another affmon tunes this job: it is that tune's until it ends
            error = f"{holder.sentence(tuned)}: nothing was pinned; wait for it to end"
            return PinResult(False, proposal.suggestion.cpus, (), error, False, None)
        seen, now = self._programs.get(proposal.pid), _program(proposal.pid)
        if seen is not None and now is not None and now != seen:
            # The same process (its start time is checked by the pin) that runs another
            # program since the dialog opened: the proposal was made for the one before.
            error = (
                f"PID {proposal.pid} now runs {now}, not {seen} (it exec'd since the dialog opened): "
                "nothing was pinned; press r again for a proposal for what it runs now"
            )
            return PinResult(False, proposal.suggestion.cpus, (), error, False, None)
        request = None
        if move_memory:
            from affmon.sources.live import load_topology  # reads sysfs: only when asked

            request = MoveMemory(self._topology if self._topology is not None else load_topology())
        return pin(
            proposal.pid,
            proposal.suggestion.cpus,
            start_ticks=proposal.start_ticks,
            with_children=with_children,
            journal=self._journal(),
            isolate=isolate,
            isolate_candidates=proposal.isolate_candidates,
            move_memory=request,
        )

    def _newest(self) -> JournalEntry | None:
        """The newest pin still in force: a process it pinned or moved aside still runs (a
        pin whose processes have all exited has nothing to undo). Its thread records are
        read, no other entry's. Raises ``AffmonError`` when the journal cannot be read or is
        not trusted."""
        from affmon.actions.threads import stat_or_none

        journal = self._journal()
        if not journal.path.exists():
            return None
        proc = ProcFs("/")

        def alive(head: EntryHead) -> bool:
            keys = [*head.pinned_processes(), *head.isolated_processes()]
            return any(
                (stat := stat_or_none(proc, pid)) is not None and stat.start_ticks == start for pid, start in keys
            )

        for head in reversed(journal.heads()):
            if head.state in ("pending", "applied") and alive(head):
                return journal.get(head.id)
        return None

    def last_pin(self) -> str | None:
        """One line about the pin ``undo_last`` would undo; None when there is none. Raises
        ``AffmonError`` when the journal cannot be read or is not trusted."""
        entry = self._newest()
        if entry is None:
            return None
        return f"PID {entry.pid} pinned to CPUs {format_cpulist(entry.cpus)} ({len(entry.threads)} threads journaled)"

    def undo_last(self) -> UndoResult:
        from affmon.actions.undo import UndoResult, undo

        try:
            entry = self._newest()
        except AffmonError as exc:
            return UndoResult(False, (), (), str(exc))
        if entry is None:
            return UndoResult(False, (), (), "nothing to undo: affmon has no pin in its journal")
        return undo(self._journal(), entry.pid)

    def tuner(self, pid: int, start_ticks: int, on_change: Callable[[Row], None]) -> TuneSession:
        """``affmon tune PID``'s defaults (3 s settle, 8 s window, with children, isolation
        by its manners), journaled in this pinner's journal. Opens NVML: call it from a
        worker thread."""
        from affmon.sources.live import open_live_sources  # NVML: only when asked
        from affmon.tui.live_tuner import LiveTuner

        sources = open_live_sources(Selection(pids=(pid,), others=True))
        try:
            return LiveTuner(sources, pid, start_ticks=start_ticks, journal=self._journal(), on_change=on_change)
        except BaseException:
            sources.close()
            raise


READONLY = "a read-only monitor (--readonly, AFFMON_READONLY) changes nothing"


def _program(pid: int) -> str | None:
    """The program a process runs (``/proc/PID/exe``; it changes on exec, not on a rename);
    None when it is gone or not readable (another user's, without root)."""
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


class ReadOnlyPinner(SystemPinner):
    """``affmon --readonly``: proposes as the system pinner does (from the same journal, so
    the advice is the same) and changes nothing: the dialogs show the command instead."""

    readonly = True

    def apply(
        self, proposal: PinProposal, *, isolate: bool, with_children: bool, move_memory: bool = False
    ) -> PinResult:
        from affmon.actions.pin import PinResult

        return PinResult(False, proposal.suggestion.cpus, (), f"{READONLY}: nothing was pinned", False, None)

    def undo_last(self) -> UndoResult:
        from affmon.actions.undo import UndoResult

        entry = self._newest()
        pid = "PID" if entry is None else str(entry.pid)
        return UndoResult(False, (), (), f"{READONLY}: nothing was undone; to undo it, run `affmon undo {pid}`")

    def tuner(self, pid: int, start_ticks: int, on_change: Callable[[Row], None]) -> TuneSession:
        raise AffmonError(f"{READONLY}; to tune this job, run `affmon tune {pid}`")


class ReplayPinner:
    """For a replay: shows what ``r`` would suggest, changes nothing."""

    REFUSAL = "this is a replay: its processes are not on this machine, so nothing was pinned"
    replay = True
    readonly = False

    def propose(self, snapshot: Snapshot, pid: int, window: Sequence[Snapshot] = ()) -> PinProposal | None:
        from affmon.core.plan.advice import propose_pin

        return propose_pin(snapshot, pid, window=window)

    def apply(
        self, proposal: PinProposal, *, isolate: bool, with_children: bool, move_memory: bool = False
    ) -> PinResult:
        from affmon.actions.pin import PinResult

        return PinResult(False, proposal.suggestion.cpus, (), self.REFUSAL, False, None)

    def last_pin(self) -> str | None:
        return None

    def undo_last(self) -> UndoResult:
        from affmon.actions.undo import UndoResult

        return UndoResult(False, (), (), "this is a replay: nothing was pinned, nothing to undo")

    def tuner(self, pid: int, start_ticks: int, on_change: Callable[[Row], None]) -> TuneSession:
        raise AffmonError(TUNE_NEEDS_LIVE)
