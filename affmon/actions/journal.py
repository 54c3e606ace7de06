"""The write-ahead journal of affinity changes: what each thread's mask was before affmon
touched it, so that a pin can be undone exactly, even after affmon crashed mid-way.

One JSON object per line (``journal.jsonl``), oldest first. Every change rewrites the
whole file atomically (temporary file in the same directory, ``fsync``, ``rename``,
``fsync`` of the directory), mode 0600, under an ``flock`` on a side file so two affmon
processes never lose each other's entries; a pin or an undo holds that lock from its
first check to its last write (``Journal.locked``), so two of them never interleave. A
journal that cannot be parsed raises ``JournalError`` (one line naming the file and the
line), never a traceback, and is never rewritten: the user decides what to do with it.

The journal decides what root does when root runs ``undo``, so it is trusted only where
no other user could have written it: its directory and file must belong to the user who
runs affmon, every directory above them to that user or root and not be writable by
others (the sticky ``/tmp`` aside), and no symbolic link is followed at the directory,
the lock or the file (``sudo -E`` hands root a user's ``HOME``: a link planted there
would make root write elsewhere). Anything else is refused in one line.

Entry states: ``pending`` (written before the first change; a crash leaves it so, and
undo restores from it), ``applied``, ``rolled-back`` (the pin failed and was put back),
``undone``, and ``expired`` (every process it touched has exited: nothing is left to
undo). The file stays as small as what is in force: finished entries keep no thread
records and only the newest ``KEEP_FINISHED`` of them are kept.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pwd
import secrets
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, cast

from affmon.core.cpuset import CpuSet, format_cpulist, parse_cpulist
from affmon.core.errors import AffmonError, ParseError

EntryState = Literal["pending", "applied", "rolled-back", "undone", "expired"]
ThreadRole = Literal["pin", "isolate"]
ProcessKey = tuple[int, int]  # (PID, start time in clock ticks since boot): a process, not a recycled number
_STATES: frozenset[str] = frozenset({"pending", "applied", "rolled-back", "undone", "expired"})
_ROLES: frozenset[str] = frozenset({"pin", "isolate"})
FINISHED: frozenset[str] = frozenset({"rolled-back", "undone", "expired"})
FORMAT_VERSION = 1
KEEP_FINISHED = 20  # finished entries kept, as one-line summaries, for `affmon undo` to name
LOCK_TIMEOUT_S = 10.0


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
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{secrets.token_hex(3)}"


def default_journal_path() -> Path:
    """``$XDG_STATE_HOME/affmon/journal.jsonl``, else ``~/.local/state/affmon/journal.jsonl``."""
    state = os.environ.get("XDG_STATE_HOME")
    base = Path(state) if state and os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "affmon" / "journal.jsonl"


class Journal:
    def __init__(self, path: str | os.PathLike[str] | None = None, *, lock_timeout_s: float = LOCK_TIMEOUT_S) -> None:
        self.path = Path(path) if path is not None else default_journal_path()
        self.lock_timeout_s = lock_timeout_s
        self._guard = threading.RLock()
        self._depth = 0
        self._dir_fd: int | None = None  # held while locked
        self._lock_fd: int | None = None

    # -- reading ---------------------------------------------------------------

    def entries(self) -> list[JournalEntry]:
        """Every entry, oldest first; none when the file does not exist yet."""
        with self._guard:
            if self._dir_fd is not None:
                return self._read(self._dir_fd)
            dir_fd = self._open_dir(create=False)
            if dir_fd is None:
                return []
            try:
                return self._read(dir_fd)
            finally:
                os.close(dir_fd)

    def get(self, entry_id: str) -> JournalEntry:
        for entry in self.entries():
            if entry.id == entry_id:
                return entry
        raise JournalError(f"no entry {entry_id} in the affmon journal {self.path}")

    def _read(self, dir_fd: int) -> list[JournalEntry]:
        try:
            fd = os.open(self.path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise JournalError(f"cannot read the affmon journal {self.path}: {_reason(exc)}") from None
        try:
            self._check_owned(os.fstat(fd), self.path, regular=True)
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read()
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise JournalError(f"cannot read the affmon journal {self.path}: {_reason(exc)}") from None
        finally:
            os.close(fd)
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

    # -- writing ---------------------------------------------------------------

    def add(self, entry: JournalEntry) -> None:
        with self.locked():
            entries = self.entries()
            if any(e.id == entry.id for e in entries):
                raise JournalError(f"entry {entry.id} is already in the affmon journal {self.path}")
            self._write([*entries, entry])

    def update(self, entry: JournalEntry) -> None:
        """Replace the entry with the same id, leaving every other entry as it is."""
        with self.locked():
            entries = self.entries()
            if not any(e.id == entry.id for e in entries):
                raise JournalError(f"no entry {entry.id} in the affmon journal {self.path}")
            self._write([entry if e.id == entry.id else e for e in entries])

    def set_state(self, entry_id: str, state: EntryState) -> JournalEntry:
        with self.locked():
            entry = replace(self.get(entry_id), state=state)
            self.update(entry)
            return entry

    def remove(self, entry_id: str) -> None:
        with self.locked():
            entries = self.entries()
            kept = [e for e in entries if e.id != entry_id]
            if len(kept) == len(entries):
                raise JournalError(f"no entry {entry_id} in the affmon journal {self.path}")
            self._write(kept)

    def prepare(self, alive: Callable[[ThreadRecord], bool] | None = None) -> list[JournalEntry]:
        """Inside ``locked``, before anything changes: prove the journal can be written
        (rewrite it whole, compacted; a read-only or full file system fails here, with
        every mask still as it was) and mark ``expired`` every pending or applied entry
        none of whose recorded threads is ``alive`` any more. Returns the entries."""
        with self.locked():
            entries = self.entries()
            if alive is not None:
                entries = [
                    replace(e, state="expired")
                    if e.state in ("pending", "applied") and not any(alive(t) for t in e.threads)
                    else e
                    for e in entries
                ]
            self._write(entries)
            return self.entries()

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the journal's lock (re-entrant within this object): serialises
        read-modify-write cycles, and whole pins and undos, between affmon processes and
        threads. The lock lives on a side file because every write replaces the journal's
        inode. Waits up to ``lock_timeout_s`` for another affmon, then refuses."""
        with self._guard:
            if self._depth == 0:
                self._acquire()
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self._release()

    def _acquire(self) -> None:
        dir_fd = self._open_dir(create=True)
        assert dir_fd is not None
        lock_name = f"{self.path.name}.lock"
        try:
            fd = os.open(lock_name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        except OSError as exc:
            os.close(dir_fd)
            raise JournalError(f"cannot lock the affmon journal {self.path}: {_reason(exc)}") from None
        try:
            self._check_owned(os.fstat(fd), self.path.with_name(lock_name), regular=True)
            deadline = time.monotonic() + self.lock_timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise JournalError(
                            f"another affmon has held the journal {self.path} for {self.lock_timeout_s:g} s"
                            " (a pin or undo in progress): nothing was changed; try again"
                        ) from None
                    time.sleep(0.02)
                except OSError as exc:
                    raise JournalError(f"cannot lock the affmon journal {self.path}: {_reason(exc)}") from None
        except BaseException:
            os.close(fd)
            os.close(dir_fd)
            raise
        self._lock_fd = fd
        self._dir_fd = dir_fd

    def _release(self) -> None:
        for fd in (self._lock_fd, self._dir_fd):
            if fd is not None:
                os.close(fd)  # closing the lock file releases the lock
        self._lock_fd = None
        self._dir_fd = None

    # -- the directory -----------------------------------------------------------

    def _open_dir(self, *, create: bool) -> int | None:
        """The journal's directory, opened without following a link, after checking that no
        other user could have put it or anything above it there. None when it does not
        exist and ``create`` is False."""
        directory = self.path.parent
        _check_ancestors(directory)
        if create:
            try:
                directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            except OSError as exc:
                raise JournalError(
                    f"cannot create the affmon journal's directory {directory}: {_reason(exc)}"
                ) from None
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            if create:
                raise JournalError(f"cannot open the affmon journal's directory {directory}: it vanished") from None
            return None
        except OSError as exc:
            if os.path.islink(directory):
                raise JournalError(
                    f"refusing the affmon journal's directory {directory}: it is a symbolic link"
                ) from None
            raise JournalError(f"cannot open the affmon journal's directory {directory}: {_reason(exc)}") from None
        try:
            info = os.fstat(fd)
            self._check_owned(info, directory, regular=False)
            if info.st_mode & 0o022:
                raise JournalError(
                    f"refusing the affmon journal's directory {directory}: other users may write in it"
                    f" (mode {stat.S_IMODE(info.st_mode):04o}); chmod go-w it"
                )
        except BaseException:
            os.close(fd)
            raise
        return fd

    @staticmethod
    def _check_owned(info: os.stat_result, path: Path, *, regular: bool) -> None:
        me = os.geteuid()
        if info.st_uid != me:
            raise JournalError(
                f"refusing the affmon journal {path}: it belongs to {_user(info.st_uid)}, not to {_user(me)}"
                " who runs affmon (set XDG_STATE_HOME to a directory of your own)"
            )
        if regular and not stat.S_ISREG(info.st_mode):
            raise JournalError(f"refusing the affmon journal {path}: not a regular file")

    def _write(self, entries: list[JournalEntry]) -> None:
        """Replace the file with ``entries``, compacted, through a new file in the held
        directory (never following a link there)."""
        assert self._dir_fd is not None, "writes happen under locked()"
        dir_fd = self._dir_fd
        text = "".join(json.dumps(_encode(e), separators=(",", ":")) + "\n" for e in compact(entries))
        tmp = None
        try:
            for _attempt in range(16):
                name = f".{self.path.name}.{secrets.token_hex(6)}.tmp"
                try:
                    fd = os.open(
                        name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd
                    )
                except FileExistsError:
                    continue
                tmp = name
                break
            else:
                raise OSError(17, "cannot create a temporary file")
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                os.fchmod(out.fileno(), 0o600)
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            tmp = None
            os.fsync(dir_fd)
        except OSError as exc:
            raise JournalError(f"cannot write the affmon journal {self.path}: {_reason(exc)}") from None
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dir_fd)


def compact(entries: list[JournalEntry]) -> list[JournalEntry]:
    """What the file keeps: every entry in force whole; finished ones without their thread
    records (nothing is left to restore from them), and only the newest ``KEEP_FINISHED``."""
    finished = [i for i, e in enumerate(entries) if e.state in FINISHED]
    dropped = set(finished[:-KEEP_FINISHED]) if len(finished) > KEEP_FINISHED else set()
    return [
        replace(e, threads=()) if e.state in FINISHED and e.threads else e
        for i, e in enumerate(entries)
        if i not in dropped
    ]


def _check_ancestors(directory: Path) -> None:
    """Every directory above the journal's, as written and as resolved, must belong to root
    or to the user running affmon and not be writable by others (unless sticky, as /tmp):
    otherwise another user could swap the journal's directory for one of their own."""
    me = os.geteuid()
    paths = [directory.parent]
    with contextlib.suppress(OSError, RuntimeError):
        paths.append(Path(os.path.realpath(directory.parent)))
    for path in paths:
        for ancestor in (path, *path.parents):
            try:
                info = os.lstat(ancestor)
            except FileNotFoundError:
                continue  # created below, by us
            except OSError:
                continue
            if stat.S_ISLNK(info.st_mode):
                if info.st_uid not in (0, me):
                    raise JournalError(
                        f"refusing the affmon journal in {directory}: {ancestor} is a link owned by"
                        f" {_user(info.st_uid)}, another user (set XDG_STATE_HOME to a directory of your own)"
                    )
                continue
            writable = info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX
            if info.st_uid not in (0, me) or writable:
                who = _user(info.st_uid) if info.st_uid not in (0, me) else "other users may write in it"
                raise JournalError(
                    f"refusing the affmon journal in {directory}: {ancestor} is not {_user(me)}'s or root's alone"
                    f" ({who}); set XDG_STATE_HOME to a directory of your own"
                )


class PinnedMasks:
    """``expected_masks`` of the default journal, for the views that watch for drift
    (diagnose, the monitor, the exporter), read again only when the file changed: a view
    calls it every tick, and its cost must not grow with the journal. Empty when there is
    no journal, and when it cannot be read or is not trusted, since a damaged journal
    must not stop them (``affmon undo`` reports it)."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._seen: tuple[int, int, int, int] | None = None
        self._masks: Mapping[ProcessKey, CpuSet] = {}

    def __call__(self) -> Mapping[ProcessKey, CpuSet]:
        try:
            path = self._path or default_journal_path()
            info = os.stat(path, follow_symlinks=False)
        except (OSError, RuntimeError):  # no journal, or no home directory
            self._seen, self._masks = None, {}
            return self._masks
        seen = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        if seen != self._seen:
            try:
                self._masks = expected_masks(Journal(path))
            except (AffmonError, OSError):
                self._masks = {}
            self._seen = seen
        return self._masks


def pinned_masks() -> Mapping[ProcessKey, CpuSet]:
    """One read of the default journal's expected masks (a view that asks every tick keeps
    a ``PinnedMasks`` instead)."""
    return PinnedMasks()()


def expected_masks(journal: Journal) -> dict[ProcessKey, CpuSet]:
    """(PID, start time) -> the CPUs affmon pinned that process to and has not undone (the
    newest applied pin of each process wins), for a rule that reports a pin lost behind
    affmon's back. Keyed by start time too, so a new process that reused a pinned PID is
    never taken for the pinned one.

    Only ``applied`` entries count: a ``pending`` one is a pin that crashed half way (its
    masks are unknown until undone) or one still in progress."""
    expected: dict[ProcessKey, CpuSet] = {}
    for entry in journal.entries():
        if entry.state == "applied":
            for key in entry.pinned_processes():
                expected[key] = entry.cpus
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
        since_ticks=_optional_int(raw.get("since_ticks")),
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


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"UID {uid}"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
