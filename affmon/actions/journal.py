"""The write-ahead journal of affinity changes: what each thread's mask was before affmon
touched it, so that a pin can be undone exactly, even after affmon crashed mid-way.

One JSON object per line (``journal.jsonl``), oldest first. Every change rewrites the
whole file atomically (temporary file in the same directory, ``fsync``, ``rename``,
``fsync`` of the directory), mode 0600, under an ``flock`` on a side file so two affmon
processes never lose each other's entries. A journal that cannot be parsed raises
``JournalError`` (one line naming the file and the line), never a traceback, and is
never rewritten: the user decides what to do with it.

Entry states: ``pending`` (written before the first change; a crash leaves it so, and
undo restores from it), ``applied``, ``rolled-back`` (the pin failed and was put back)
and ``undone``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, cast

from affmon.core.cpuset import CpuSet, format_cpulist, parse_cpulist
from affmon.core.errors import AffmonError, ParseError

EntryState = Literal["pending", "applied", "rolled-back", "undone"]
ThreadRole = Literal["pin", "isolate"]
_STATES: frozenset[str] = frozenset({"pending", "applied", "rolled-back", "undone"})
_ROLES: frozenset[str] = frozenset({"pin", "isolate"})
FORMAT_VERSION = 1


class JournalError(AffmonError):
    """The journal file is unreadable or corrupt."""


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
class JournalEntry:
    id: str
    time_s: float  # wall-clock time of the pin
    pid: int  # the process asked for (children, if any, appear in threads)
    start_ticks: int | None
    cpus: CpuSet  # the CPUs asked for
    state: EntryState = "pending"
    threads: tuple[ThreadRecord, ...] = field(default=())

    @property
    def pinned_pids(self) -> tuple[int, ...]:
        """The processes this entry pinned (the target and, with children, its workers)."""
        return tuple(dict.fromkeys(t.pid for t in self.threads if t.role == "pin")) or (self.pid,)


def new_entry_id() -> str:
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{secrets.token_hex(3)}"


def default_journal_path() -> Path:
    """``$XDG_STATE_HOME/affmon/journal.jsonl``, else ``~/.local/state/affmon/journal.jsonl``."""
    state = os.environ.get("XDG_STATE_HOME")
    base = Path(state) if state and os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "affmon" / "journal.jsonl"


class Journal:
    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else default_journal_path()

    # -- reading ---------------------------------------------------------------

    def entries(self) -> list[JournalEntry]:
        """Every entry, oldest first; none when the file does not exist yet."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError) as exc:
            raise JournalError(f"cannot read the affmon journal {self.path}: {_reason(exc)}") from None
        entries = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                entries.append(_decode(json.loads(line)))
            except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
                # RecursionError: a line of lists nested past what json.loads can descend.
                raise JournalError(
                    f"the affmon journal {self.path} is corrupt at line {number} ({_reason(exc)});"
                    " move it aside to continue"
                ) from None
        return entries

    def get(self, entry_id: str) -> JournalEntry:
        for entry in self.entries():
            if entry.id == entry_id:
                return entry
        raise JournalError(f"no entry {entry_id} in the affmon journal {self.path}")

    # -- writing ---------------------------------------------------------------

    def add(self, entry: JournalEntry) -> None:
        with self._locked():
            entries = self.entries()
            if any(e.id == entry.id for e in entries):
                raise JournalError(f"entry {entry.id} is already in the affmon journal {self.path}")
            self._write([*entries, entry])

    def update(self, entry: JournalEntry) -> None:
        """Replace the entry with the same id, leaving every other entry as it is."""
        with self._locked():
            entries = self.entries()
            if not any(e.id == entry.id for e in entries):
                raise JournalError(f"no entry {entry.id} in the affmon journal {self.path}")
            self._write([entry if e.id == entry.id else e for e in entries])

    def set_state(self, entry_id: str, state: EntryState) -> JournalEntry:
        entry = replace(self.get(entry_id), state=state)
        self.update(entry)
        return entry

    def remove(self, entry_id: str) -> None:
        with self._locked():
            entries = self.entries()
            kept = [e for e in entries if e.id != entry_id]
            if len(kept) == len(entries):
                raise JournalError(f"no entry {entry_id} in the affmon journal {self.path}")
            self._write(kept)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialise read-modify-write cycles between affmon processes. The lock lives on a
        side file because every write replaces the journal's inode."""
        self._make_dir()
        try:
            fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise JournalError(f"cannot lock the affmon journal {self.path}: {_reason(exc)}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _make_dir(self) -> None:
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise JournalError(
                f"cannot create the affmon journal's directory {self.path.parent}: {_reason(exc)}"
            ) from None

    def _write(self, entries: list[JournalEntry]) -> None:
        text = "".join(json.dumps(_encode(e), separators=(",", ":")) + "\n" for e in entries)
        directory = self.path.parent
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=directory)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                os.fchmod(out.fileno(), 0o600)
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
            tmp = None
            dir_fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise JournalError(f"cannot write the affmon journal {self.path}: {_reason(exc)}") from None
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)


def pinned_masks() -> dict[int, CpuSet]:
    """``expected_masks`` of the default journal, for the views that watch for drift
    (diagnose, the monitor, the exporter): empty when there is none, and when it cannot
    be read, since a damaged journal must not stop them (``affmon undo`` reports it)."""
    try:
        path = default_journal_path()
        return expected_masks(Journal(path)) if path.exists() else {}
    except (AffmonError, OSError, RuntimeError):  # damaged, unreadable, or no home directory
        return {}


def expected_masks(journal: Journal) -> dict[int, CpuSet]:
    """PID -> the CPUs affmon pinned it to and has not undone (the newest applied pin of
    each process wins), for a rule that reports a pin lost behind affmon's back.

    Only ``applied`` entries count: a ``pending`` one is a pin that crashed half way (its
    masks are unknown until undone) or one still in progress. A PID whose process has
    since exited or been reused still appears; the caller, who has the samples, compares
    start times (``JournalEntry.start_ticks``) if it needs to."""
    expected: dict[int, CpuSet] = {}
    for entry in journal.entries():
        if entry.state == "applied":
            for pid in entry.pinned_pids:
                expected[pid] = entry.cpus
    return expected


# -- encoding ---------------------------------------------------------------------


def _encode(entry: JournalEntry) -> dict[str, Any]:
    return {
        "version": FORMAT_VERSION,
        "id": entry.id,
        "time": entry.time_s,
        "pid": entry.pid,
        "start_ticks": entry.start_ticks,
        "cpus": format_cpulist(entry.cpus),
        "state": entry.state,
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


def _decode(raw: Any) -> JournalEntry:
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
    return JournalEntry(
        id=_text(raw["id"]),
        time_s=float(time_s),
        pid=_int(raw["pid"]),
        start_ticks=_optional_int(raw["start_ticks"]),
        cpus=_cpus(raw["cpus"]),
        state=cast(EntryState, state),
        threads=tuple(threads),
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


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
