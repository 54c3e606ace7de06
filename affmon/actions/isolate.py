"""What ``pin --isolate`` moves: the threads of other processes on the pinned CPUs, each to
its mask without those CPUs (or, when nothing would be left, to what its cgroup allows
without them), with manners (``affmon.core.plan.isolation``): by default only the user's own
processes, never PID 1, a kernel thread, or a process pinned on purpose; within a process
it moves, never a thread whose mask differs from its main thread's (it pinned itself). The
pin applies the plan and journals it; this module only reads. ``isolation_masks`` tells
undo which mask isolation gave each process moved aside, so the tasks they start since
(which inherit it) are put back too.

A candidate is (PID, start time): one whose PID now names a later process is not the one
chosen, and is skipped.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from dataclasses import replace

from affmon.actions.journal_records import EntryHead, JournalEntry, ProcessKey, ThreadRecord
from affmon.actions.journal_trust import user_name
from affmon.actions.threads import AffinityOps, OsAffinity, ThreadResult, stat_or_none, unmovable
from affmon.collect.cgroup import Mount, cgroup_cpuset, read_mounts
from affmon.collect.fs import read_file, read_line
from affmon.collect.procfs import PF_KTHREAD, ProcFs, StatFields
from affmon.core.errors import AffmonError
from affmon.core.model.cpuset import CpuSet, format_cpulist, parse_cpulist
from affmon.core.plan.isolation import Candidate, Kin, left_alone


class IsolationPlan:
    """One pin's isolation: judges each candidate once, then plans round after round (a
    candidate that starts threads while it is moved gets them moved too)."""

    def __init__(
        self,
        proc: ProcFs,
        ops: AffinityOps,
        cpus: CpuSet,
        *,
        root: str,
        in_force: Sequence[EntryHead | JournalEntry] = (),
        isolate_all: bool = False,
        job_pid: int | None = None,
    ) -> None:
        self.proc = proc
        self.ops = ops
        self.cpus = cpus
        self.isolate_all = isolate_all
        self.kin = None if job_pid is None else kin_of(proc, root, job_pid)
        self._mounts = read_mounts(root)
        self._root = root
        self._online = _online_cpus(root)
        # Processes an earlier isolate of affmon moved: their narrow mask is affmon's, not a decision.
        self._moved_before = {key for e in in_force for key in e.isolated_processes()}
        self._judged: dict[int, str | None] = {}
        self._allowed: dict[int, CpuSet] = {}
        self._main_mask: dict[int, CpuSet | None] = {}  # each candidate's main thread's, when first judged

    def round(
        self, candidates: Sequence[ProcessKey], skip_pids: Collection[int], seen_tids: Collection[int]
    ) -> tuple[list[tuple[ThreadRecord, CpuSet]], list[ThreadResult]]:
        """(threads to move with their new masks, results for threads not moved). Skips
        the pinned processes (``skip_pids``) and threads already handled (``seen_tids``)."""
        plan: list[tuple[ThreadRecord, CpuSet]] = []
        notes: list[ThreadResult] = []
        for pid, start in dict.fromkeys(candidates):
            stat = stat_or_none(self.proc, pid)
            if pid in skip_pids or stat is None or stat.start_ticks != start:
                continue  # gone, or its PID reused since it was seen: not the process meant
            if pid not in self._judged:
                self._main_mask[pid] = self._mask(pid)
                self._judged[pid] = self._left_alone(pid, stat)
                why = self._judged[pid]
                if why is not None:
                    mask = self._mask(pid)
                    notes.append(ThreadResult(pid, pid, mask, mask, "not-moved", f"left alone: {why}"))
            if self._judged[pid] is not None:
                continue
            for tid in sorted(self.proc.tids(pid)):
                if tid in seen_tids:
                    continue
                tstat = stat_or_none(self.proc, pid, tid)
                mask = self._mask(tid)
                if tstat is None or mask is None or not mask & self.cpus:
                    continue  # exited, unreadable, or not on those CPUs: nothing to move
                why = unmovable(tstat)
                if why is not None:
                    notes.append(ThreadResult(pid, tid, mask, mask, "not-moved", f"not moved: {why}"))
                    continue
                main = self._main_mask.get(pid)
                if tid != pid and main is not None and mask != main:
                    # It (or a library for it) chose its CPUs: moving it is not isolation's to do.
                    message = (
                        f"left alone: it pinned itself to CPUs {format_cpulist(mask)}"
                        f" (its process runs on {format_cpulist(main)})"
                    )
                    notes.append(ThreadResult(pid, tid, mask, mask, "not-moved", message))
                    continue
                new = given_mask(mask, self.cpus, self._allowed_of(pid))
                if not new:
                    notes.append(
                        ThreadResult(pid, tid, mask, mask, "not-moved", "not moved: no allowed CPU is left outside")
                    )
                    continue
                plan.append((ThreadRecord(pid, tid, tstat.start_ticks, mask, "isolate"), new))
        return plan, notes

    def _left_alone(self, pid: int, stat: StatFields) -> str | None:
        candidate = Candidate(
            pid=pid,
            uid=_uid(self.proc, pid),
            user=None,
            kernel=bool(stat.flags & PF_KTHREAD),
            mask=self._mask(pid),
            allowed=self._allowed_of(pid) or None,
            moved_by_affmon=(pid, stat.start_ticks) in self._moved_before,
            session=stat.session,
            cgroup=cgroup_of(self._root, pid),
        )
        candidate = replace(candidate, user=None if candidate.uid is None else user_name(candidate.uid))
        return left_alone(candidate, os.geteuid(), isolate_all=self.isolate_all, job=self.kin)

    def _allowed_of(self, pid: int) -> CpuSet:
        """What the process's cgroup allows (the online CPUs when unknown)."""
        if pid not in self._allowed:
            self._allowed[pid] = allowed_cpus(self._root, pid, self._mounts, self._online)
        return self._allowed[pid]

    def _mask(self, tid: int) -> CpuSet | None:
        try:
            return self.ops.get(tid)
        except OSError:
            return None


def given_mask(old: CpuSet, cpus: CpuSet, allowed: CpuSet) -> CpuSet:
    """The mask isolation gives a thread that had ``old``, for a pin of ``cpus``: its own
    mask without them, or what its cgroup ``allowed`` without them when nothing is left."""
    return (old - cpus) or (allowed - cpus)


def allowed_cpus(root: str, pid: int, mounts: tuple[Mount, ...] | None = None, online: CpuSet | None = None) -> CpuSet:
    """What the process's cgroup allows (the online CPUs when unknown)."""
    try:
        cgroup = cgroup_cpuset(root, pid, mounts)
    except AffmonError:
        cgroup = None
    return cgroup or (_online_cpus(root) if online is None else online)


def isolation_masks(proc: ProcFs, entry: JournalEntry) -> dict[int, dict[CpuSet, CpuSet]]:
    """For each process the entry moved aside that still runs (a thread it recorded is
    still there): the mask isolation gave each recorded thread -> that thread's old mask.
    A task of that process (or one it started since) that carries a mask of these
    inherited it from a moved thread, and would have had the old one without the pin (the
    main thread's old mask, where two old masks were given the same one)."""
    by_pid: dict[int, list[ThreadRecord]] = {}
    for record in entry.threads:
        if record.role == "isolate":
            by_pid.setdefault(record.pid, []).append(record)
    found: dict[int, dict[CpuSet, CpuSet]] = {}
    for pid, records in by_pid.items():
        if not any(_same_task(proc, r) for r in records):
            continue  # gone, or its PID reused: its tasks went with it
        allowed = allowed_cpus(proc.root, pid)
        masks: dict[CpuSet, CpuSet] = {}
        for r in sorted(records, key=lambda r: r.tid == r.pid):  # the main thread's last: it wins
            masks[given_mask(r.old_cpus, entry.cpus, allowed)] = r.old_cpus
        found[pid] = masks
    return found


def _same_task(proc: ProcFs, record: ThreadRecord) -> bool:
    stat = stat_or_none(proc, record.pid, record.tid)
    return stat is not None and record.start_ticks is not None and stat.start_ticks == record.start_ticks


def _uid(proc: ProcFs, pid: int) -> int | None:
    try:
        status = proc.status(pid)
    except AffmonError:
        return None
    return None if status is None else status.uid


def cgroup_of(root: str, pid: int) -> str | None:
    """``/proc/PID/cgroup`` as one string (every hierarchy's path): two processes in the
    same cgroup have the same text. None where unreadable, or where every path is the root
    cgroup ``/``, which every process of a machine without cgroups shares: no kin there."""
    data = read_file(root, f"/proc/{pid}/cgroup")
    if data is None:
        return None
    text = data.decode("utf-8", "replace")[:4096]
    paths = {line.split(":", 2)[2] for line in text.splitlines() if line.count(":") >= 2}
    return None if paths <= {"/", ""} else text


def kin_of(proc: ProcFs, root: str, job_pid: int) -> Kin | None:
    """The job's owner, session and cgroup (``core.isolation.Kin``), read from /proc."""
    stat = stat_or_none(proc, job_pid)
    if stat is None:
        return None
    return Kin(_uid(proc, job_pid), stat.session, cgroup_of(root, job_pid))


def judge(
    pid: int,
    start_ticks: int,
    *,
    job_pid: int,
    isolate_all: bool = False,
    root: str = "/",
    in_force: Sequence[EntryHead | JournalEntry] = (),
) -> str | None:
    """Why isolation would leave process ``pid`` (started at ``start_ticks``) alone for the
    job ``job_pid``, read from /proc as the pin will judge it; None when it would move it,
    "gone" when that process is no longer there."""
    proc = ProcFs(root)
    stat = stat_or_none(proc, pid)
    if stat is None or stat.start_ticks != start_ticks:
        return "gone"
    plan = IsolationPlan(
        proc, OsAffinity(), frozenset(), root=root, in_force=in_force, isolate_all=isolate_all, job_pid=job_pid
    )
    return plan._left_alone(pid, stat)


def _online_cpus(root: str) -> CpuSet:
    text = read_line(root, "/sys/devices/system/cpu/online")
    try:
        return parse_cpulist(text) if text else frozenset()
    except AffmonError:
        return frozenset()
