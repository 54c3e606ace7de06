"""What the journal holds: one entry per pin, each thread's mask before affmon changed it,
the CPUs each process was finally pinned to when that is not the entry's whole set (a
split: main loop and workers on separate cores), a migration of the pinned process's
memory when one was asked for, and the JSON line each is written as. Pure values;
``affmon.actions.journal`` reads and writes them."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from affmon.core.cpuset import CpuSet, format_cpulist, parse_cpulist
from affmon.core.errors import AffmonError, ParseError

MemoryState = Literal["pending", "moved", "failed"]
EntryState = Literal["pending", "applied", "rolled-back", "undone", "expired"]
ThreadRole = Literal["pin", "isolate"]
ProcessKey = tuple[int, int]  # (PID, start time in clock ticks since boot): a process, not a recycled number
_STATES: frozenset[str] = frozenset({"pending", "applied", "rolled-back", "undone", "expired"})
_ROLES: frozenset[str] = frozenset({"pin", "isolate"})
_MEMORY_STATES: frozenset[str] = frozenset({"pending", "moved", "failed"})
FINISHED: frozenset[str] = frozenset({"rolled-back", "undone", "expired"})
FORMAT_VERSION = 1
KEEP_FINISHED = 20  # finished entries kept, as one-line summaries, for `affmon undo` to name


class JournalError(AffmonError):
    """The journal file is unreadable, corrupt, untrusted, or cannot be written."""


@dataclass(frozen=True)
class ThreadRecord:
    """One thread's mask before affmon changed it. ``start_ticks`` tells a thread from a
    later one that reused its TID; ``role`` says whether it was pinned (a target's
    thread) or moved aside by ``isolate``."""

    pid: int
    tid: int
    start_ticks: int | None
    old_cpus: CpuSet
    role: ThreadRole = "pin"


@dataclass(frozen=True)
class ProcessMask:
    """The CPUs one pinned process (``pid``, ``start_ticks``) was finally pinned to, a part
    of its entry's ``cpus``: a split places the main loop on some of them and the workers
    on the others, inside one entry, so that one undo takes the whole placement back."""

    pid: int
    start_ticks: int
    cpus: CpuSet

    @property
    def key(self) -> ProcessKey:
        return (self.pid, self.start_ticks)


NodeBytes = tuple[tuple[int, int], ...]  # (NUMA node, resident bytes), by node


@dataclass(frozen=True)
class MemoryRecord:
    """A migration of the pinned process's pages to its new CPUs' node (``pin
    --migrate-memory``). Written before the system call ("pending": a crash leaves it
    so, saying a migration may have begun), then with its outcome ("moved" or
    "failed", ``error`` saying why). ``bytes_before``/``bytes_after``: resident bytes
    per node as numa_maps counted them around the call (None: not readable);
    ``pages_not_moved``: what ``migrate_pages(2)`` returned. ``undo`` never moves
    memory back: it reads this only to say so."""

    pid: int
    from_nodes: tuple[int, ...]
    to_node: int
    state: MemoryState = "pending"
    bytes_before: NodeBytes | None = None
    bytes_after: NodeBytes | None = None
    pages_not_moved: int | None = None
    error: str | None = None

    @property
    def moved_bytes(self) -> int | None:
        """Bytes that left the source nodes between the two reads, when both are known."""
        if self.bytes_before is None or self.bytes_after is None:
            return None
        before, after = dict(self.bytes_before), dict(self.bytes_after)
        return max(0, sum(before.get(n, 0) - after.get(n, 0) for n in self.from_nodes))


@dataclass(frozen=True)
class JournalEntry:
    id: str
    time_s: float  # wall-clock time of the pin
    pid: int  # the process asked for (children, if any, appear in threads)
    start_ticks: int | None
    cpus: CpuSet  # the CPUs asked for
    state: EntryState = "pending"
    threads: tuple[ThreadRecord, ...] = field(default=())
    # Clock ticks since boot when the pin began (the unit of a task's start time): a task of
    # a pinned process, or a descendant, that started later and carries the pinned mask
    # inherited it from the pin, so undo gives it the mask it would have had.
    since_ticks: int | None = None
    memory: MemoryRecord | None = None  # the migration of the target's pages, when one was asked for
    # Per-process refinements of ``cpus`` (a split); a pinned process not listed has ``cpus``.
    masks: tuple[ProcessMask, ...] = field(default=())

    def cpus_of(self, key: ProcessKey) -> CpuSet:
        """The CPUs this entry finally pinned the process ``key`` to."""
        return next((m.cpus for m in reversed(self.masks) if m.key == key), self.cpus)

    @property
    def set_masks(self) -> frozenset[CpuSet]:
        """Every mask this entry set on its processes' threads: a task created since the pin
        that carries one of them inherited it from the pin."""
        return frozenset({self.cpus, *(m.cpus for m in self.masks)})

    @property
    def pinned_pids(self) -> tuple[int, ...]:
        """The processes this entry pinned (the target and, with children, its workers)."""
        return tuple(dict.fromkeys(t.pid for t in self.threads if t.role == "pin")) or (self.pid,)

    def pinned_processes(self) -> tuple[ProcessKey, ...]:
        """The pinned processes with their start times (from the main thread's record, or
        the entry's own for the target); a process whose start is unknown is left out,
        since nothing could tell it from a later process with the same PID."""
        starts = {t.tid: t.start_ticks for t in self.threads if t.role == "pin" and t.tid == t.pid}
        if self.start_ticks is not None:
            starts.setdefault(self.pid, self.start_ticks)
        found = []
        for pid in self.pinned_pids:
            start = starts.get(pid)
            if start is not None:
                found.append((pid, start))
        return tuple(found)


def new_entry_id() -> str:
    # os.urandom is what secrets.token_hex reads; importing secrets loads OpenSSL's
    # libcrypto (through hmac and hashlib): 3.5 MiB of the monitor's memory for nothing.
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{os.urandom(3).hex()}"


def compact(entries: list[JournalEntry]) -> list[JournalEntry]:
    """What the file keeps: every entry in force whole; finished ones without their thread
    records and refinements (nothing is left to restore or expect from them), and only the
    newest ``KEEP_FINISHED``."""
    finished = [i for i, e in enumerate(entries) if e.state in FINISHED]
    dropped = set(finished[:-KEEP_FINISHED]) if len(finished) > KEEP_FINISHED else set()
    return [
        replace(e, threads=(), masks=()) if e.state in FINISHED and (e.threads or e.masks) else e
        for i, e in enumerate(entries)
        if i not in dropped
    ]


# -- encoding ---------------------------------------------------------------------


def encode(entry: JournalEntry) -> dict[str, Any]:
    """The entry's JSON object; ``memory`` only when a migration was asked for and
    ``masks`` only for a split, so every other entry keeps the shape it always had."""
    data = {
        "version": FORMAT_VERSION,
        "id": entry.id,
        "time": entry.time_s,
        "pid": entry.pid,
        "start_ticks": entry.start_ticks,
        "cpus": format_cpulist(entry.cpus),
        "state": entry.state,
        "since_ticks": entry.since_ticks,
        "threads": [
            {
                "pid": t.pid,
                "tid": t.tid,
                "start_ticks": t.start_ticks,
                "old": format_cpulist(t.old_cpus),
                "role": t.role,
            }
            for t in entry.threads
        ],
    }
    if entry.memory is not None:
        data["memory"] = _encode_memory(entry.memory)
    if entry.masks:
        data["masks"] = [
            {"pid": m.pid, "start_ticks": m.start_ticks, "cpus": format_cpulist(m.cpus)} for m in entry.masks
        ]
    return data


def _encode_memory(m: MemoryRecord) -> dict[str, Any]:
    return {
        "pid": m.pid,
        "from_nodes": list(m.from_nodes),
        "to_node": m.to_node,
        "state": m.state,
        "bytes_before": None if m.bytes_before is None else [list(pair) for pair in m.bytes_before],
        "bytes_after": None if m.bytes_after is None else [list(pair) for pair in m.bytes_after],
        "pages_not_moved": m.pages_not_moved,
        "error": m.error,
    }


def _decode_memory(raw: Any) -> MemoryRecord | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ValueError("memory is not a JSON object")
    state = _text(raw["state"])
    if state not in _MEMORY_STATES:
        raise ValueError(f"unknown memory state {state!r}")
    if not isinstance(raw["from_nodes"], list):
        raise ValueError("from_nodes is not a list")
    error = raw.get("error")
    return MemoryRecord(
        pid=_int(raw["pid"]),
        from_nodes=tuple(_int(n) for n in raw["from_nodes"]),
        to_node=_int(raw["to_node"]),
        state=cast(MemoryState, state),
        bytes_before=_node_bytes(raw.get("bytes_before")),
        bytes_after=_node_bytes(raw.get("bytes_after")),
        pages_not_moved=_optional_int(raw.get("pages_not_moved")),
        error=None if error is None else _text(error),
    )


def _decode_masks(raw: Any) -> tuple[ProcessMask, ...]:
    """The optional ``masks`` list (absent in entries written before it existed)."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(m, dict) for m in raw):
        raise ValueError("masks is not a list of JSON objects")
    found = []
    for item in raw:
        cpus = _cpus(item["cpus"])
        if not cpus:
            raise ValueError("a process mask names no CPU")
        found.append(ProcessMask(pid=_int(item["pid"]), start_ticks=_int(item["start_ticks"]), cpus=cpus))
    return tuple(found)


def _node_bytes(value: Any) -> NodeBytes | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(p, list) and len(p) == 2 for p in value):
        raise ValueError("expected a list of [node, bytes] pairs")
    return tuple((_int(node), _int(size)) for node, size in value)


def decode(raw: Any) -> JournalEntry:
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    if raw.get("version") != FORMAT_VERSION:
        raise ValueError(f"unknown version {raw.get('version')!r}")
    state = _text(raw["state"])
    if state not in _STATES:
        raise ValueError(f"unknown state {state!r}")
    threads = []
    for item in raw["threads"]:
        role = _text(item["role"])
        if role not in _ROLES:
            raise ValueError(f"unknown role {role!r}")
        old = _cpus(item["old"])
        threads.append(
            ThreadRecord(
                pid=_int(item["pid"]),
                tid=_int(item["tid"]),
                start_ticks=_optional_int(item["start_ticks"]),
                old_cpus=old,
                role=cast(ThreadRole, role),
            )
        )
    time_s = raw["time"]
    if not isinstance(time_s, (int, float)) or isinstance(time_s, bool):
        raise ValueError("time is not a number")
    cpus = _cpus(raw["cpus"])
    masks = _decode_masks(raw.get("masks"))
    if any(not m.cpus <= cpus for m in masks):
        raise ValueError("a process mask is not within the entry's CPUs")
    return JournalEntry(
        id=_text(raw["id"]),
        time_s=float(time_s),
        pid=_int(raw["pid"]),
        start_ticks=_optional_int(raw["start_ticks"]),
        cpus=cpus,
        state=cast(EntryState, state),
        threads=tuple(threads),
        since_ticks=_optional_int(raw.get("since_ticks")),
        memory=_decode_memory(raw.get("memory")),
        masks=masks,
    )


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected text, found {value!r}")
    return value


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"expected a number, found {value!r}")
    return value


def _optional_int(value: Any) -> int | None:
    return None if value is None else _int(value)


def _cpus(value: Any) -> CpuSet:
    try:
        return parse_cpulist(_text(value))
    except ParseError as exc:
        raise ValueError(str(exc)) from None
