"""What ``pin --isolate`` moves: the threads of other processes on the pinned CPUs, each to
its mask without those CPUs (or, when nothing would be left, to what its cgroup allows
without them), with manners (``affmon.core.isolation``): by default only the user's own
processes, never PID 1, a kernel thread, or a process pinned on purpose. The pin applies
the plan and journals it; this module only reads.

A candidate is (PID, start time): one whose PID now names a later process is not the one
chosen, and is skipped.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence

from affmon.actions.journal_records import JournalEntry, ProcessKey, ThreadRecord
from affmon.actions.journal_trust import user_name
from affmon.actions.threads import AffinityOps, ThreadResult, stat_or_none, unmovable
from affmon.collect.cgroup import cgroup_cpuset, read_mounts
from affmon.collect.fs import read_line
from affmon.collect.procfs import PF_KTHREAD, ProcFs, StatFields
from affmon.core.cpuset import CpuSet, parse_cpulist
from affmon.core.errors import AffmonError
from affmon.core.isolation import Candidate, left_alone


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
        in_force: Sequence[JournalEntry] = (),
        isolate_all: bool = False,
    ) -> None:
        self.proc = proc
        self.ops = ops
        self.cpus = cpus
        self.isolate_all = isolate_all
        self._mounts = read_mounts(root)
        self._root = root
        self._online = _online_cpus(root)
        # Processes an earlier isolate of affmon moved: their narrow mask is affmon's, not a decision.
        self._moved_before = {
            (r.pid, r.start_ticks) for e in in_force for r in e.threads if r.role == "isolate" and r.tid == r.pid
        }
        self._judged: dict[int, str | None] = {}
        self._allowed: dict[int, CpuSet] = {}

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
                new = (mask - self.cpus) or (self._allowed_of(pid) - self.cpus)
                if not new:
                    notes.append(
                        ThreadResult(pid, tid, mask, mask, "not-moved", "not moved: no allowed CPU is left outside")
                    )
                    continue
                plan.append((ThreadRecord(pid, tid, tstat.start_ticks, mask, "isolate"), new))
        return plan, notes

    def _left_alone(self, pid: int, stat: StatFields) -> str | None:
        try:
            status = self.proc.status(pid)
        except AffmonError:
            status = None
        uid = None if status is None else status.uid
        candidate = Candidate(
            pid=pid,
            uid=uid,
            user=None if uid is None else user_name(uid),
            kernel=bool(stat.flags & PF_KTHREAD),
            mask=self._mask(pid),
            allowed=self._allowed_of(pid) or None,
            moved_by_affmon=(pid, stat.start_ticks) in self._moved_before,
        )
        return left_alone(candidate, os.geteuid(), isolate_all=self.isolate_all)

    def _allowed_of(self, pid: int) -> CpuSet:
        """What the process's cgroup allows (the online CPUs when unknown)."""
        if pid not in self._allowed:
            try:
                cgroup = cgroup_cpuset(self._root, pid, self._mounts)
            except AffmonError:
                cgroup = None
            self._allowed[pid] = cgroup or self._online
        return self._allowed[pid]

    def _mask(self, tid: int) -> CpuSet | None:
        try:
            return self.ops.get(tid)
        except OSError:
            return None


def _online_cpus(root: str) -> CpuSet:
    text = read_line(root, "/sys/devices/system/cpu/online")
    try:
        return parse_cpulist(text) if text else frozenset()
    except AffmonError:
        return frozenset()
