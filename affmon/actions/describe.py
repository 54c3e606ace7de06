"""What a pin or an undo did, in plain lines: each thread touched (PID, TID, status, mask
before -> after, and why), then what it comes to, and what became of the process's
memory when the pin was asked to move it. Next to the actions they describe, so
every front end (the commands, the monitor's dialogs) says it the same way. Messages may
quote process names: they pass through ``term_safe``."""

from __future__ import annotations

from affmon.actions.journal_trust import user_name
from affmon.actions.pin import PinResult
from affmon.actions.threads import ThreadResult, stat_or_none
from affmon.actions.undo import UndoResult
from affmon.collect.procfs import ProcFs
from affmon.core.errors import AffmonError
from affmon.core.model.cpuset import format_cpulist
from affmon.core.model.domains import plural
from affmon.core.text import term_safe


def thread_line(t: ThreadResult) -> str:
    """One thread of a pin or undo: PID, TID, what happened, mask before -> after."""
    before = "?" if t.before is None else format_cpulist(t.before)
    after = "?" if t.after is None else format_cpulist(t.after)
    note = f"  {term_safe(t.message)}" if t.message else ""
    return f"  {t.pid:>8} {t.tid:>8} {t.status:<10} {before:>12} -> {after:<12}{note}"


THREAD_HEADER = f"  {'PID':>8} {'TID':>8} {'RESULT':<10} {'MASK BEFORE':>12} -> {'AFTER':<12}"


def thread_lines(threads: list[ThreadResult]) -> list[str]:
    """The threads' lines under their column header (none without threads)."""
    return [THREAD_HEADER, *(thread_line(t) for t in threads)] if threads else []


def _kept(t: ThreadResult) -> bool:
    """A thread a pin 'set' to the mask it already had: nothing changed for it."""
    return t.status == "set" and t.before is not None and t.before == t.after


def result_text(result: PinResult) -> list[str]:
    """Every thread the pin changed, one line each; threads that already had the mask in one
    line (a pin that gives two confined threads their job's CPUs back names those two, not
    the 250 others)."""
    verb = "would set" if result.dry_run else "set"
    counts: dict[str, int] = {}
    for t in result.threads:
        counts[t.status] = counts.get(t.status, 0) + 1
    kept = [t for t in result.threads if _kept(t)] if result.ok else []
    lines = thread_lines([t for t in result.threads if not (result.ok and _kept(t))])
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    if kept:
        lines.append(
            f"  {plural(len(kept), 'thread')} already had CPUs {format_cpulist(result.cpus)}: left as they were"
        )
    if result.ok:
        changed = counts.get("set", 0) - len(kept)
        summary += f" ({changed} changed)" if kept else ""
        lines += moved_lines(result)
        lines.append(f"{verb} CPUs {format_cpulist(result.cpus)}: {summary}")
        if result.journal_id:
            lines.append(f"journaled as {result.journal_id}; `affmon undo` puts every mask back")
    else:
        if not result.changed:
            state = "nothing was changed"
        elif result.rolled_back:
            state = "every thread it had changed was put back as it was"
        else:
            state = "some threads could not be put back (`affmon undo` retries)"
        lines.append(f"pin failed ({summary or 'no thread changed'}); {state}")
    if result.memory is not None:
        lines.append(f"memory: {term_safe(result.memory.message)}")
    if result.warning:
        lines.append(f"warning: {result.warning}")
    return lines


def who(pid: int, root: str = "/") -> str:
    """A process as isolation names it: ``PID (user, command)``, from /proc now."""
    proc = ProcFs(root)
    stat = stat_or_none(proc, pid)
    try:
        status = proc.status(pid)
    except AffmonError:
        status = None
    user = user_name(status.uid) if status is not None and status.uid is not None else "?"
    return f"{pid} ({user}, {term_safe(stat.comm) if stat is not None else 'gone'})"


def moved_lines(result: PinResult) -> list[str]:
    """One line per process isolation moved: who, how many threads, from which CPUs to which."""
    moved: dict[int, list[ThreadResult]] = {}
    for t in result.threads:
        if t.status == "moved":
            moved.setdefault(t.pid, []).append(t)
    lines = []
    for pid, threads in sorted(moved.items()):
        before = {format_cpulist(t.before) for t in threads if t.before is not None}
        after = {format_cpulist(t.after) for t in threads if t.after is not None}
        lines.append(
            f"moved off: {who(pid)}, {len(threads)} thread(s) from CPUs {', '.join(sorted(before)) or '?'} "
            f"to {', '.join(sorted(after)) or '?'}"
        )
    return lines


def undo_text(result: UndoResult) -> list[str]:
    """Every thread touched, then what was undone; on a failure too, so the user knows
    exactly what was restored."""
    lines = thread_lines(list(result.threads))
    if result.ok or result.entry_ids:
        lines.append(f"undid {plural(len(result.entry_ids), 'pin')}: {', '.join(result.entry_ids) or 'none'}")
    lines += [f"memory: {term_safe(note)}" for note in result.notes]
    return lines
