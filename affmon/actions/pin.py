"""Re-pinning a process's threads: the one place affmon changes the system.

``pin`` sets the affinity of every thread of a process (and, on request, of its
descendants: DataLoader workers), the way hwloc does it: list ``/proc/PID/task``, set each
TID, list again, until a round finds no thread that still needs the change (at most
``MAX_ROUNDS``). Before any mask changes, the old masks go into the write-ahead journal
(``affmon.actions.journal``), so a crash half way can still be undone. A failure on any
thread puts back every thread already changed, newest first, and returns ``ok=False``
with a one-line reason; a thread that exits under our feet (ESRCH) is "exited", not a
failure. Every mask is read back, because the kernel silently intersects it with the
task's cpuset.

``isolate`` also moves other busy processes' threads off the pinned CPUs (tuna's
``isolate``), with manners (``affmon.core.plan.isolation``): by default only the user's own
processes, never PID 1 or a process pinned on purpose; a refusal there is reported, never
a failure of the pin.

A process is named by (PID, start time): the caller may pass the start time it saw
(the TUI's dialog, ``--isolate`` candidates), and a PID that now belongs to a newer
process is refused or skipped. The journal is locked for the whole pin and proved
writable before the first change, so two pins never interleave and a pin on a read-only
file system changes nothing.

All system calls go through an ``AffinityOps``: ``OsAffinity`` for real,
``DryRunAffinity`` to see what would happen, or a test's wrapper that fails on demand.

With ``move_memory`` (the user's consent: ``pin --migrate-memory``), once every thread is
pinned and read back, the process's pages move to the node of the new CPUs
(``affmon.actions.migrate``): the intent goes into the journal entry first, then the
outcome (from which nodes, how many bytes, pages not moved). A migration the kernel
refuses leaves the pin in force and is reported in ``PinResult.memory``; anything that
interrupts it puts every thread back, as for any other failure, so threads are never
left half pinned. CPUs that span NUMA nodes are refused before anything changes (there
is no one node to move the memory to); on a machine with one node of CPUs nothing is
moved and the result says so.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from affmon.actions.isolate import IsolationPlan
from affmon.actions.journal import EntryHead, Journal, JournalEntry, ProcessKey, ThreadRecord, new_entry_id
from affmon.actions.journal_trust import user_name
from affmon.actions.migrate import MigrationResult, MoveMemory, migrate_after_pin, spans_nodes_message, target_node
from affmon.actions.threads import (
    MAX_ROUNDS,
    AffinityOps,
    DryRunAffinity,
    OsAffinity,
    ThreadResult,
    ThreadStatus,
    einval_message,
    refusal_message,
    setuid_note,
    stat_or_none,
)
from affmon.actions.undo import still_there, sweep_new_threads
from affmon.collect.cgroup import cgroup_cpuset
from affmon.collect.identity import tgid_of, uptime_ticks
from affmon.collect.procfs import PF_KTHREAD, PF_NO_SETAFFINITY, ProcFs, StatFields
from affmon.core.errors import AffmonError
from affmon.core.model import tree
from affmon.core.model.cpuset import MAX_CPU_ID, CpuSet, format_cpulist
from affmon.core.text import term_safe

__all__ = ["AffinityOps", "DryRunAffinity", "MoveMemory", "OsAffinity", "PinResult", "ThreadResult", "pin"]


@dataclass(frozen=True)
class PinResult:
    """``ok`` is False only when the pin failed; ``error`` then says why in one line, and
    ``rolled_back`` is True when every thread it had changed is back as it was (vacuously
    when it failed before the first change; False for a request refused before it began,
    and when some thread could not be put back: the journal entry stays pending for undo).
    ``warning`` is one line when it succeeded but some mask in force is not the one asked
    for (the kernel intersected it with a cpuset, or the program re-pinned itself), or
    when it replaced an earlier pin of the same process. ``changed``: whether any mask
    was changed at all (a pin refused before it began changed nothing). ``memory``: what
    the migration of the process's pages did, when one was asked for and the threads
    were pinned (``memory.ok`` False: the pin stands, the memory did not move)."""

    ok: bool
    cpus: CpuSet
    threads: tuple[ThreadResult, ...]
    error: str | None
    rolled_back: bool
    journal_id: str | None
    dry_run: bool = False
    warning: str | None = None
    changed: bool = False
    memory: MigrationResult | None = None


class _Failure(Exception):
    """A thread could not be changed: the pin stops and rolls back."""


def pin(
    pid: int,
    cpus: Iterable[int],
    *,
    start_ticks: int | None = None,
    with_children: bool = False,
    root: str = "/",
    ops: AffinityOps | None = None,
    journal: Journal | None = None,
    isolate: bool = False,
    isolate_candidates: Sequence[ProcessKey] = (),
    isolate_all: bool = False,
    move_memory: MoveMemory | None = None,
    include_others: bool = False,
    skip_refused: bool = False,
) -> PinResult:
    """Set every thread of ``pid`` (with its descendants when ``with_children``: the job's
    own, the same user and session, unless ``include_others``) to
    ``cpus``; with ``isolate``, also move the threads of ``isolate_candidates`` (PID,
    start time) off them, those the isolation rule allows (all but PID 1 and kernel
    threads with ``isolate_all``). ``start_ticks``: the start time of the process meant;
    another process holding the PID now is refused. ``move_memory``: then move the
    process's pages to the node of ``cpus`` (module doc). A descendant whose threads the
    kernel refuses to change (EPERM: a setuid program, a security policy) fails the pin,
    naming it and why; with ``skip_refused`` its threads are left as they are and named,
    and the others pinned. Never raises for a system refusal: the result says what
    happened."""
    job = _Pin(pid, frozenset(cpus), with_children, root, ops or OsAffinity(), journal)
    job.expected_start = start_ticks
    job.isolate_all = isolate_all
    job.move_memory = move_memory
    job.include_others = include_others
    job.skip_refused = skip_refused
    return job.run(isolate_candidates if isolate else ())


class _Pin:
    def __init__(
        self, pid: int, cpus: CpuSet, with_children: bool, root: str, ops: AffinityOps, journal: Journal | None
    ) -> None:
        self.pid = pid
        self.cpus = cpus
        self.with_children = with_children
        self.root = root
        self.proc = ProcFs(root)
        self.ops = ops
        self.dry_run = isinstance(ops, DryRunAffinity)
        self.journal = None if self.dry_run else journal
        self.journal_to_read = journal  # a dry run reads it (what is in force), never writes
        self.entry: JournalEntry | None = None
        self.entry_written = False
        self.results: dict[int, ThreadResult] = {}  # by TID, in the order found
        self.applied: list[ThreadRecord] = []  # changed, in order (rollback goes backwards)
        self.changed = False
        self.expected_start: int | None = None
        self.isolate_all = False
        self.include_others = False
        self.skip_refused = False
        self.refused: set[int] = set()  # descendants the kernel refused, left as they are (skip_refused)
        self.notes: list[str] = []
        self.in_force: list[EntryHead] = []  # the journal's pins in force when this one began
        self.move_memory: MoveMemory | None = None
        self.memory: MigrationResult | None = None
        self.allowed: CpuSet | None = None  # the target's cpuset, when it allows only part of ``cpus``

    def run(self, isolate_candidates: Sequence[ProcessKey]) -> PinResult:
        if self.journal is None:
            return self._run(isolate_candidates)
        try:
            with self.journal.locked():
                return self._run(isolate_candidates)
        except AffmonError as exc:  # the journal could not be locked: nothing began
            return self._result(ok=False, error=f"{exc}; nothing was changed", rolled_back=False)

    def _run(self, isolate_candidates: Sequence[ProcessKey]) -> PinResult:
        problem = self._begin()
        if problem is not None:
            return self._result(ok=False, error=problem, rolled_back=False)
        try:
            self._pin_rounds()
            self._read_back()
            if isolate_candidates:
                self._isolate(isolate_candidates)
            if self.move_memory is not None:
                self._migrate(self.move_memory)
            if self.entry_written:
                self._set_state("applied")
        except (_Failure, AffmonError) as exc:
            return self._fail(str(exc))
        except BaseException:
            self._fail("interrupted")  # Ctrl-C or a bug half way: put the threads back first
            raise
        warnings = [w for w in (self._mismatch_warning(), *self.notes) if w]
        return self._result(ok=True, error=None, rolled_back=False, warning="; ".join(warnings) or None)

    # -- checks ------------------------------------------------------------------

    def _begin(self) -> str | None:
        """Refuse what cannot be a pin (None when it can be), and prepare the journal entry."""
        if not self.cpus:
            return "no CPUs given to pin to"
        if any(c < 0 or c > MAX_CPU_ID for c in self.cpus):
            return f"not a CPU number in {sorted(self.cpus)[:8]}"
        if self.move_memory is not None:
            topology = self.move_memory.topology
            if len(topology.cpu_numa_nodes) > 1 and target_node(topology, self.cpus) is None:
                return spans_nodes_message(topology, self.cpus)
        stat = self._stat(self.pid)
        if stat is None:
            return f"no such process: {self.pid}"
        if self.pid == 1:
            return "PID 1 is the machine's init, not a job: affmon pins no job rooted there (name the job's own PID)"
        if self.expected_start is not None and stat.start_ticks != self.expected_start:
            return (
                f"PID {self.pid} is no longer the process chosen: that one exited and the PID now belongs to"
                f" {term_safe(stat.comm)}, started later"
            )
        if stat.flags & PF_NO_SETAFFINITY:
            return self._einval_message(self.pid, fixed=True)
        if stat.flags & PF_KTHREAD:
            return f"PID {self.pid} is a kernel thread: affmon pins user processes only"
        tgid = tgid_of(self.proc, self.pid)
        if tgid is not None and tgid != self.pid:
            return f"{self.pid} is a thread (TID) of PID {tgid}: pin PID {tgid}, its process"
        if self.with_children and not self.include_others:
            crossing = self._others_in_tree(stat)
            if crossing is not None:
                return crossing
        if self.journal is not None:
            # Proves the journal writable before anything changes, and drops what has exited.
            # Heads only: another job's thread records are not this pin's to parse.
            self.in_force = [
                e for e in self.journal.prepare_heads(lambda r: still_there(self.proc, r)) if e.state == "applied"
            ]
        elif self.journal_to_read is not None:
            try:
                self.in_force = [e for e in self.journal_to_read.heads() if e.state == "applied"]
            except AffmonError:
                self.in_force = []  # a dry run does not stop at a journal the real pin would refuse
        if self.in_force:
            key = (self.pid, stat.start_ticks)
            earlier = [e for e in self.in_force if key in e.pinned_processes()]
            if earlier:
                self.notes.append(
                    f"PID {self.pid} was already pinned by affmon to CPUs {format_cpulist(earlier[-1].cpus)}"
                    f" ({earlier[-1].id}); this pin replaces it, and `affmon undo {self.pid}` undoes this one first"
                )
        self.allowed = self._cpuset_allows()
        self.entry = JournalEntry(
            id=new_entry_id(),
            time_s=time.time(),
            pid=self.pid,
            start_ticks=stat.start_ticks,
            cpus=self.cpus,
            since_ticks=uptime_ticks(self.root),
            allowed=self.allowed,
        )
        return None

    def _cpuset_allows(self) -> CpuSet | None:
        """What the target's cpuset allows, when that is only part of ``cpus`` (None
        otherwise), said before anything changes: the kernel runs the threads on the part
        inside it and keeps ``cpus`` as their request, which comes back in force if the
        cpuset grows. None for a pin wholly outside (the kernel refuses it, in one line)."""
        try:
            allowed = cgroup_cpuset(self.root, self.pid)
        except AffmonError:
            return None
        if allowed is None or self.cpus <= allowed or not self.cpus & allowed:
            return None
        outside = self.cpus - allowed
        named = f"CPU {format_cpulist(outside)} is" if len(outside) == 1 else f"CPUs {format_cpulist(outside)} are"
        self.notes.append(
            f"{named} outside PID {self.pid}'s cpuset"
            f" ({format_cpulist(allowed)}): its threads run on {format_cpulist(self.cpus & allowed)}; the kernel"
            f" keeps {format_cpulist(self.cpus)} as their request (in force again if the cpuset grows), and"
            " `affmon undo` puts back the masks from before"
        )
        return allowed

    # -- pinning -----------------------------------------------------------------

    def _pin_rounds(self) -> None:
        """hwloc's loop. A thread found after the first round that already has the new
        mask was created by a thread we had pinned: it needs nothing, so it does not keep
        the loop going (a process that creates threads all the time still converges)."""
        for round_number in range(1, MAX_ROUNDS + 1):
            fresh: list[ThreadRecord] = []
            for target in (t for t in self._targets() if t not in self.refused):
                for tid in sorted(self.proc.tids(target)):
                    if tid in self.results:
                        continue
                    stat = self._stat(target, tid)
                    if stat is None:
                        continue  # exited before we saw it: nothing to do, nothing to report
                    if stat.flags & PF_NO_SETAFFINITY:
                        # e.g. io_uring workers on older kernels: the kernel places them
                        # itself. Nothing to set, nothing to undo; said, not failed.
                        self._note(target, tid, None, None, "not-moved", "the kernel fixes its affinity")
                        continue
                    try:
                        old = self.ops.get(tid)
                    except OSError as exc:
                        self._on_error(exc, target, tid, None)
                        continue
                    if round_number > 1 and old == self.cpus:
                        self._note(target, tid, old, old, "set", "created with the new mask")
                        continue
                    self._note(target, tid, old, None, "set")  # claimed; "set" once it is
                    fresh.append(ThreadRecord(target, tid, stat.start_ticks, old, "pin"))
            if not fresh:
                return
            self._journal(fresh)  # write-ahead: the old masks are on disk before any change
            for record in fresh:
                try:
                    self.ops.set(record.tid, self.cpus)
                except OSError as exc:
                    self._on_error(exc, record.pid, record.tid, record.old_cpus)
                    continue
                if self._landed_elsewhere(record):
                    continue
                self.applied.append(record)
                self.changed = True
        raise _Failure(f"threads of PID {self.pid} kept appearing with other masks: gave up after {MAX_ROUNDS} rounds")

    def _targets(self) -> list[int]:
        if not self.with_children:
            return [self.pid]
        parents: dict[int, int | None] = {}
        for pid in self.proc.pids():
            stat = self._stat(pid)
            if stat is not None:
                parents[pid] = stat.ppid
        found = tree.descendants([self.pid], parents)
        if self.proc.live:
            found.discard(os.getpid())
        return [self.pid, *sorted(found - {self.pid})]

    def _others_in_tree(self, stat: StatFields) -> str | None:
        """Why a ``--with-children`` pin would reach processes that are not the job's: a
        descendant of another user (real UID) or of another session than the target (a
        daemon, a guest, someone's job started through sudo); None when the tree is the
        target's own. A pin of PID 1's tree would otherwise take every process on the machine."""
        mine = self.proc.status(self.pid)
        uid = None if mine is None else mine.uid
        foreign = []
        for child in self._targets()[1:]:
            cstat, cstatus = self._stat(child), self.proc.status(child)
            if cstat is None or cstatus is None:
                continue  # gone meanwhile
            if cstatus.uid != uid or cstat.session != stat.session:
                foreign.append((child, cstat, cstatus.uid))
        if not foreign:
            return None
        child, cstat, cuid = foreign[0]
        why = f"user {user_name(cuid)}" if cuid != uid else f"session {cstat.session}, not {stat.session}"
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        return (
            f"PID {child} ({term_safe(cstat.comm)}) under PID {self.pid} belongs to {why}{more}: a pin with its "
            "children stops at the job's own processes (the same user and session); nothing was changed. Pass "
            "--include-others to pin them too"
        )

    def _landed_elsewhere(self, record: ThreadRecord) -> bool:
        """Whether the set just made on ``record.tid`` landed on another task: the thread
        listed exited between the listing and the set, and another task (another process's
        thread, a new process) took its number. Then that task is given back the mask it
        had most likely (its creator's: its process's main thread, or for a new process its
        parent's), the listed thread is reported exited, and the stranger is reported by
        name; True. A number is checked by its start time and its process, right after the set."""
        if record.start_ticks is None:
            return False
        now = self._stat(record.tid)  # /proc/TID: whichever task holds the number now
        if now is None:
            return False
        tgid = tgid_of(self.proc, record.tid)
        if now.start_ticks == record.start_ticks and tgid in (None, record.pid):
            return False  # the same task (a start time has 10 ms steps: the process is checked too)
        creator = tgid if tgid is not None and tgid != record.tid else now.ppid
        try:
            mask = self.ops.get(creator)
            self.ops.set(record.tid, mask)
            done = f"given back its creator's mask {format_cpulist(mask)}"
            status: ThreadStatus = "restored"
        except OSError as exc:
            done = f"could not be given its mask back ({exc.strerror})"
            status = "failed"
        self._note(record.pid, record.tid, record.old_cpus, None, "exited", "exited before its mask was set")
        self.results[-record.tid] = ThreadResult(
            tgid or record.tid,
            record.tid,
            None,
            None,
            status,
            f"TID {record.tid} was taken by another task ({term_safe(now.comm)}) between listing and setting: {done}",
        )
        return True

    def _on_error(self, exc: OSError, pid: int, tid: int, before: CpuSet | None) -> None:
        """ESRCH: the thread exited, which is normal. EPERM on a descendant (not the job's
        own process): named with why, and left with ``skip_refused``. Anything else fails
        the pin."""
        if exc.errno == errno.ESRCH:
            self._note(pid, tid, before, None, "exited", "exited while being pinned")
            return
        message = self._refusal_message(exc, pid, tid, self.cpus)
        if exc.errno == errno.EPERM and pid != self.pid:
            stat = self._stat(pid)
            name = term_safe(stat.comm) if stat is not None else "gone"
            setuid = setuid_note(self.root, pid)
            if setuid:
                message = f"PID {pid} ({name}) under PID {self.pid} {setuid}: not permitted to change its affinity"
            else:
                message = f"PID {pid} ({name}) under PID {self.pid}: {message}"
            if self.skip_refused:
                if pid not in self.refused:
                    self.refused.add(pid)
                    self.notes.append(f"{message}: left as it is (--skip-refused), the others pinned")
                self._note(pid, tid, before, before, "not-moved", "left: the kernel refused its change")
                return
            message += "; pass --skip-refused to pin the others without it"
        self._note(pid, tid, before, None, "failed", message)
        raise _Failure(message)

    def _read_back(self) -> None:
        for tid, result in list(self.results.items()):
            if result.status == "set":
                self._note_after(tid, "set", self.cpus)

    def _mismatch_warning(self) -> str | None:
        said = self.cpus if self.allowed is None else self.cpus & self.allowed  # a cpuset's part is said already
        off = [t for t in self.results.values() if t.status == "set" and t.after not in (self.cpus, said)]
        if not off:
            return None
        masks = sorted({format_cpulist(t.after) for t in off if t.after is not None})
        return (
            f"{len(off)} thread(s) run on {' / '.join(masks) or 'an unknown mask'}, not"
            f" {format_cpulist(self.cpus)} as asked (cpuset, offline CPUs, or the program re-pinned itself)"
        )

    # -- isolation ---------------------------------------------------------------

    def _isolate(self, candidates: Sequence[ProcessKey]) -> None:
        """Move the candidates' threads off ``cpus`` (``IsolationPlan`` says which and
        where), journaled ahead like the pin's own. Refusals are reported only."""
        planner = IsolationPlan(
            self.proc,
            self.ops,
            self.cpus,
            root=self.root,
            in_force=self.in_force,
            isolate_all=self.isolate_all,
            job_pid=self.pid,
        )
        targets = {r.pid for r in self.results.values()} | {self.pid}
        for _round in range(MAX_ROUNDS):
            plan, notes = planner.round(candidates, targets, self.results)
            for note in notes:
                self.results[note.tid] = note
            if not plan:
                return
            for record, _new in plan:
                self._note(record.pid, record.tid, record.old_cpus, None, "moved")
            self._journal([record for record, _new in plan])
            for record, new in plan:
                try:
                    self.ops.set(record.tid, new)
                except OSError as exc:
                    if exc.errno == errno.ESRCH:
                        self._note(record.pid, record.tid, record.old_cpus, None, "exited", "exited while being moved")
                    else:
                        why = self._refusal_message(exc, record.pid, record.tid, new)
                        self._note(record.pid, record.tid, record.old_cpus, None, "not-moved", f"not moved: {why}")
                    continue
                if self._landed_elsewhere(record):
                    continue
                self.applied.append(record)
                self.changed = True
                self._note_after(record.tid, "moved", new)

    # -- memory ------------------------------------------------------------------

    def _migrate(self, request: MoveMemory) -> None:
        assert self.entry is not None
        journal = self.journal if self.entry_written else None
        self.memory, self.entry, note = migrate_after_pin(
            self.entry, journal, self.cpus, request, dry_run=self.dry_run, root=self.root
        )
        if note:
            self.notes.append(note)

    # -- rollback ----------------------------------------------------------------

    def _fail(self, reason: str) -> PinResult:
        rolled_back = self._rollback()
        error = reason if rolled_back else f"{reason}; some threads could not be put back (`affmon undo` retries)"
        if rolled_back and self.entry_written:
            try:
                if self.changed:
                    self._set_state("rolled-back")
                else:  # refused before any mask changed: there is no pin to remember
                    assert self.entry is not None and self.journal is not None
                    self.journal.remove(self.entry.id)
                    self.entry_written = False
            except AffmonError as exc:
                error = f"{error}; the journal still lists the pin as pending ({exc})"
        return self._result(ok=False, error=error, rolled_back=rolled_back)

    def _rollback(self) -> bool:
        """Every changed thread back to its old mask, newest change first; then threads
        born during the pin from an already pinned creator get their main thread's old
        mask (as in ``undo``). True when every one of them is back; the caller then marks
        the journal entry rolled back (otherwise it stays pending and ``undo`` can retry)."""
        complete = True
        changed_any = bool(self.applied)
        while self.applied:
            record = self.applied.pop()
            try:
                self.ops.set(record.tid, record.old_cpus)
            except OSError as exc:
                if exc.errno == errno.ESRCH:
                    self._note(record.pid, record.tid, record.old_cpus, None, "exited", "exited before it was put back")
                else:
                    complete = False
                    why = self._refusal_message(exc, record.pid, record.tid, record.old_cpus)
                    self._note(record.pid, record.tid, record.old_cpus, None, "failed", f"not put back: {why}")
                continue
            if self._landed_elsewhere(record):
                continue
            self._note(record.pid, record.tid, record.old_cpus, None, "restored", "put back after the failure")
            self._note_after(record.tid, "restored", record.old_cpus)
        if changed_any and self.entry is not None:
            recorded = {(record.tid, record.start_ticks) for record in self.entry.threads}
            for swept in sweep_new_threads(self.proc, self.ops, self.entry, recorded):
                self.results[swept.tid] = swept
                complete = complete and swept.status != "failed"
        # What is still "set" was claimed in the failing round but never changed.
        self.results = {tid: r for tid, r in self.results.items() if r.status != "set"}
        return complete

    # -- journal -----------------------------------------------------------------

    def _journal(self, records: list[ThreadRecord]) -> None:
        assert self.entry is not None
        self.entry = replace(self.entry, threads=self.entry.threads + tuple(records))
        if self.journal is None:
            return
        if self.entry_written:
            self.journal.extend(self.entry.id, tuple(records))  # appended: the file is rewritten once a pin
        else:
            self.journal.add(self.entry)
            self.entry_written = True

    def _set_state(self, state: Literal["applied", "rolled-back"]) -> None:
        assert self.entry is not None and self.journal is not None
        self.entry = replace(self.entry, state=state)
        self.journal.update(self.entry)

    # -- helpers -----------------------------------------------------------------

    def _stat(self, pid: int, tid: int | None = None) -> StatFields | None:
        return stat_or_none(self.proc, pid, tid)

    def _note(
        self, pid: int, tid: int, before: CpuSet | None, after: CpuSet | None, status: ThreadStatus, message: str = ""
    ) -> None:
        self.results[tid] = ThreadResult(pid, tid, before, after, status, message)

    def _note_after(self, tid: int, status: ThreadStatus, wanted: CpuSet) -> None:
        """Read the mask in force back into the thread's result; say so when it is not
        ``wanted`` (the kernel intersects masks with the cpuset without a word)."""
        result = self.results[tid]
        try:
            after: CpuSet | None = self.ops.get(tid)
        except OSError as exc:
            if exc.errno == errno.ESRCH:
                self.results[tid] = replace(result, after=None, status="exited", message="exited after the change")
                return
            after = None
        message = result.message
        if after is not None and after != wanted:
            message = f"mask in force is {format_cpulist(after)}, not {format_cpulist(wanted)} as asked"
        self.results[tid] = replace(result, after=after, status=status, message=message)

    def _refusal_message(self, exc: OSError, pid: int, tid: int, cpus: CpuSet) -> str:
        return refusal_message(self.proc, exc, pid, tid, cpus)

    def _einval_message(self, pid: int, *, fixed: bool) -> str:
        return einval_message(self.cpus, pid, fixed=fixed)

    def _result(self, *, ok: bool, error: str | None, rolled_back: bool, warning: str | None = None) -> PinResult:
        return PinResult(
            ok=ok,
            cpus=self.cpus,
            threads=tuple(self.results.values()),
            error=error,
            rolled_back=rolled_back,
            journal_id=self.entry.id if self.entry_written and self.entry is not None else None,
            dry_run=self.dry_run,
            warning=warning,
            changed=self.changed,
            memory=self.memory if ok else None,
        )
