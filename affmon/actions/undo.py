"""Undoing pins: put back the masks the write-ahead journal recorded, newest first, for
one PID or for every pin not yet undone.

Every task is named by (TID, start time): a journaled TID that now belongs to a newer
thread is not the thread affmon changed, and a new thread or process that inherited a
mask the pin set (its CPUs, or the part of them a split gave one of its processes) must
be given back the mask it would have had without the pin. The journal is locked and
proved writable before the first mask changes, so an undo on a read-only or full file
system changes nothing; if a write fails later, the result says exactly which entries
were undone and which threads were restored.

Undo never moves memory. A pin made with ``--migrate-memory`` moved the process's pages
by node (``migrate_pages(2)``); the pages that were on the target node before cannot be
told from those moved there, so moving "them back" would move all of them. The result
says, for each such entry, that its memory stays where the pin put it.
"""

from __future__ import annotations

import errno
from collections.abc import Collection
from dataclasses import dataclass

from affmon.actions.isolate import allowed_cpus, given_mask, isolation_masks
from affmon.actions.journal import EntryHead, Journal, JournalEntry, JournalError, ThreadRecord
from affmon.actions.threads import (
    MAX_ROUNDS,
    AffinityOps,
    DryRunAffinity,
    OsAffinity,
    ThreadResult,
    refusal_message,
    stat_or_none,
)
from affmon.collect.cgroup import cgroup_cpuset
from affmon.collect.procfs import PF_NO_SETAFFINITY, ProcFs
from affmon.core.model import tree
from affmon.core.model.cpuset import CpuSet, format_cpulist, in_cpuset

TaskKey = tuple[int, "int | None"]  # (TID, start ticks) as journaled


@dataclass(frozen=True)
class UndoResult:
    """``entry_ids``: the journal entries undone (marked so). Threads: "restored",
    "exited" (gone, or its TID reused), "failed", "not-moved" (created after the pin with
    a mask of its own, left alone)."""

    ok: bool
    entry_ids: tuple[str, ...]
    threads: tuple[ThreadResult, ...]
    error: str | None
    notes: tuple[str, ...] = ()  # what undo left as it was: memory a pin moved


def still_there(proc: ProcFs, record: ThreadRecord) -> bool:
    """Whether the journaled thread still runs (same TID and start time)."""
    stat = stat_or_none(proc, record.pid, record.tid)
    return stat is not None and (record.start_ticks is None or stat.start_ticks == record.start_ticks)


def undo(
    journal: Journal,
    pid: int | None = None,
    *,
    ops: AffinityOps | None = None,
    root: str = "/",
    entry_id: str | None = None,
) -> UndoResult:
    """Put back the masks of the newest entry not yet undone for ``pid`` (the PID the pin
    was asked for), or of every such entry, newest first, when ``pid`` is None.

    A journaled thread that has exited, or whose TID now belongs to a newer thread (its
    start time differs), is reported and skipped. A task created after the pin is not in
    the journal: a thread of a pinned process, or a process started since by a pinned one
    (a DataLoader worker re-forked each epoch), inherited a mask the pin set, so if it
    still has exactly one of the entry's masks (its CPUs, or a split's part) it gets the
    mask its pinned ancestor had before (what it would have inherited without the pin); a
    task with any other mask set it itself (or a library did) and is left alone. An entry
    is marked undone only when nothing failed, so a failed undo can be run again.

    With ``entry_id``, that entry alone (if it is still in force): a tune puts back its own
    trial, never a pin made meanwhile by someone else.

    Raises ``JournalError`` (nothing changed) when the journal cannot be locked, read or
    written before the first change."""
    ops = ops or OsAffinity()
    dry_run = isinstance(ops, DryRunAffinity)
    proc = ProcFs(root)
    try:
        with journal.locked():
            # Heads only: the thread records are read for the entries undone, not for the others.
            entries = journal.heads() if dry_run else journal.prepare_heads(lambda r: still_there(proc, r))
            if entry_id is not None:
                entries = [e for e in entries if e.id == entry_id]
                if not entries:
                    return UndoResult(False, (), (), f"no journal entry {entry_id}: nothing to put back")
            return _undo_locked(journal, entries, pid, proc, ops, dry_run)
    except JournalError as exc:
        raise JournalError(f"{exc}; nothing was changed") from None


def _undo_locked(
    journal: Journal, entries: list[EntryHead], pid: int | None, proc: ProcFs, ops: AffinityOps, dry_run: bool
) -> UndoResult:
    live = [e for e in entries if e.state in ("pending", "applied")]
    if pid is not None:
        live = _newest_of(pid, live)
        if not live:
            return UndoResult(False, (), (), _nothing_for(pid, entries, journal))
    done: list[str] = []
    threads: list[ThreadResult] = []
    kept: list[str] = []
    for head in reversed(live):
        entry = journal.get(head.id)
        try:
            if not dry_run and entry.state == "applied":
                # Written ahead: an undo killed half way leaves the entry pending (not a pin
                # someone else reset, for the drift rule), and the next undo completes it.
                entry = journal.set_state(entry.id, "pending")
            results = _undo_entry(entry, proc, ops)
            threads.extend(results)
            if any(t.status == "failed" for t in results):
                continue
            if _superseded(results):
                kept.append(entry.id)
                if not dry_run and head.state == "applied":
                    journal.set_state(entry.id, "applied")  # nothing changed: the pin stands as it was
                continue
            if not dry_run:
                journal.set_state(entry.id, "undone")
        except JournalError as exc:
            restored = sum(t.status == "restored" for t in threads)
            undone = f"entries {', '.join(done)} are marked undone; " if done else ""
            return UndoResult(
                False,
                tuple(done),
                tuple(threads),
                f"{restored} thread(s) were restored as listed, but {exc}: {undone}entry {entry.id} and any"
                " older one still read as in force; run `affmon undo` again once the journal can be written",
            )
        done.append(entry.id)
    failed = [t for t in threads if t.status == "failed"]
    error = None
    if failed:
        error = f"{len(failed)} thread(s) could not be put back: {failed[0].message}"
    elif kept:
        error = (
            f"every thread of {', '.join(kept)} has a mask that pin did not set (another pin, or the program,"
            " changed it since): left alone, and the pin stays in force until that change is undone"
        )
    notes = tuple(_memory_note(e) for e in reversed(live) if e.id in done and e.memory is not None)
    return UndoResult(error is None, tuple(done), tuple(threads), error, notes)


def _newest_of(pid: int, live: list[EntryHead]) -> list[EntryHead]:
    """What ``undo PID`` undoes: the newest pin of ``pid`` in force and, below it, every
    pin of ``pid`` left pending by an interrupted pin or undo (a job put back on a half-made
    placement is not where anyone left it), oldest first."""
    mine = [e for e in live if e.pid == pid]
    if not mine:
        return []
    taken = [mine[-1]]
    for below in reversed(mine[:-1]):
        if below.state != "pending":
            break
        taken.append(below)
    return taken[::-1]


def _superseded(results: list[ThreadResult]) -> bool:
    """Whether no thread of an entry still carried a mask it set, and some carried one set
    since by someone else: another pin (another user's journal) stands on top of it, and
    the entry stays in force under that pin until it is undone."""
    return not any(t.status == "restored" for t in results) and any(t.message.startswith(CHANGED) for t in results)


def _memory_note(entry: EntryHead) -> str:
    memory = entry.memory
    assert memory is not None
    if memory.state == "failed":
        return f"{entry.id}: its memory migration had failed; no page was moved back"
    moved = memory.moved_bytes
    amount = f"{moved / (1 << 20):.0f} MiB of PID {memory.pid}'s memory" if moved else f"PID {memory.pid}'s memory"
    return (
        f"{entry.id}: {amount} moved to node {memory.to_node} by the pin stays there"
        " (undo puts back thread masks, not pages)"
    )


def _nothing_for(pid: int, entries: list[EntryHead], journal: Journal) -> str:
    """Why ``undo PID`` finds nothing: its pin's processes all exited, or it was pinned as
    part of another process's pin (a worker under ``--with-children``), or never."""
    part_of = [e for e in entries if e.state in ("pending", "applied") and pid in e.pinned_pids]
    if part_of:
        owner = part_of[-1]
        return (
            f"nothing to undo for PID {pid} on its own: it was pinned with PID {owner.pid} ({owner.id});"
            f" `affmon undo {owner.pid}` undoes that pin"
        )
    gone = any(e.pid == pid and e.state == "expired" for e in entries)
    why = "every process its pin touched has exited" if gone else "no pin of it is in force"
    return f"nothing to undo for PID {pid} ({why}) in the journal {journal.path}"


CHANGED = "changed since the pin"  # how a thread left alone for another's mask is named


def _undo_entry(entry: JournalEntry, proc: ProcFs, ops: AffinityOps) -> list[ThreadResult]:
    """Each recorded thread (and each a stacked pin left unlisted) back to its old mask, if
    it still carries a mask this entry set (or the old one already: an undo interrupted
    half way). One with any other mask was changed since, by another pin (another user's
    journal) or by the program: it is named and left, since putting the old mask back
    would undo that change, not this pin."""
    results: list[ThreadResult] = []
    records = [*reversed(entry.threads), *unlisted_threads(proc, entry)]
    allowed: dict[int, CpuSet | None] = {}
    for record in records:
        stat = stat_or_none(proc, record.pid, record.tid)
        if stat is None:
            results.append(ThreadResult(record.pid, record.tid, None, None, "exited", "no longer exists"))
            continue
        if record.start_ticks is not None and stat.start_ticks != record.start_ticks:
            results.append(
                ThreadResult(record.pid, record.tid, None, None, "exited", "its TID now belongs to a newer thread")
            )
            continue
        try:
            mask = ops.get(record.tid)
        except OSError:
            results.append(ThreadResult(record.pid, record.tid, None, None, "exited", "exited during the undo"))
            continue
        if mask == record.old_cpus:
            # Set again all the same: a cpuset that changed under the pin can show the old
            # mask while the kernel keeps the pin's as the thread's request.
            back = _restore(proc, ops, record.pid, record.tid, record.old_cpus, "already back")
            if back.status == "failed":  # the kernel refuses it (a setuid program): it has its mask all the same
                back = ThreadResult(record.pid, record.tid, mask, mask, "restored", "already back")
            results.append(back)
            continue
        if (record.role == "isolate" or mask not in entry.set_masks) and record.pid not in allowed:
            allowed[record.pid] = allowed_cpus(proc.root, record.pid)  # read only when needed
        if not _left_by(entry, record, mask, allowed.get(record.pid)):
            message = (
                f"{CHANGED}: its mask is {format_cpulist(mask)}, which this pin did not set (another pin, or"
                " the program, set it): left alone"
            )
            results.append(ThreadResult(record.pid, record.tid, mask, mask, "not-moved", message))
            continue
        results.append(_restore(proc, ops, record.pid, record.tid, record.old_cpus, ""))
    recorded = {(record.tid, record.start_ticks) for record in records}
    results.extend(sweep_new_threads(proc, ops, entry, recorded))
    return results


def _left_by(entry: JournalEntry, record: ThreadRecord, mask: CpuSet, allowed: CpuSet | None) -> bool:
    """Whether ``mask`` is one this entry left on ``record``'s thread: for a pinned thread,
    one of the masks the pin set; for a thread isolation moved aside, the mask isolation
    gave it (its old mask without the pin's CPUs, or its cgroup's when nothing was left);
    either as the thread's cpuset narrowed it, or the whole cpuset where the cpuset shrank
    away from it (the kernel keeps the pin's mask as the thread's request then)."""
    if record.role == "isolate":
        ours = frozenset({given_mask(record.old_cpus, entry.cpus, allowed or frozenset())})
    else:
        ours = entry.set_masks
    return mask in ours or (allowed is not None and any(mask == in_cpuset(m, allowed) for m in ours))


def unlisted_threads(proc: ProcFs, entry: JournalEntry) -> list[ThreadRecord]:
    """The records a stacked pin left out (``JournalEntry.unlisted``), as they would have
    read: every thread of such a process (still the one pinned) that started before the
    pin began and has no record had the mask the entry names for its process. A thread
    started since is a new one (``sweep_new_threads``); one whose mask the kernel fixes was
    never changed."""
    since = entry.since_ticks
    if since is None or not entry.unlisted:
        return []
    recorded = {record.tid for record in entry.threads}
    found = []
    for process in entry.unlisted:
        stat = stat_or_none(proc, process.pid)
        if stat is None or stat.start_ticks != process.start_ticks:
            continue  # gone, or its PID reused: its threads went with it
        for tid in sorted(proc.tids(process.pid)):
            task = stat_or_none(proc, process.pid, tid)
            if task is None or tid in recorded or task.start_ticks >= since or task.flags & PF_NO_SETAFFINITY:
                continue
            found.append(ThreadRecord(process.pid, tid, task.start_ticks, process.cpus, "pin"))
    return found


def sweep_new_threads(
    proc: ProcFs, ops: AffinityOps, entry: JournalEntry, recorded: Collection[TaskKey]
) -> list[ThreadResult]:
    """Tasks the entry does not record (by TID and start time) that inherited a mask it
    set: threads of the pinned processes and of the processes isolation moved aside, and
    processes started since the pin under one of them (with their threads). A task that
    still has exactly one of the masks the entry gave its process (a pinned process: the
    pin's CPUs, or the part a split gave it, since a worker forked by the main loop after
    a split carries the main loop's part; a process moved aside: the mask isolation gave
    one of its threads) gets the mask it would have inherited without the pin (a pinned
    process's main thread's old mask; for one moved aside, the old mask of the thread
    given that mask); any other mask was set on purpose, or by someone else since, and is
    left alone and named."""
    inherited: dict[int, tuple[dict[CpuSet, CpuSet], str]] = {
        pid: (dict.fromkeys(entry.set_masks, old), "its pinned process's old mask")
        for pid, old in _old_masks(entry, proc).items()
    }
    for pid, masks in isolation_masks(proc, entry).items():
        inherited.setdefault(pid, (masks, "its mask before isolation moved its process"))
    for pid, (masks, _back) in inherited.items():
        allowed = cgroup_cpuset(proc.root, pid)
        if allowed is not None:  # what its cpuset made of each mask, as it stands now
            for given, old in list(masks.items()):
                masks.setdefault(in_cpuset(given, allowed), old)
    results: list[ThreadResult] = []
    for pid, (masks, back) in inherited.items():
        results.extend(_sweep_process(proc, ops, pid, masks, recorded, f"created after the pin: {back}"))
    for pid, ancestor in _new_descendants(proc, entry, inherited).items():
        masks, back = inherited[ancestor]
        results.extend(_sweep_process(proc, ops, pid, masks, recorded, f"process started after the pin: {back}"))
    return results


def _old_masks(entry: JournalEntry, proc: ProcFs) -> dict[int, CpuSet]:
    """Each pinned process still alive (same start time) -> the mask to give its new
    tasks: its main thread's old mask, else the first recorded thread's."""
    masks: dict[int, CpuSet] = {}
    for pid, start in entry.pinned_processes():
        stat = stat_or_none(proc, pid)
        if stat is None or stat.start_ticks != start:
            continue  # the process is gone (or its PID reused): its threads went with it
        records = [r for r in entry.threads if r.pid == pid and r.role == "pin"]
        main = next((r for r in records if r.tid == pid), records[0] if records else None)
        if main is not None:
            masks[pid] = main.old_cpus
    return masks


def _new_descendants(proc: ProcFs, entry: JournalEntry, roots: Collection[int]) -> dict[int, int]:
    """Processes started after the pin whose chain of parents up to one of ``roots`` (a
    pinned process, or one isolation moved) holds only such new processes: they were forked
    with the mask the pin gave it. Each -> that root. Nothing for an entry that does not
    know when it began."""
    since = entry.since_ticks
    if since is None or not roots:
        return {}
    parents: dict[int, int | None] = {root: None for root in roots}  # a walk up ends at one
    starts: dict[int, int] = {}
    for pid in proc.pids():
        stat = stat_or_none(proc, pid)
        if stat is not None and stat.ppid is not None and pid not in roots:
            parents[pid] = stat.ppid
            starts[pid] = stat.start_ticks
    found: dict[int, int] = {}
    for pid in sorted(tree.descendants(roots, parents) - set(roots)):
        if starts[pid] < since:
            continue
        for up in tree.ancestors(pid, parents):
            if up in roots:
                found[pid] = up
                break
            if starts[up] < since:
                break
    return found


def _sweep_process(
    proc: ProcFs,
    ops: AffinityOps,
    pid: int,
    inherited: dict[CpuSet, CpuSet],
    recorded: Collection[TaskKey],
    why: str,
) -> list[ThreadResult]:
    """``inherited``: each mask the pin gave this process's tasks -> the mask to put back;
    ``why``: how a task put back is named (what it is, and what it was given)."""
    olds = set(inherited.values())
    results: list[ThreadResult] = []
    seen: set[int] = set()
    for _round in range(MAX_ROUNDS):
        fresh = [tid for tid in sorted(proc.tids(pid)) if tid not in seen]
        if not fresh:
            break
        seen.update(fresh)
        for tid in fresh:
            stat = stat_or_none(proc, pid, tid)
            if stat is None or (tid, stat.start_ticks) in recorded or (tid, None) in recorded:
                continue  # gone, or journaled (and handled) itself
            try:
                mask = ops.get(tid)
            except OSError:
                continue  # exited since the listing
            old = inherited.get(mask)
            if old is not None:
                results.append(_restore(proc, ops, pid, tid, old, why))
            elif mask in olds:
                continue  # born of a task this undo had already put back: it has the mask it should
            else:
                message = f"{why.partition(':')[0]} with its own mask {format_cpulist(mask)}: left alone"
                results.append(ThreadResult(pid, tid, mask, mask, "not-moved", message))
    return results


def _restore(proc: ProcFs, ops: AffinityOps, pid: int, tid: int, old: CpuSet, message: str) -> ThreadResult:
    try:
        before: CpuSet | None = ops.get(tid)
        ops.set(tid, old)
        after: CpuSet | None = ops.get(tid)
    except OSError as exc:
        if exc.errno == errno.ESRCH:
            return ThreadResult(pid, tid, None, None, "exited", "exited during the undo")
        return ThreadResult(pid, tid, None, None, "failed", refusal_message(proc, exc, pid, tid, old))
    if after != old:
        message = f"mask in force is {format_cpulist(after or ())}, not {format_cpulist(old)} as recorded"
    return ThreadResult(pid, tid, before, after, "restored", message)
