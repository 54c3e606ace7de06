"""Who a number names: a PID or a TID, which process that is, and when it started.

The kernel recycles PIDs and TIDs, so affmon acts on a process only as (PID, start time):
the start time (``stat`` field 22, clock ticks since boot) of a later process with the
same PID differs. A user may also type a TID where a PID is meant (``ps -L``, ``top -H``
show them side by side); ``/proc/TID`` answers for any thread although only leaders are
listed, so a TID resolves to its process through ``Tgid``. Kernel threads are refused:
affmon watches and pins user processes only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from affmon.collect.fs import read_line
from affmon.collect.procfs import PF_KTHREAD, ProcFs
from affmon.core.errors import AffmonError, SourceError
from affmon.core.text import term_safe

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Resolved:
    """``pid`` started at ``start_ticks``; ``note`` says, in one line, when the number the
    user gave was a thread of it rather than the process itself."""

    pid: int
    start_ticks: int
    note: str | None = None


def tgid_of(proc: ProcFs, number: int) -> int | None:
    """The process (thread group) that task ``number`` belongs to; None when gone."""
    data = proc.read(number, "status")
    if data is None:
        return None
    for line in data.decode("utf-8", "replace").split("\n"):  # "\n" only: Name: is the task's own text
        key, sep, value = line.partition(":")
        if sep and key == "Tgid":
            text = value.strip()
            return int(text) if text.isascii() and text.isdigit() else None
    return None


def resolve_pid(proc: ProcFs, number: int) -> Resolved:
    """The process ``number`` names (itself, or the process of the thread it is), or a
    one-line ``SourceError``: no such process, or a kernel thread."""
    tgid = tgid_of(proc, number)
    if tgid is None:
        raise SourceError(f"no such process: {number}")
    try:
        stat = proc.stat(tgid)
    except AffmonError:
        stat = None
    if stat is None:
        raise SourceError(f"no such process: {number}")
    if stat.flags & PF_KTHREAD:
        name = term_safe(stat.comm)
        raise SourceError(f"PID {number} ({name}) is a kernel thread: affmon watches and pins user processes only")
    note = None
    if tgid != number:
        note = f"{number} is a thread (TID) of PID {tgid} ({term_safe(stat.comm)}): using PID {tgid}"
    return Resolved(tgid, stat.start_ticks, note)


def uptime_ticks(root: str = "/") -> int | None:
    """Clock ticks since boot now, the unit of a task's start time; None where unknown."""
    text = read_line(root, "/proc/uptime")
    try:
        return int(float(text.split()[0]) * CLK_TCK) if text else None
    except (ValueError, IndexError):
        return None


def hidden_processes_notice(root: str = "/") -> str | None:
    """One line when ``/proc`` hides other users' processes from this one (mounted with
    ``hidepid``, and affmon has neither root's ptrace right nor the exempt group): what
    affmon cannot see, it cannot call healthy. None when everything is visible."""
    from affmon.collect.cgroup import read_mounts

    procs = [m for m in read_mounts(root) if m.mountpoint == "/proc" and m.fstype == "proc"]
    if not procs:
        return None
    options = dict(o.partition("=")[::2] for o in procs[-1].options)
    hidepid = options.get("hidepid", "0")
    if hidepid in ("0", "off") or (root in ("", "/") and os.geteuid() == 0):
        return None
    gid = options.get("gid")
    if (
        root in ("", "/")
        and gid is not None
        and gid.isascii()
        and gid.isdigit()
        and int(gid) in (os.getegid(), *os.getgroups())
    ):
        return None
    return (
        f"/proc is mounted with hidepid={hidepid}: other users' processes are hidden from affmon, so their load on"
        " these CPUs cannot be seen or moved; what it reports covers your own processes only"
    )
