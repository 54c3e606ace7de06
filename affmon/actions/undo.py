"""Undoing pins: put back the masks the write-ahead journal recorded, newest first, for
one PID or for every pin not yet undone."""

from __future__ import annotations

import errno
from dataclasses import dataclass

from affmon.actions.journal import Journal, JournalEntry
from affmon.actions.threads import (
    MAX_ROUNDS,
    AffinityOps,
    DryRunAffinity,
    OsAffinity,
    ThreadResult,
    refusal_message,
    stat_or_none,
)
from affmon.collect.procfs import ProcFs
from affmon.core.cpuset import CpuSet, format_cpulist


@dataclass(frozen=True)
class UndoResult:
    """``entry_ids``: the journal entries undone (marked so). Threads: "restored",
    "exited" (gone, or its TID reused), "failed", "not-moved" (created after the pin with
    a mask of its own, left alone)."""

    ok: bool
    entry_ids: tuple[str, ...]
    threads: tuple[ThreadResult, ...]
    error: str | None


def undo(journal: Journal, pid: int | None = None, *, ops: AffinityOps | None = None, root: str = "/") -> UndoResult:
    """Put back the masks of the newest entry not yet undone for ``pid`` (the PID the pin
    was asked for), or of every such entry, newest first, when ``pid`` is None.

    A journaled thread that has exited, or whose TID now belongs to a newer thread (its
    start time differs), is reported and skipped. A thread created after the pin is not in
    the journal: it inherited the pinned mask from its creator, so if it still has exactly
    that mask it gets its process's main thread's restored mask (what it would have
    inherited without the pin); a thread with any other mask set it itself (or a library
    did) and is left alone. An entry is marked undone only when nothing failed, so a
    failed undo can be run again."""
    ops = ops or OsAffinity()
    dry_run = isinstance(ops, DryRunAffinity)
    proc = ProcFs(root)
    live = [e for e in journal.entries() if e.state in ("pending", "applied")]
    if pid is not None:
        live = [e for e in live if e.pid == pid][-1:]
        if not live:
            return UndoResult(False, (), (), f"nothing to undo for PID {pid} in the journal {journal.path}")
    done: list[str] = []
    threads: list[ThreadResult] = []
    for entry in reversed(live):
        results = _undo_entry(entry, proc, ops)
        threads.extend(results)
        if not any(t.status == "failed" for t in results):
            if not dry_run:
                journal.set_state(entry.id, "undone")
            done.append(entry.id)
    failed = [t for t in threads if t.status == "failed"]
    error = None
    if failed:
        error = f"{len(failed)} thread(s) could not be put back: {failed[0].message}"
    return UndoResult(not failed, tuple(done), tuple(threads), error)


def _undo_entry(entry: JournalEntry, proc: ProcFs, ops: AffinityOps) -> list[ThreadResult]:
    results: list[ThreadResult] = []
    for record in reversed(entry.threads):
        stat = stat_or_none(proc, record.pid, record.tid)
        if stat is None:
            results.append(ThreadResult(record.pid, record.tid, None, None, "exited", "no longer exists"))
            continue
        if record.start_ticks is not None and stat.start_ticks != record.start_ticks:
            results.append(
                ThreadResult(record.pid, record.tid, None, None, "exited", "its TID now belongs to a newer thread")
            )
            continue
        results.append(_restore(proc, ops, record.pid, record.tid, record.old_cpus, ""))
    results.extend(sweep_new_threads(proc, ops, entry, {record.tid for record in entry.threads}))
    return results


def sweep_new_threads(proc: ProcFs, ops: AffinityOps, entry: JournalEntry, skip: set[int]) -> list[ThreadResult]:
    """Threads of the pinned processes that the entry does not record: created after the
    pin (or during it), they inherited the pinned mask from their creator. One that still
    has exactly that mask gets its process's main thread's old mask; any other mask was
    set on purpose and is left alone."""
    results: list[ThreadResult] = []
    for pid in entry.pinned_pids:
        main = next((r for r in entry.threads if r.tid == pid and r.role == "pin"), None)
        if main is None:
            continue  # the main thread was not recorded (it had exited): no mask to give
        stat = stat_or_none(proc, pid)
        if stat is None or (main.start_ticks is not None and stat.start_ticks != main.start_ticks):
            continue  # the process is gone (or its PID reused): its threads went with it
        seen = set(skip)
        for _round in range(MAX_ROUNDS):
            fresh = [tid for tid in sorted(proc.tids(pid)) if tid not in seen]
            if not fresh:
                break
            seen.update(fresh)
            for tid in fresh:
                try:
                    mask = ops.get(tid)
                except OSError:
                    continue  # exited since the listing
                if mask == entry.cpus:
                    results.append(
                        _restore(proc, ops, pid, tid, main.old_cpus, "created after the pin: main thread's mask")
                    )
                else:
                    message = f"created after the pin with its own mask {format_cpulist(mask)}: left alone"
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
