"""Who ``--isolate`` may move off a job's CPUs: the manners of a tool run as root on a
shared machine. Pure.

By default only the running user's own processes move (root's, when root runs affmon), never
PID 1 (init: everything descends from it), and never one whose mask was set on purpose (narrower
than the CPUs its cgroup allows, and not by affmon's own earlier isolation): someone
pinned it, and moving it would undo their decision behind their back. ``isolate_all``
lifts the user and deliberate-mask rules; kernel threads and PID 1 never move.
"""

from __future__ import annotations

from dataclasses import dataclass

from affmon.core.cpuset import CpuSet, format_cpulist


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


def left_alone(c: Candidate, my_uid: int, *, isolate_all: bool = False) -> str | None:
    """Why ``--isolate`` must not move ``c`` (one clause), or None when it may."""
    if c.kernel:
        return "a kernel thread"
    if c.pid == 1:
        return "PID 1 (init)"
    if isolate_all:
        return None
    if c.uid != my_uid:
        who = c.user or ("an unknown user" if c.uid is None else f"UID {c.uid}")
        return f"another user's process ({who}); --isolate-all moves it"
    if c.mask is not None and c.allowed is not None and c.mask < c.allowed and not c.moved_by_affmon:
        return f"pinned on purpose to CPUs {format_cpulist(c.mask)}; --isolate-all moves it"
    return None
