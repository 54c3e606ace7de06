"""Who ``--isolate`` may move off a job's CPUs: the manners of a tool run as root on a
shared machine. Pure.

By default only the running user's own processes move, never PID 1 (init: everything
descends from it), and never one whose mask was set on purpose (narrower than the CPUs its
cgroup allows, and not by affmon's own earlier isolation): someone pinned it, and moving it
would undo their decision behind their back. Run as root, "your own" would be every root
process (virtual machines, daemons, other people's jobs started through sudo), so root
moves only processes of the job's owner that share the job's session or cgroup (``Kin``):
the job's own neighbours, not the machine's. ``isolate_all`` lifts the user, session and
deliberate-mask rules; kernel threads and PID 1 never move.
"""

from __future__ import annotations

from dataclasses import dataclass

from affmon.core.model.cpuset import CpuSet, format_cpulist


@dataclass(frozen=True)
class Candidate:
    """What the rule needs to know of a process that runs on the job's CPUs."""

    pid: int
    uid: int | None
    user: str | None
    kernel: bool
    mask: CpuSet | None  # its main thread's mask
    allowed: CpuSet | None  # what its cgroup (or the machine) allows
    moved_by_affmon: bool = False  # its mask is one an earlier affmon isolate gave it
    session: int | None = None  # its session (stat field 6); None where unknown
    cgroup: str | None = None  # its cgroup path(s), as /proc/PID/cgroup says; None where unknown


@dataclass(frozen=True)
class Kin:
    """The job a root isolation is for: its owner's UID, its session and cgroup."""

    uid: int | None
    session: int | None
    cgroup: str | None


def left_alone(c: Candidate, my_uid: int, *, isolate_all: bool = False, job: Kin | None = None) -> str | None:
    """Why ``--isolate`` must not move ``c`` (one clause), or None when it may. ``job``: the
    job's kin, which root's isolation needs: without it, root's manners are the owner's UID
    alone (root's own processes, as a recording can tell no more)."""
    if c.kernel:
        return "a kernel thread"
    if c.pid == 1:
        return "PID 1 (init)"
    if isolate_all:
        return None
    who = c.user or ("an unknown user" if c.uid is None else f"UID {c.uid}")
    if my_uid == 0:
        owner = 0 if job is None else job.uid
        if c.uid != owner:
            return f"another user's process ({who}); --isolate-all moves it"
        known = job is not None and (job.session is not None or job.cgroup is not None)
        same_session = known and c.session is not None and job is not None and c.session == job.session
        same_cgroup = known and c.cgroup is not None and job is not None and c.cgroup == job.cgroup
        # Without the job's session and cgroup (a recording holds neither), the owner's
        # processes are the proposal; the pin judges again from /proc with both.
        if known and not (same_session or same_cgroup):
            return (
                f"{who}'s, outside the job's session and cgroup (a daemon, a guest, another job); --isolate-all "
                "moves it"
            )
    elif c.uid != my_uid:
        return f"another user's process ({who}); --isolate-all moves it"
    if c.mask is not None and c.allowed is not None and c.mask < c.allowed and not c.moved_by_affmon:
        return f"pinned on purpose to CPUs {format_cpulist(c.mask)}; --isolate-all moves it"
    return None
