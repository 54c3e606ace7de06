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
``isolate``); a refusal there is reported, never a failure of the pin.

All system calls go through an ``AffinityOps``: ``OsAffinity`` for real,
``DryRunAffinity`` to see what would happen, or a test's wrapper that fails on demand.
"""

from __future__ import annotations

import errno
import os
import pwd
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol

from affmon.actions.journal import Journal, JournalEntry, ThreadRecord, new_entry_id
from affmon.collect.cgroup import Mount, cgroup_cpuset, read_mounts
from affmon.collect.fs import read_line, read_text
from affmon.collect.procfs import PF_KTHREAD, PF_NO_SETAFFINITY, ProcFs, StatFields
from affmon.collect.sampler import descendants
from affmon.core.cpuset import MAX_CPU_ID, CpuSet, format_cpulist, parse_cpulist
from affmon.core.errors import AffmonError

# hwloc gives up after 10 passes over /proc/PID/task (hwloc_linux_foreach_proc_tid).
MAX_ROUNDS = 10

ThreadStatus = Literal["set", "exited", "failed", "restored", "moved", "not-moved"]


class AffinityOps(Protocol):
    """The two system calls, on one thread id. Both may raise ``OSError``."""

    def get(self, tid: int) -> CpuSet: ...

    def set(self, tid: int, cpus: CpuSet) -> None: ...


class OsAffinity:
    """``sched_getaffinity``/``sched_setaffinity`` on a TID (one thread, never the group)."""

    def get(self, tid: int) -> CpuSet:
        return frozenset(os.sched_getaffinity(tid))

    def set(self, tid: int, cpus: CpuSet) -> None:
        os.sched_setaffinity(tid, cpus)


class DryRunAffinity:
    """Reads the real masks, changes nothing, and remembers what it would have set (and
    answers later reads with it, so a dry run's read-back shows the intended result).
    ``pin`` and ``undo`` write no journal with it."""

    def __init__(self, real: AffinityOps | None = None) -> None:
        self.real: AffinityOps = real if real is not None else OsAffinity()
        self.would_set: list[tuple[int, CpuSet]] = []
        self._pretend: dict[int, CpuSet] = {}

    def get(self, tid: int) -> CpuSet:
        mask = self.real.get(tid)  # raises ESRCH for a thread that is gone, as for real
        return self._pretend.get(tid, mask)

    def set(self, tid: int, cpus: CpuSet) -> None:
        self.real.get(tid)
        if not _owner_allows(tid):
            # What the real call would answer: a dry run must not promise a pin that
            # another user's process would refuse.
            raise OSError(errno.EPERM, os.strerror(errno.EPERM))
        self.would_set.append((tid, cpus))
        self._pretend[tid] = cpus


@dataclass(frozen=True)
class ThreadResult:
    """What happened to one thread. ``before``: its mask when affmon found it; ``after``:
    the mask read back at the end (None when it exited or could not be read)."""

    pid: int
    tid: int
    before: CpuSet | None
    after: CpuSet | None
    status: ThreadStatus
    message: str = ""


@dataclass(frozen=True)
class PinResult:
    """``ok`` is False only when the pin failed; ``error`` then says why in one line, and
    ``rolled_back`` is True when every thread it had changed is back as it was (vacuously
    when it failed before the first change; False for a request refused before it began,
    and when some thread could not be put back: the journal entry stays pending for undo).
    ``warning`` is one line when it succeeded but some mask in force is not the one asked
    for (the kernel intersected it with a cpuset, or the program re-pinned itself)."""

    ok: bool
    cpus: CpuSet
    threads: tuple[ThreadResult, ...]
    error: str | None
    rolled_back: bool
    journal_id: str | None
    dry_run: bool = False
    warning: str | None = None

    def by_status(self, status: ThreadStatus) -> tuple[ThreadResult, ...]:
        return tuple(t for t in self.threads if t.status == status)


@dataclass(frozen=True)
class UndoResult:
    """``entry_ids``: the journal entries undone (marked so). Threads: "restored",
    "exited" (gone, or its TID reused), "failed", "not-moved" (created after the pin with
    a mask of its own, left alone)."""

    ok: bool
    entry_ids: tuple[str, ...]
    threads: tuple[ThreadResult, ...]
    error: str | None


class _Failure(Exception):
    """A thread could not be changed: the pin stops and rolls back."""


def pin(
    pid: int,
    cpus: Iterable[int],
    *,
    with_children: bool = False,
    root: str = "/",
    ops: AffinityOps | None = None,
    journal: Journal | None = None,
    isolate: bool = False,
    isolate_candidates: Sequence[int] = (),
) -> PinResult:
    """Set every thread of ``pid`` (with its descendants when ``with_children``) to
    ``cpus``; with ``isolate``, also move the threads of ``isolate_candidates`` off them.
    Never raises for a system refusal: the result says what happened."""
    return _Pin(pid, frozenset(cpus), with_children, root, ops or OsAffinity(), journal).run(
        isolate_candidates if isolate else ()
    )


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
        self.entry: JournalEntry | None = None
        self.entry_written = False
        self.results: dict[int, ThreadResult] = {}  # by TID, in the order found
        self.applied: list[ThreadRecord] = []  # changed, in order (rollback goes backwards)

    def run(self, isolate_candidates: Sequence[int]) -> PinResult:
        problem = self._begin()
        if problem is not None:
            return self._result(ok=False, error=problem, rolled_back=False)
        try:
            self._pin_rounds()
            self._read_back()
            if isolate_candidates:
                self._isolate(isolate_candidates)
            if self.entry_written:
                self._set_state("applied")
        except (_Failure, AffmonError) as exc:
            return self._fail(str(exc))
        except BaseException:
            self._fail("interrupted")  # Ctrl-C or a bug half way: put the threads back first
            raise
        return self._result(ok=True, error=None, rolled_back=False, warning=self._mismatch_warning())

    # -- checks ------------------------------------------------------------------

    def _begin(self) -> str | None:
        """Refuse what cannot be a pin (None when it can be), and prepare the journal entry."""
        if not self.cpus:
            return "no CPUs given to pin to"
        if any(c < 0 or c > MAX_CPU_ID for c in self.cpus):
            return f"not a CPU number in {sorted(self.cpus)[:8]}"
        stat = self._stat(self.pid)
        if stat is None:
            return f"no such process: {self.pid}"
        if stat.flags & PF_NO_SETAFFINITY:
            return self._einval_message(self.pid, fixed=True)
        if stat.flags & PF_KTHREAD:
            return f"PID {self.pid} is a kernel thread: affmon pins user processes only"
        self.entry = JournalEntry(
            id=new_entry_id(), time_s=time.time(), pid=self.pid, start_ticks=stat.start_ticks, cpus=self.cpus
        )
        return None

    # -- pinning -----------------------------------------------------------------

    def _pin_rounds(self) -> None:
        """hwloc's loop. A thread found after the first round that already has the new
        mask was created by a thread we had pinned: it needs nothing, so it does not keep
        the loop going (a process that creates threads all the time still converges)."""
        for round_number in range(1, MAX_ROUNDS + 1):
            fresh: list[ThreadRecord] = []
            for target in self._targets():
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
                self.applied.append(record)
        raise _Failure(f"threads of PID {self.pid} kept appearing with other masks: gave up after {MAX_ROUNDS} rounds")

    def _targets(self) -> list[int]:
        if not self.with_children:
            return [self.pid]
        pairs = []
        for pid in self.proc.pids():
            stat = self._stat(pid)
            if stat is not None:
                pairs.append((pid, stat.ppid))
        found = descendants([self.pid], pairs)
        if self.proc.live:
            found.discard(os.getpid())
        return [self.pid, *sorted(found - {self.pid})]

    def _on_error(self, exc: OSError, pid: int, tid: int, before: CpuSet | None) -> None:
        """ESRCH: the thread exited, which is normal. Anything else fails the pin."""
        if exc.errno == errno.ESRCH:
            self._note(pid, tid, before, None, "exited", "exited while being pinned")
            return
        message = self._refusal_message(exc, pid, tid, self.cpus)
        self._note(pid, tid, before, None, "failed", message)
        raise _Failure(message)

    def _read_back(self) -> None:
        for tid, result in list(self.results.items()):
            if result.status == "set":
                self._note_after(tid, "set", self.cpus)

    def _mismatch_warning(self) -> str | None:
        off = [t for t in self.results.values() if t.status == "set" and t.after != self.cpus]
        if not off:
            return None
        masks = sorted({format_cpulist(t.after) for t in off if t.after is not None})
        return (
            f"{len(off)} thread(s) run on {' / '.join(masks) or 'an unknown mask'}, not"
            f" {format_cpulist(self.cpus)} as asked (cpuset, offline CPUs, or the program re-pinned itself)"
        )

    # -- isolation ---------------------------------------------------------------

    def _isolate(self, candidates: Sequence[int]) -> None:
        """Move the candidates' threads off ``cpus``: new mask = mask - cpus, or, when that
        is empty, (cgroup cpuset or online CPUs) - cpus. Refusals are reported only."""
        targets = {r.pid for r in self.results.values()} | {self.pid}
        mounts = read_mounts(self.root)
        online = _online_cpus(self.root)
        for _round in range(MAX_ROUNDS):
            plan: list[tuple[ThreadRecord, CpuSet]] = []
            for pid in dict.fromkeys(candidates):
                if pid in targets or self._stat(pid) is None:
                    continue
                allowed: CpuSet | None = None
                for tid in sorted(self.proc.tids(pid)):
                    if tid in self.results:
                        continue
                    stat = self._stat(pid, tid)
                    if stat is None:
                        continue
                    try:
                        mask = self.ops.get(tid)
                    except OSError:
                        continue  # exited, or unreadable: nothing we can move
                    if not mask & self.cpus:
                        continue
                    why = _unmovable(stat)
                    if why is not None:
                        self._note(pid, tid, mask, mask, "not-moved", f"not moved: {why}")
                        continue
                    new = mask - self.cpus
                    if not new:
                        if allowed is None:
                            allowed = _cgroup_cpus(self.root, pid, mounts) or online
                        new = allowed - self.cpus
                    if not new:
                        self._note(pid, tid, mask, mask, "not-moved", "not moved: no allowed CPU is left outside")
                        continue
                    self._note(pid, tid, mask, None, "moved")
                    plan.append((ThreadRecord(pid, tid, stat.start_ticks, mask, "isolate"), new))
            if not plan:
                return
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
                self.applied.append(record)
                self._note_after(record.tid, "moved", new)

    # -- rollback ----------------------------------------------------------------

    def _fail(self, reason: str) -> PinResult:
        rolled_back = self._rollback()
        error = reason if rolled_back else f"{reason}; some threads could not be put back (`affmon undo` retries)"
        if rolled_back and self.entry_written:
            try:
                self._set_state("rolled-back")
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
            self._note(record.pid, record.tid, record.old_cpus, None, "restored", "put back after the failure")
            self._note_after(record.tid, "restored", record.old_cpus)
        if changed_any and self.entry is not None:
            skip = {record.tid for record in self.entry.threads}
            for swept in _sweep_new_threads(self.proc, self.ops, self.entry, skip):
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
            self.journal.update(self.entry)
        else:
            self.journal.add(self.entry)
            self.entry_written = True

    def _set_state(self, state: Literal["applied", "rolled-back"]) -> None:
        assert self.entry is not None and self.journal is not None
        self.entry = replace(self.entry, state=state)
        self.journal.update(self.entry)

    # -- helpers -----------------------------------------------------------------

    def _stat(self, pid: int, tid: int | None = None) -> StatFields | None:
        return _stat(self.proc, pid, tid)

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
        return _refusal_message(self.proc, exc, pid, tid, cpus)

    def _einval_message(self, pid: int, *, fixed: bool) -> str:
        return _einval_message(self.cpus, pid, fixed=fixed)

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
        )


# -- undo ---------------------------------------------------------------------------


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
        stat = _stat(proc, record.pid, record.tid)
        if stat is None:
            results.append(ThreadResult(record.pid, record.tid, None, None, "exited", "no longer exists"))
            continue
        if record.start_ticks is not None and stat.start_ticks != record.start_ticks:
            results.append(
                ThreadResult(record.pid, record.tid, None, None, "exited", "its TID now belongs to a newer thread")
            )
            continue
        results.append(_restore(proc, ops, record.pid, record.tid, record.old_cpus, ""))
    results.extend(_sweep_new_threads(proc, ops, entry, {record.tid for record in entry.threads}))
    return results


def _sweep_new_threads(proc: ProcFs, ops: AffinityOps, entry: JournalEntry, skip: set[int]) -> list[ThreadResult]:
    """Threads of the pinned processes that the entry does not record: created after the
    pin (or during it), they inherited the pinned mask from their creator. One that still
    has exactly that mask gets its process's main thread's old mask; any other mask was
    set on purpose and is left alone."""
    results: list[ThreadResult] = []
    for pid in entry.pinned_pids:
        main = next((r for r in entry.threads if r.tid == pid and r.role == "pin"), None)
        if main is None:
            continue  # the main thread was not recorded (it had exited): no mask to give
        stat = _stat(proc, pid)
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
        return ThreadResult(pid, tid, None, None, "failed", _refusal_message(proc, exc, pid, tid, old))
    if after != old:
        message = f"mask in force is {format_cpulist(after or ())}, not {format_cpulist(old)} as recorded"
    return ThreadResult(pid, tid, before, after, "restored", message)


# -- shared helpers -----------------------------------------------------------------


def _stat(proc: ProcFs, pid: int, tid: int | None = None) -> StatFields | None:
    try:
        return proc.stat(pid, tid)
    except AffmonError:
        return None  # an unparsable stat line: treat the task as gone


def _unmovable(stat: StatFields) -> str | None:
    if stat.flags & PF_KTHREAD:
        return "kernel thread"
    if stat.flags & PF_NO_SETAFFINITY:
        return "the kernel fixes its affinity (PF_NO_SETAFFINITY)"
    return None


def _refusal_message(proc: ProcFs, exc: OSError, pid: int, tid: int, cpus: CpuSet) -> str:
    if exc.errno == errno.EPERM:
        uid = _owner(proc, pid)
        if uid is not None and uid == os.geteuid():
            return f"not permitted to set the affinity of PID {pid} (user {_user(uid)}): refused by a security policy"
        return (
            f"not permitted to set the affinity of PID {pid} (user {_user(uid)}):"
            " another user's process needs CAP_SYS_NICE"
        )
    if exc.errno == errno.EINVAL:
        return _einval_message(cpus, pid, fixed=False)
    return f"cannot set the affinity of thread {tid} of PID {pid}: {exc.strerror or exc}"


def _einval_message(cpus: CpuSet, pid: int, *, fixed: bool) -> str:
    why = "a kernel thread whose affinity the kernel fixes" if fixed else "its cgroup cpuset, or offline CPUs"
    return f"CPUs {format_cpulist(cpus)} are outside what PID {pid} may use ({why})"


def _owner(proc: ProcFs, pid: int) -> int | None:
    try:
        status = proc.status(pid)
    except AffmonError:
        return None
    return None if status is None else status.uid


def _user(uid: int | None) -> str:
    if uid is None:
        return "unknown"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


CAP_SYS_NICE = 23


def _owner_allows(tid: int) -> bool:
    """Whether ``sched_setaffinity`` on ``tid`` passes the kernel's owner check: this
    process has CAP_SYS_NICE, or its effective UID is the thread's real or effective UID
    (``check_same_owner``). True when /proc does not say; security policies (seccomp, an
    LSM) are not predicted."""
    caps = _status_value("/proc/self/status", "CapEff")
    try:
        if caps is not None and int(caps, 16) >> CAP_SYS_NICE & 1:
            return True
    except ValueError:
        pass
    uids = _status_value(f"/proc/{tid}/status", "Uid")
    try:
        real, effective = (int(uid) for uid in (uids or "").split()[:2])
    except ValueError:
        return True
    return os.geteuid() in (real, effective)


def _status_value(path: str, key: str) -> str | None:
    text = read_text("/", path)
    for line in (text or "").split("\n"):
        name, sep, value = line.partition(":")
        if sep and name == key:
            return value.strip()
    return None


def _online_cpus(root: str) -> CpuSet:
    text = read_line(root, "/sys/devices/system/cpu/online")
    try:
        return parse_cpulist(text) if text else frozenset()
    except AffmonError:
        return frozenset()


def _cgroup_cpus(root: str, pid: int, mounts: tuple[Mount, ...]) -> CpuSet | None:
    try:
        return cgroup_cpuset(root, pid, mounts)
    except AffmonError:
        return None
