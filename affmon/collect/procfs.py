"""Per-process and per-thread reads from ``/proc`` under an injected root.

Parsers here are pure functions of the file's text (tested on recorded and hostile
input); readers open files through ``affmon.collect.fs`` so that a task that exits
mid-read becomes ``None`` (dropped from the sample) and an unreadable field becomes
``None`` (unknown).

Cost (measured on a 2-core development machine, ~2,000 threads): ``os.open``/``os.read``
of ``stat`` and ``schedstat`` plus ``os.sched_getaffinity(tid)`` is about 32 us a thread;
``status`` and ``sched`` are the expensive files, so the sampler reads ``sched`` only for
threads that ran since the last tick and ``status`` once per process, never per thread.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from affmon.collect.fs import UNAVAILABLE, clipped, is_live, list_dir, quoted, read_bytes, read_file
from affmon.core.errors import ParseError
from affmon.core.model.cpuset import CpuSet, parse_cpulist

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PF_NO_SETAFFINITY = 0x04000000
PF_KTHREAD = 0x00200000


def _uint(text: str) -> int:
    """A number the kernel printed with ``%u``/``%lu``/``%llu``: ASCII digits only, at most
    the 20 a 64-bit value needs. (``int`` also takes ``-1``, ``+1``, ``1_000`` and ``３``,
    which no kernel prints.)"""
    if not (text.isascii() and text.isdigit()) or len(text) > 20:
        raise ValueError(f"not an unsigned number: {text[:30]!r}")
    return int(text)


@dataclass(frozen=True, slots=True)
class StatFields:
    """The fields of ``/proc/PID[/task/TID]/stat`` affmon uses."""

    pid: int
    comm: str
    state: str
    ppid: int
    flags: int
    utime_ticks: int
    stime_ticks: int
    start_ticks: int
    processor: int | None  # absent on very old kernels
    session: int | None = None  # field 6: the session (a login, a terminal, a setsid daemon)
    vsize_bytes: int | None = None  # field 23: the address space's size; a library loaded grows it


def parse_stat_bytes(data: bytes) -> StatFields:
    """``parse_stat`` of a ``stat`` file as read: a name that is not UTF-8 keeps its
    undecodable bytes as U+FFFD."""
    return parse_stat(data.decode("utf-8", "replace"))


def parse_stat(text: str) -> StatFields:
    """Parse a ``stat`` line. The name sits between the first ``(`` and the *last* ``)``
    and may hold spaces, parentheses and newlines, so fields are split after it."""
    open_paren = text.find("(")
    close_paren = text.rfind(")")
    if open_paren < 0 or close_paren < open_paren:
        raise ParseError("stat line has no (comm)")
    try:
        pid = _uint(text[:open_paren].strip())
        rest = text[close_paren + 1 :].split()
        # rest[0] is field 3 (state): field n is rest[n - 3].
        if len(rest) < 20:
            raise ParseError(f"stat line has {len(rest) + 2} fields, expected at least 22")
        processor = _uint(rest[36]) if len(rest) > 36 else None
        return StatFields(
            pid=pid,
            comm=text[open_paren + 1 : close_paren],
            state=rest[0],
            ppid=_uint(rest[1]),
            flags=_uint(rest[6]),
            utime_ticks=_uint(rest[11]),
            stime_ticks=_uint(rest[12]),
            start_ticks=_uint(rest[19]),
            processor=processor,
            session=_uint(rest[3]),
            vsize_bytes=_uint(rest[20]) if len(rest) > 20 else None,
        )
    except ValueError as exc:
        raise ParseError(f"bad number in stat line: {exc}") from None


@dataclass(frozen=True, slots=True)
class SchedStat:
    cpu_ns: int
    wait_ns: int
    timeslices: int


def parse_schedstat(text: str) -> SchedStat | None:
    """``run_ns wait_ns timeslices``. ``0 0 0`` is what the kernel prints when sched_info
    is off (booted ``nodelayacct``): that is "unknown", not "never ran", so it gives None."""
    parts = text.split()
    if len(parts) < 3:
        raise ParseError(f"schedstat has {len(parts)} fields, expected 3")
    try:
        cpu_ns, wait_ns, slices = _uint(parts[0]), _uint(parts[1]), _uint(parts[2])
    except ValueError:
        raise ParseError(f"bad number in schedstat {quoted(text.strip())}") from None
    if cpu_ns == 0 and wait_ns == 0 and slices == 0:
        return None
    return SchedStat(cpu_ns, wait_ns, slices)


@dataclass(frozen=True, slots=True)
class SchedCounters:
    voluntary_switches: int | None
    involuntary_switches: int | None
    migrations: int | None


def parse_sched(text: str) -> SchedCounters:
    """The counters of ``/proc/PID/task/TID/sched`` (``key : value`` lines; the first two
    lines are a header). Missing keys are unknown; other lines are ignored."""
    values: dict[str, int] = {}
    # The header line holds the task's name, which may itself contain "key : value", and
    # characters that ``splitlines`` takes for line breaks (\x1c, \x85, \u2028): only "\n"
    # ends a line.
    for line in text.split("\n")[2:]:
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key in ("se.nr_migrations", "nr_voluntary_switches", "nr_involuntary_switches"):
            try:
                values[key] = _uint(value.strip().split(".")[0])
            except ValueError:
                raise ParseError(f"bad value for {key} in sched: {quoted(value.strip())}") from None
    return SchedCounters(
        voluntary_switches=values.get("nr_voluntary_switches"),
        involuntary_switches=values.get("nr_involuntary_switches"),
        migrations=values.get("se.nr_migrations"),
    )


@dataclass(frozen=True, slots=True)
class StatusFields:
    uid: int | None
    ppid: int | None
    threads: int | None
    cpus_allowed: CpuSet | None
    mems_allowed: CpuSet | None
    voluntary_switches: int | None
    involuntary_switches: int | None


def parse_status(text: str) -> StatusFields:
    r"""The ``status`` lines affmon uses; absent lines are unknown. Only "\n" ends a line:
    the ``Name:`` line holds the task's own name, and ``splitlines`` would also break it at
    \x1c, \x85 or \u2028, letting a process forge ``Uid:`` or ``Cpus_allowed_list:``."""
    fields: dict[str, str] = {}
    for line in text.split("\n"):
        key, sep, value = line.partition(":")
        if sep:
            fields[key] = value.strip()

    def number(key: str) -> int | None:
        raw = fields.get(key)
        if raw is None:
            return None
        first = raw.split()[0] if raw.split() else ""
        try:
            return _uint(first)
        except ValueError:
            raise ParseError(f"bad value for {key} in status: {quoted(raw)}") from None

    def cpulist(key: str) -> CpuSet | None:
        raw = fields.get(key)
        if raw is None:
            return None
        try:
            return parse_cpulist(raw)
        except ParseError as exc:
            raise ParseError(f"bad value for {key} in status: {clipped(str(exc))}") from None

    return StatusFields(
        uid=number("Uid"),
        ppid=number("PPid"),
        threads=number("Threads"),
        cpus_allowed=cpulist("Cpus_allowed_list"),
        mems_allowed=cpulist("Mems_allowed_list"),
        voluntary_switches=number("voluntary_ctxt_switches"),
        involuntary_switches=number("nonvoluntary_ctxt_switches"),
    )


def parse_cmdline(data: bytes) -> str:
    """NUL-separated argv joined with spaces (what ``ps -o args`` shows)."""
    return data.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")


def cmdline_argv(data: bytes) -> list[str]:
    return [a.decode("utf-8", "replace") for a in data.rstrip(b"\0").split(b"\0")] if data else []


MASKS_KEPT = 4096  # distinct affinity masks kept to share (ProcFs._interned)
# Processes whose stat file stays open between ticks (ProcFs.stats). Few enough that the
# descriptors opened after them (Textual's, the ticker's, which select() watches) stay
# far below select's limit of 1024.
STAT_FDS_KEPT = 256
# The sampler's listing of /proc is kept while no task has been created since (the last
# PID given out, /proc/loadavg, is as it was), and read again at least this often.
RELIST_PIDS_S = 5.0


def _descriptor_limit() -> int:
    """The soft limit on open files (an eighth of it at most is kept open for stat files:
    the exporter, run with a low limit, needs its descriptors for connections)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def _close_all(fds: dict[int, int]) -> None:
    for fd in fds.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    fds.clear()


class ProcFs:
    """Reader of ``/proc`` under ``root``. ``live`` (root ``/``) allows system calls on
    the real tasks (``sched_getaffinity``) and opens paths as they are; a recorded tree
    only has its files, read inside it (``affmon.collect.fs``)."""

    def __init__(self, root: str = "/") -> None:
        self.root = root
        self.live = is_live(root)
        self._masks: dict[CpuSet, CpuSet] = {}
        self._stat_fds: dict[int, int] = {}  # pid -> its stat file, open (live only)
        self._closer = weakref.finalize(self, _close_all, self._stat_fds)
        self._listed: list[int] = []  # the last listing of /proc (listed_pids)
        self._listed_at = (b"", float("-inf"))  # the last PID given out then, and when
        self._relist = True  # a process of the listing is gone, or no listing yet
        self._last_pid_known: bool | None = None  # /proc/loadavg names this namespace's last PID

    def close(self) -> None:
        """Close the stat files kept open (done too when the reader is collected)."""
        _close_all(self._stat_fds)

    def stats(self, pids: Iterable[int]) -> Iterator[tuple[int, bytes]]:
        """(pid, its ``stat`` file) for each of ``pids`` that could be read, in order.
        Live, the file of each of the first ``STAT_FDS_KEPT`` processes (an eighth of the
        open-file limit at most) stays open between calls and is read again from its start
        (the kernel writes the line anew at each read): one system call a process a tick
        instead of an open, a read and a close (2 us against 5 on a two-core VM). An open
        file names the process it was opened for, not the PID: once that process has ended
        it reads as ESRCH, and the PID's file is opened again, so a reused PID is read as the
        new process it is. Files of PIDs not in ``pids`` (processes that ended) are closed,
        and all of them as soon as an open fails for want of descriptors. One thread at a
        time: the monitor's ticker, which ends before its source is closed."""
        if not self.live:
            for pid in pids:
                data = self.read(pid, "stat")
                if data is not None:
                    yield pid, data
            return
        kept = self._stat_fds
        room = min(STAT_FDS_KEPT, _descriptor_limit() // 8)
        listed = set()
        pread = os.pread
        for pid in pids:  # (one loop, no call a process: it runs for every process every tick)
            listed.add(pid)
            data = None
            fd = kept.get(pid)
            if fd is not None:
                try:
                    data = pread(fd, 4096, 0)
                except OSError:  # the process it was opened for has ended (ESRCH): the PID is opened again
                    del kept[pid]
                    os.close(fd)
            if data is None:
                data = self._open_stat(pid, room)
            if data is not None:
                yield pid, data
            else:
                self._relist = True  # gone: the next listed_pids lists /proc again
        for pid in [p for p in kept if p not in listed]:
            os.close(kept.pop(pid))

    def _open_stat(self, pid: int, room: int) -> bytes | None:
        path = f"/proc/{pid}/stat"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE) and self._stat_fds:
                _close_all(self._stat_fds)  # descriptors are short: the kept ones go back first
                return read_bytes(path)
            if exc.errno in UNAVAILABLE:
                return None
            raise
        try:
            data = os.pread(fd, 4096, 0)
        except OSError as exc:
            os.close(fd)
            if exc.errno in UNAVAILABLE:
                return None
            raise
        if len(self._stat_fds) < room:
            self._stat_fds[pid] = fd
        else:
            os.close(fd)
        return data

    def _interned(self, mask: CpuSet) -> CpuSet:
        """One object for each distinct mask: threads mostly share a few masks, and a
        frozenset of 192 CPUs takes 8 KiB (10,000 threads' own copies: 80 MiB)."""
        kept = self._masks.get(mask)
        if kept is not None:
            return kept
        if len(self._masks) >= MASKS_KEPT:
            self._masks.clear()  # a backstop: as many distinct masks as this is not a normal machine
        self._masks[mask] = mask
        return mask

    def pids(self) -> list[int]:
        return [int(n) for n in self._names("/proc") if n.isascii() and n.isdigit()]

    def listed_pids(self, now: float) -> list[int]:
        """``pids()``, live, without listing ``/proc`` again while nothing can have changed
        it: the last PID the kernel gave out (``/proc/loadavg``'s last field; a new thread
        takes one too) is the one it had given out at the last listing, no process of that
        listing has been found gone by ``stats``, and the listing is under
        ``RELIST_PIDS_S`` old. Listing ``/proc`` costs more than reading a few dozen ``stat``
        files. Only where ``/proc`` is this process's PID namespace's (``/proc/self`` is
        this process): ``loadavg`` counts the reader's namespace."""
        last = self._last_pid() if self.live else None
        if last is None:
            return self.pids()
        if not self._relist and last == self._listed_at[0] and now - self._listed_at[1] < RELIST_PIDS_S:
            return list(self._listed)
        self._listed = self.pids()
        self._listed_at = (last, now)
        self._relist = False
        return list(self._listed)

    def _last_pid(self) -> bytes | None:
        if self._last_pid_known is None:
            try:
                self._last_pid_known = os.readlink("/proc/self") == str(os.getpid())
            except OSError:
                self._last_pid_known = False
        if not self._last_pid_known:
            return None
        data = read_bytes("/proc/loadavg")
        fields = data.split() if data else []
        return fields[4] if len(fields) == 5 and fields[4].isdigit() else None

    def tids(self, pid: int) -> list[int]:
        return [int(n) for n in self._names(f"/proc/{pid}/task") if n.isascii() and n.isdigit()]

    def _names(self, path: str) -> list[str]:
        if not self.live:
            return list_dir(self.root, path)
        try:
            return os.listdir(path)
        except OSError:
            return []

    def read(self, pid: int, name: str) -> bytes | None:
        if self.live:
            return read_bytes(f"/proc/{pid}/{name}")
        return read_file(self.root, f"/proc/{pid}/{name}")

    def read_task(self, pid: int, tid: int, name: str) -> bytes | None:
        if self.live:
            return read_bytes(f"/proc/{pid}/task/{tid}/{name}")
        return read_file(self.root, f"/proc/{pid}/task/{tid}/{name}")

    def stat(self, pid: int, tid: int | None = None) -> StatFields | None:
        data = self.read(pid, "stat") if tid is None else self.read_task(pid, tid, "stat")
        if data is None:
            return None
        return parse_stat_bytes(data)

    def schedstat(self, pid: int, tid: int) -> SchedStat | None:
        data = self.read_task(pid, tid, "schedstat")
        return None if data is None else parse_schedstat(data.decode("ascii", "replace"))

    def sched(self, pid: int, tid: int) -> SchedCounters | None:
        data = self.read_task(pid, tid, "sched")
        return None if data is None else parse_sched(data.decode("utf-8", "replace"))

    def status(self, pid: int, tid: int | None = None) -> StatusFields | None:
        data = self.read(pid, "status") if tid is None else self.read_task(pid, tid, "status")
        return None if data is None else parse_status(data.decode("utf-8", "replace"))

    def affinity(self, pid: int, tid: int) -> CpuSet | None:
        """The thread's mask: one system call on a live system, ``status`` in a tree."""
        if self.live:
            try:
                return self._interned(frozenset(os.sched_getaffinity(tid)))
            except OSError:
                return None
        status = self.status(pid, tid)
        return None if status is None or status.cpus_allowed is None else self._interned(status.cpus_allowed)
