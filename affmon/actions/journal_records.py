"""What the journal holds: one entry per pin, each thread's mask before affmon changed it,
the CPUs each process was finally pinned to when that is not the entry's whole set (a
split: main loop and workers on separate cores), a migration of the pinned process's
memory when one was asked for, and the JSON line each is written as. Pure values;
``affmon.actions.journal`` reads and writes them.

A pin stacked on a pin in force (the same process, pinned again) does not record again
the threads still on the mask the pin below left them: its entry names that mask once per
process (``unlisted``) and keeps a record only for the threads that differ, the main
thread, and any thread started since the pin began (``stacked``). Undo gives every thread
of that process that started before the pin and has no record the ``unlisted`` mask: the
one it had, as a record would have said.

A line is sealed: ``{"sum":"<crc32 of the rest>",`` then the entry's fields, its
``leads`` (one thread record per process: enough to say which processes it pinned and
whether any is alive) and, last, ``threads``. A reader checks the sum and parses the head
alone (``read_head``); the thread records are parsed only for an entry that needs them
(``read_threads``). A line without a sum (written by hand, or by an affmon that did not
seal its lines) is parsed whole and checked field by field. A sealed line whose first
field is ``more`` adds thread records to the entry above it (``seal_more``: a pin's later
round, appended).
"""

from __future__ import annotations

import json
import os
import time
import zlib
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from affmon.core.errors import AffmonError, ParseError
from affmon.core.model.cpuset import CpuSet, format_cpulist, parse_cpulist

MemoryState = Literal["pending", "moved", "failed"]
EntryState = Literal["pending", "applied", "rolled-back", "undone", "expired"]
ThreadRole = Literal["pin", "isolate"]
ProcessKey = tuple[int, int]  # (PID, start time in clock ticks since boot): a process, not a recycled number
_STATES: frozenset[str] = frozenset({"pending", "applied", "rolled-back", "undone", "expired"})
_ROLES: frozenset[str] = frozenset({"pin", "isolate"})
_MEMORY_STATES: frozenset[str] = frozenset({"pending", "moved", "failed"})
FINISHED: frozenset[str] = frozenset({"rolled-back", "undone", "expired"})
IN_FORCE: frozenset[str] = frozenset({"pending", "applied"})
FORMAT_VERSION = 1
# An entry with ``unlisted`` threads: an affmon that predates them would undo only the
# threads listed, so it finds a version it refuses rather than an entry it misreads.
STACKED_VERSION = 2
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
    """A process (``pid``, ``start_ticks``) and a mask. In an entry's ``masks``: the CPUs
    the process was finally pinned to, a part of the entry's ``cpus`` (a split places the
    main loop on some of them and the workers on the others, inside one entry, so that one
    undo takes the whole placement back). In ``unlisted``: the mask its threads without a
    record had before the pin."""

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


class _Pinned:
    """What an entry says about the processes it pinned, from the records that name them:
    every record (``JournalEntry``) or one per process (``EntryHead``), which say the same."""

    pid: int
    start_ticks: int | None
    cpus: CpuSet
    masks: tuple[ProcessMask, ...]

    def _named(self) -> tuple[ThreadRecord, ...]:
        raise NotImplementedError

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
        return tuple(dict.fromkeys(t.pid for t in self._named() if t.role == "pin")) or (self.pid,)

    def isolated_processes(self) -> tuple[ProcessKey, ...]:
        """The processes this entry moved aside (``--isolate``) whose main thread it
        recorded: their narrow mask is affmon's, not a decision of theirs."""
        return tuple(
            (t.pid, t.start_ticks)
            for t in self._named()
            if t.role == "isolate" and t.tid == t.pid and t.start_ticks is not None
        )

    def pinned_processes(self) -> tuple[ProcessKey, ...]:
        """The pinned processes with their start times (from the main thread's record, or
        the entry's own for the target); a process whose start is unknown is left out,
        since nothing could tell it from a later process with the same PID."""
        starts: dict[int, int | None] = {}
        for t in self._named():
            if t.role == "pin" and t.tid == t.pid:
                starts.setdefault(t.tid, t.start_ticks)
        if self.start_ticks is not None:
            starts.setdefault(self.pid, self.start_ticks)
        found = []
        for pid in self.pinned_pids:
            start = starts.get(pid)
            if start is not None:
                found.append((pid, start))
        return tuple(found)


@dataclass(frozen=True)
class EntryHead(_Pinned):
    """An entry without its thread records: what a reader needs to choose the entries it
    reads whole. ``leads``: one record of each process the entry has records of (its main
    thread's when there is one), enough for ``pinned_processes`` and to tell that the entry
    still touches a live process."""

    id: str
    time_s: float
    pid: int
    start_ticks: int | None
    cpus: CpuSet
    state: EntryState
    since_ticks: int | None
    memory: MemoryRecord | None
    masks: tuple[ProcessMask, ...]
    unlisted: tuple[ProcessMask, ...]
    leads: tuple[ThreadRecord, ...]
    allowed: CpuSet | None = None

    def _named(self) -> tuple[ThreadRecord, ...]:
        return self.leads

    def bare(self, state: EntryState | None = None) -> JournalEntry:
        """The entry as a finished one is kept: no thread records, refinements or unlisted
        masks (nothing is left to restore or expect from them)."""
        return JournalEntry(
            id=self.id,
            time_s=self.time_s,
            pid=self.pid,
            start_ticks=self.start_ticks,
            cpus=self.cpus,
            state=state or self.state,
            since_ticks=self.since_ticks,
            memory=self.memory,
            allowed=self.allowed,
        )


@dataclass(frozen=True)
class JournalEntry(_Pinned):
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
    # A stacked pin's processes whose threads are not all in ``threads`` (module doc): every
    # thread of one that started before ``since_ticks`` and has no record had this mask.
    unlisted: tuple[ProcessMask, ...] = field(default=())
    # What the pinned process's cpuset allowed when the pin began, where that is not all of
    # ``cpus`` (None otherwise): the kernel ran its threads on the part of ``cpus`` inside
    # it and keeps ``cpus`` as their request, which undo replaces with the old masks.
    allowed: CpuSet | None = None

    def _named(self) -> tuple[ThreadRecord, ...]:
        return self.threads

    def head(self) -> EntryHead:
        return EntryHead(
            id=self.id,
            time_s=self.time_s,
            pid=self.pid,
            start_ticks=self.start_ticks,
            cpus=self.cpus,
            state=self.state,
            since_ticks=self.since_ticks,
            memory=self.memory,
            masks=self.masks,
            unlisted=self.unlisted,
            leads=leads_of(self.threads),
            allowed=self.allowed,
        )


def leads_of(threads: Iterable[ThreadRecord]) -> tuple[ThreadRecord, ...]:
    """One record per (process, role), in the order the processes first appear: the main
    thread's when recorded, else the first."""
    chosen: dict[tuple[int, str], ThreadRecord] = {}
    for t in threads:
        key = (t.pid, t.role)
        if key not in chosen or (t.tid == t.pid and chosen[key].tid != t.pid):
            chosen[key] = t
    return tuple(chosen.values())


def new_entry_id() -> str:
    # os.urandom is what secrets.token_hex reads; importing secrets loads OpenSSL's
    # libcrypto (through hmac and hashlib): 3.5 MiB of the monitor's memory for nothing.
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{os.urandom(3).hex()}"


def dropped_finished(states: Sequence[str]) -> set[int]:
    """The positions of the finished entries beyond the newest ``KEEP_FINISHED``."""
    finished = [i for i, state in enumerate(states) if state in FINISHED]
    return set(finished[:-KEEP_FINISHED]) if len(finished) > KEEP_FINISHED else set()


def compact(entries: list[JournalEntry]) -> list[JournalEntry]:
    """What the file keeps: every entry in force, each stacked pin without the records of
    threads the pin below left as it found them (``stacked``); finished ones without their
    thread records and refinements (nothing is left to restore or expect from them), and
    only the newest ``KEEP_FINISHED``."""
    dropped = dropped_finished([e.state for e in entries])
    kept: list[JournalEntry] = []
    below: set[ProcessKey] = set()
    for i, e in enumerate(entries):
        if i in dropped:
            continue
        if e.state in FINISHED:
            kept.append(e.head().bare() if e.threads or e.masks or e.unlisted else e)
            continue
        e = stacked(e, below)
        below.update(e.pinned_processes())
        kept.append(e)
    return kept


def stacked(entry: JournalEntry, below: Collection[ProcessKey]) -> JournalEntry:
    """``entry`` without the records it need not keep, for each process it pinned that an
    entry in force below it pinned too (``below``): the records of threads that started
    before the pin with the mask most of them had, which ``unlisted`` names once. Kept: the
    main thread's record (undo gives the process's new tasks its old mask), every record
    with another mask, and every record of a thread started since the pin began or whose
    start is unknown (nothing could tell it from a later thread). An entry without
    ``since_ticks``, and a process already in ``unlisted``, are left as they are."""
    since = entry.since_ticks
    if since is None or entry.state in FINISHED:
        return entry
    done = {m.pid for m in entry.unlisted}
    starts: dict[int, int] = {}
    for t in entry.threads:
        main = t.role == "pin" and t.tid == t.pid and t.start_ticks is not None
        if main and t.pid not in done and (t.pid, t.start_ticks) in below:
            starts.setdefault(t.pid, cast(int, t.start_ticks))
    if not starts:
        return entry

    def implied(t: ThreadRecord) -> bool:
        return (
            t.role == "pin"
            and t.pid in starts
            and t.tid != t.pid
            and t.start_ticks is not None
            and t.start_ticks < since
        )

    usual: dict[int, CpuSet] = {}
    for (pid, old), _count in Counter((t.pid, t.old_cpus) for t in entry.threads if implied(t)).most_common():
        usual.setdefault(pid, old)
    if not usual:
        return entry
    threads = tuple(t for t in entry.threads if not (implied(t) and usual[t.pid] == t.old_cpus))
    unlisted = entry.unlisted + tuple(ProcessMask(pid, starts[pid], old) for pid, old in usual.items())
    return replace(entry, threads=threads, unlisted=unlisted)


# -- encoding ---------------------------------------------------------------------


def encode(entry: JournalEntry) -> dict[str, Any]:
    """The entry's JSON object; ``memory`` only when a migration was asked for, ``masks``
    only for a split, ``unlisted`` only for a stacked pin and ``allowed`` only for a pin
    its cpuset narrowed, so every other entry keeps the shape it always had."""
    spelled: dict[CpuSet, str] = {}  # a job's threads mostly share a few masks
    data = {
        "version": STACKED_VERSION if entry.unlisted else FORMAT_VERSION,
        "id": entry.id,
        "time": entry.time_s,
        "pid": entry.pid,
        "start_ticks": entry.start_ticks,
        "cpus": format_cpulist(entry.cpus),
        "state": entry.state,
        "since_ticks": entry.since_ticks,
        "threads": _encode_records(entry.threads, spelled),
    }
    if entry.memory is not None:
        data["memory"] = _encode_memory(entry.memory)
    if entry.masks:
        data["masks"] = [
            {"pid": m.pid, "start_ticks": m.start_ticks, "cpus": format_cpulist(m.cpus)} for m in entry.masks
        ]
    if entry.allowed is not None:
        data["allowed"] = format_cpulist(entry.allowed)
    if entry.unlisted:
        data["unlisted"] = [
            {"pid": m.pid, "start_ticks": m.start_ticks, "old": format_cpulist(m.cpus)} for m in entry.unlisted
        ]
    return data


def _encode_records(records: Iterable[ThreadRecord], spelled: dict[CpuSet, str]) -> list[dict[str, Any]]:
    found = []
    for t in records:
        old = spelled.get(t.old_cpus)
        if old is None:
            old = spelled[t.old_cpus] = format_cpulist(t.old_cpus)
        found.append({"pid": t.pid, "tid": t.tid, "start_ticks": t.start_ticks, "old": old, "role": t.role})
    return found


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


def _decode_masks(raw: Any, name: str) -> tuple[ProcessMask, ...]:
    """The optional ``masks`` or ``unlisted`` list (absent in entries written before they
    existed), each item's mask under ``name``."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(m, dict) for m in raw):
        raise ValueError("masks is not a list of JSON objects")
    found = []
    for item in raw:
        cpus = _cpus(item[name])
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
    """The entry of a JSON object, every field checked (ValueError, TypeError or KeyError
    for one that is not what affmon writes)."""
    head = decode_head(raw, leads=False)
    return JournalEntry(
        id=head.id,
        time_s=head.time_s,
        pid=head.pid,
        start_ticks=head.start_ticks,
        cpus=head.cpus,
        state=head.state,
        threads=decode_records(raw["threads"]),
        since_ticks=head.since_ticks,
        memory=head.memory,
        masks=head.masks,
        unlisted=head.unlisted,
        allowed=head.allowed,
    )


def decode_head(raw: Any, *, leads: bool = True) -> EntryHead:
    """Every field but the thread records; ``leads`` from the sealed line's own list, or
    none (``decode`` then takes them from the records)."""
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    if raw.get("version") not in (FORMAT_VERSION, STACKED_VERSION):
        raise ValueError(f"unknown version {raw.get('version')!r}")
    state = _text(raw["state"])
    if state not in _STATES:
        raise ValueError(f"unknown state {state!r}")
    time_s = raw["time"]
    if not isinstance(time_s, (int, float)) or isinstance(time_s, bool):
        raise ValueError("time is not a number")
    cpus = _cpus(raw["cpus"])
    masks = _decode_masks(raw.get("masks"), "cpus")
    if any(not m.cpus <= cpus for m in masks):
        raise ValueError("a process mask is not within the entry's CPUs")
    return EntryHead(
        id=_text(raw["id"]),
        time_s=float(time_s),
        pid=_int(raw["pid"]),
        start_ticks=_optional_int(raw["start_ticks"]),
        cpus=cpus,
        state=cast(EntryState, state),
        since_ticks=_optional_int(raw.get("since_ticks")),
        memory=_decode_memory(raw.get("memory")),
        masks=masks,
        unlisted=_decode_masks(raw.get("unlisted"), "old"),
        leads=decode_records(raw["leads"]) if leads else (),
        allowed=None if raw.get("allowed") is None else _cpus(raw["allowed"]),
    )


def decode_records(raw: Any) -> tuple[ThreadRecord, ...]:
    """A list of thread records. A job's threads mostly share a few masks: each spelling is
    parsed once."""
    if not isinstance(raw, list):
        raise ValueError("threads is not a list")
    parsed: dict[str, CpuSet] = {}
    records = []
    for item in raw:
        role = _text(item["role"])
        if role not in _ROLES:
            raise ValueError(f"unknown role {role!r}")
        spelling = _text(item["old"])
        old = parsed.get(spelling)
        if old is None:
            old = parsed[spelling] = _cpus(spelling)
        records.append(
            ThreadRecord(
                pid=_int(item["pid"]),
                tid=_int(item["tid"]),
                start_ticks=_optional_int(item["start_ticks"]),
                old_cpus=old,
                role=cast(ThreadRole, role),
            )
        )
    return tuple(records)


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


# -- the line ---------------------------------------------------------------------

_SEAL = '{"sum":"'  # then 8 hex digits and '",', then the rest of the object
_REST_AT = len(_SEAL) + 10
_THREADS = ',"threads":'  # the last key of a sealed line; a string can hold no bare `,"`
_HEX = frozenset("0123456789abcdef")


def seal(entry: JournalEntry) -> str:
    """The entry's line: its JSON object with its ``leads`` before ``threads``, which comes
    last, and a CRC-32 of the rest of the line first."""
    data = encode(entry)
    threads = data.pop("threads")
    data["leads"] = _encode_records(leads_of(entry.threads), {})
    data["threads"] = threads
    rest = json.dumps(data, separators=(",", ":"))[1:]
    return f'{_SEAL}{zlib.crc32(rest.encode()):08x}",{rest}'


def is_sealed(line: str) -> bool:
    return line.startswith(_SEAL)


def _checked(line: str) -> str:
    """The rest of a sealed line after its sum, once the sum matches."""
    digits, rest = line[len(_SEAL) : _REST_AT - 2], line[_REST_AT:]
    if len(digits) != 8 or not _HEX.issuperset(digits) or line[_REST_AT - 2 : _REST_AT] != '",':
        raise ValueError("its checksum is not 8 hex digits")
    if int(digits, 16) != zlib.crc32(rest.encode()):
        raise ValueError("it does not match its checksum: changed or cut short since affmon wrote it")
    return rest


_MORE = '"more":'  # the first key of a line that adds thread records to an entry above it


def seal_more(entry_id: str, records: Iterable[ThreadRecord]) -> str:
    """A line that adds ``records`` to the entry ``entry_id`` written above it: what a pin
    appends for each round after its first, instead of rewriting the file."""
    rest = json.dumps({"more": entry_id, "threads": _encode_records(records, {})}, separators=(",", ":"))[1:]
    return f'{_SEAL}{zlib.crc32(rest.encode()):08x}",{rest}'


def read_more(line: str) -> tuple[str, tuple[ThreadRecord, ...]] | None:
    """(the entry's id, the records it adds) of a line ``seal_more`` wrote; None for an
    entry's own line. ValueError for a line changed or cut short."""
    if not line[_REST_AT:].startswith(_MORE):
        return None
    raw = json.loads("{" + _checked(line))
    if not isinstance(raw, dict) or set(raw) != {"more", "threads"}:
        raise ValueError("a line adding thread records has other fields")
    return _text(raw["more"]), decode_records(raw["threads"])


def read_head(line: str) -> EntryHead:
    """The head of a sealed line, once its sum matches: the thread records are not parsed
    (a JSON parse of the few fields before them). ValueError for a line changed or cut
    short since it was written."""
    rest = _checked(line)
    cut = rest.find(_THREADS)
    if cut < 0 or not rest.endswith("]}"):
        raise ValueError("its thread records are not its last field")
    return decode_head(json.loads("{" + rest[:cut] + "}"))


def read_threads(line: str) -> tuple[ThreadRecord, ...]:
    """The thread records of a sealed line whose head was read (``read_head``)."""
    rest = line[_REST_AT:]
    return decode_records(json.loads(rest[rest.find(_THREADS) + len(_THREADS) : -1]))
