"""The affinity system calls behind one small interface (real, dry-run, or a test's), the
result for one thread, and the /proc reads and refusal messages that ``pin`` and
``undo`` share; and the pin of the calling thread that ``affmon exec`` makes before it
execs its command."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from typing import Literal, Protocol

from affmon.actions.journal_trust import user_name
from affmon.collect.fs import read_text
from affmon.collect.procfs import PF_KTHREAD, PF_NO_SETAFFINITY, ProcFs, StatFields
from affmon.core.errors import AffmonError
from affmon.core.model.cpuset import CpuSet, format_cpulist

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


def pin_calling_thread(cpus: CpuSet) -> CpuSet:
    """Set the calling thread's mask to ``cpus`` and read it back (``affmon exec``, before it
    execs the command, which keeps the mask): the CPUs the kernel kept, those of ``cpus``
    that this process's cpuset allows. ``OSError`` as the system call raises it."""
    affinity = OsAffinity()
    affinity.set(0, cpus)  # 0: the calling thread
    return affinity.get(0)


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
        if not owner_allows(tid):
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


def stat_or_none(proc: ProcFs, pid: int, tid: int | None = None) -> StatFields | None:
    try:
        return proc.stat(pid, tid)
    except AffmonError:
        return None  # an unparsable stat line: treat the task as gone


def unmovable(stat: StatFields) -> str | None:
    if stat.flags & PF_KTHREAD:
        return "kernel thread"
    if stat.flags & PF_NO_SETAFFINITY:
        return "the kernel fixes its affinity (PF_NO_SETAFFINITY)"
    return None


def refusal_message(proc: ProcFs, exc: OSError, pid: int, tid: int, cpus: CpuSet) -> str:
    if exc.errno == errno.EPERM:
        uid = _owner(proc, pid)
        who = f"PID {pid} (user {user_name(uid)})"
        if uid is not None and uid == os.geteuid():
            return f"not permitted to set the affinity of {who}: refused by a security policy"
        return f"not permitted to set the affinity of {who}: another user's process needs CAP_SYS_NICE"
    if exc.errno == errno.EINVAL:
        return einval_message(cpus, pid, fixed=False)
    return f"cannot set the affinity of thread {tid} of PID {pid}: {exc.strerror or exc}"


def setuid_note(root: str, pid: int) -> str:
    """What makes the kernel refuse a process's owner a change of its affinity, when that
    is it: "runs a setuid program (effective user X, real user Y)" when its effective or
    saved user is not its real one; "" otherwise."""
    uids = _status_value(f"/proc/{pid}/status", "Uid", root)
    try:
        real, effective, saved = (int(uid) for uid in (uids or "").split()[:3])
    except ValueError:
        return ""
    if effective == real and saved == real:
        return ""
    other = effective if effective != real else saved
    return f"runs a setuid program (effective user {user_name(other)}, real user {user_name(real)})"


def einval_message(cpus: CpuSet, pid: int, *, fixed: bool) -> str:
    why = "a kernel thread whose affinity the kernel fixes" if fixed else "its cgroup cpuset, or offline CPUs"
    return f"CPUs {format_cpulist(cpus)} are outside what PID {pid} may use ({why})"


def _owner(proc: ProcFs, pid: int) -> int | None:
    try:
        status = proc.status(pid)
    except AffmonError:
        return None
    return None if status is None else status.uid


CAP_SYS_NICE = 23


def owner_allows(tid: int) -> bool:
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


def _status_value(path: str, key: str, root: str = "/") -> str | None:
    text = read_text(root, path)
    for line in (text or "").split("\n"):
        name, sep, value = line.partition(":")
        if sep and name == key:
            return value.strip()
    return None
