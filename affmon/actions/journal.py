"""The write-ahead journal of affinity changes: what each thread's mask was before affmon
touched it, so that a pin can be undone exactly, even after affmon crashed mid-way.

One JSON object per line (``journal.jsonl``), oldest first. Every change rewrites the
whole file atomically (temporary file in the same directory, ``fsync``, ``rename``,
``fsync`` of the directory), mode 0600, under an ``flock`` on a side file so two affmon
processes never lose each other's entries; a pin or an undo holds that lock from its
first check to its last write (``Journal.locked``), so two of them never interleave. The
one exception is a pin's rounds after its first: each appends one line of records to its
entry, synced before any of their masks changes (``Journal.extend``), and the next
rewrite folds them in; text after the last newline is an append cut short, skipped, since
nothing changed after it. A
temporary file left by a writer killed before its rename is removed by the next write. A
journal that cannot be parsed raises ``JournalError`` (one line naming the file and the
line), never a traceback, and is never rewritten: the user decides what to do with it.

A reader pays for the entries it reads whole, not for the file. Each line is sealed with
a checksum and carries its thread records last (``affmon.actions.journal_records``): a
read checks every line's sum and parses every line's head (``Journal.heads``: the state,
the processes pinned, the masks), and the thread records only of the entries asked for
(``Journal.get``; ``Journal.entries`` reads them all). A rewrite copies the lines it does
not change as they were. While the lock is held the lines read are kept, so the reads
and writes of one pin or undo parse each line once.

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
records and only the newest ``KEEP_FINISHED`` of them are kept, and a pin stacked on a
pin of the same process still in force keeps records only of the threads the pin below
did not leave on one mask (``stacked``), so re-pinning a job adds a line, not a thread
list. The compaction happens under the lock, as each added or changed entry is written.

A pin that places its processes on different parts of its CPUs (``affmon tune``'s split:
the main loop on some cores, the DataLoader workers on the others) is still one entry: the
entry's ``masks`` say which process was finally pinned to which part (``Journal.refine``,
written before the parts are set), so the drift rule expects each process's own part and
undo knows every mask the pin set.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path

from affmon.actions.journal_records import (
    FINISHED,
    IN_FORCE,
    KEEP_FINISHED,
    EntryHead,
    EntryState,
    JournalEntry,
    JournalError,
    ProcessKey,
    ProcessMask,
    ThreadRecord,
    ThreadRole,
    compact,
    decode,
    dropped_finished,
    is_sealed,
    new_entry_id,
    read_head,
    read_more,
    read_threads,
    seal,
    seal_more,
    stacked,
)
from affmon.actions.journal_trust import check_owned, open_private_dir, reason
from affmon.core.errors import AffmonError
from affmon.core.model.cpuset import CpuSet
from affmon.core.rules.base import CutShort, ExpectedPins

__all__ = [
    "FINISHED",
    "KEEP_FINISHED",
    "EntryHead",
    "EntryState",
    "Journal",
    "JournalEntry",
    "JournalError",
    "PinnedMasks",
    "ProcessKey",
    "ProcessMask",
    "ThreadRecord",
    "ThreadRole",
    "compact",
    "default_journal_path",
    "expected_masks",
    "new_entry_id",
    "pinned_masks",
    "stacked",
]

LOCK_TIMEOUT_S = 10.0


def default_journal_path() -> Path:
    """``$XDG_STATE_HOME/affmon/journal.jsonl``, else ``~/.local/state/affmon/journal.jsonl``."""
    state = os.environ.get("XDG_STATE_HOME")
    base = Path(state) if state and os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "affmon" / "journal.jsonl"


class _Line:
    """One line of the file: its head, parsed; its whole entry, parsed when asked for.
    ``text`` is the sealed line as it is on disk, written back unchanged by every rewrite
    that leaves the entry alone; None for an entry added or changed since it was read (or
    read from an unsealed line), which the next write compacts and seals."""

    __slots__ = ("_entry", "head", "number", "text")

    def __init__(self, head: EntryHead, text: str | None, entry: JournalEntry | None, number: int = 0) -> None:
        self.head = head
        self.text = text
        self.number = number  # in the file it was read from; 0 for a new one
        self._entry = entry

    @classmethod
    def new(cls, entry: JournalEntry) -> _Line:
        return cls(entry.head(), None, entry)

    def entry(self, path: Path) -> JournalEntry:
        if self._entry is None:
            assert self.text is not None  # a line without its entry was read from a sealed line
            try:
                threads = read_threads(self.text)
            except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
                raise _corrupt(path, self.number, exc) from None
            head = self.head
            self._entry = JournalEntry(
                id=head.id,
                time_s=head.time_s,
                pid=head.pid,
                start_ticks=head.start_ticks,
                cpus=head.cpus,
                state=head.state,
                threads=threads,
                since_ticks=head.since_ticks,
                memory=head.memory,
                masks=head.masks,
                unlisted=head.unlisted,
                allowed=head.allowed,
            )
        return self._entry

    def add(self, records: tuple[ThreadRecord, ...], path: Path) -> None:
        """Add thread records to the entry (a line ``Journal.extend`` appended): it is
        sealed again, merged, by the next rewrite."""
        entry = self.entry(path)
        self._entry = replace(entry, threads=entry.threads + records)
        self.head = self._entry.head()
        self.text = None


def _corrupt(path: Path, number: int, exc: BaseException) -> JournalError:
    return JournalError(
        f"the affmon journal {path} is corrupt at line {number} ({reason(exc)}); move it aside to continue"
    )


class Journal:
    def __init__(self, path: str | os.PathLike[str] | None = None, *, lock_timeout_s: float = LOCK_TIMEOUT_S) -> None:
        self.path = Path(path) if path is not None else default_journal_path()
        self.lock_timeout_s = lock_timeout_s
        self._guard = threading.RLock()
        self._depth = 0
        self._dir_fd: int | None = None  # held while locked
        self._lock_fd: int | None = None
        self._held: list[_Line] | None = None  # the lines, while locked: no one else writes then
        self._torn = False  # the file read ends in a line an append left unfinished: rewrite, never append

    # -- reading ---------------------------------------------------------------

    def entries(self) -> list[JournalEntry]:
        """Every entry, oldest first, with its thread records; none when the file does not
        exist yet."""
        with self._guard:
            return [line.entry(self.path) for line in self._lines()]

    def heads(self) -> list[EntryHead]:
        """Every entry without its thread records, oldest first: a line's thread records
        are not parsed."""
        with self._guard:
            return [line.head for line in self._lines()]

    def get(self, entry_id: str) -> JournalEntry:
        """The entry ``entry_id`` whole; the other lines' thread records are not parsed."""
        with self._guard:
            return self._find(self._lines(), entry_id)[1].entry(self.path)

    def _find(self, lines: list[_Line], entry_id: str) -> tuple[int, _Line]:
        for i, line in enumerate(lines):
            if line.head.id == entry_id:
                return i, line
        raise JournalError(f"no entry {entry_id} in the affmon journal {self.path}")

    def _lines(self) -> list[_Line]:
        if self._dir_fd is not None:
            if self._held is None:
                self._held = self._read(self._dir_fd)
            return list(self._held)
        dir_fd = open_private_dir(self.path.parent, create=False)
        if dir_fd is None:
            return []
        try:
            return self._read(dir_fd)
        finally:
            os.close(dir_fd)

    def _read(self, dir_fd: int) -> list[_Line]:
        try:
            fd = os.open(self.path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise JournalError(f"cannot read the affmon journal {self.path}: {reason(exc)}") from None
        try:
            check_owned(os.fstat(fd), self.path, regular=True)
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read()
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise JournalError(f"cannot read the affmon journal {self.path}: {reason(exc)}") from None
        finally:
            os.close(fd)
        lines: list[_Line] = []
        texts = text.split("\n")
        # Every rewrite ends with a newline, and so does every append that finished: text
        # after the last one is an append cut short (a pin killed in its write), whose
        # records no change followed (each set waits for its records' fsync).
        tail = texts.pop()
        self._torn = bool(tail.strip())
        for number, line in enumerate(texts, start=1):
            if not line.strip():
                continue
            try:
                self._parse(line, number, lines)
            except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
                # RecursionError: a line of lists nested past what json.loads can descend.
                raise _corrupt(self.path, number, exc) from None
        if self._torn:
            try:
                self._parse(tail, len(texts) + 1, lines)
            except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
                if not is_sealed(tail):  # a line written by hand without its newline
                    raise _corrupt(self.path, len(texts) + 1, exc) from None
        return lines

    def _parse(self, line: str, number: int, lines: list[_Line]) -> None:
        if not is_sealed(line):  # written by hand, or by an affmon that did not seal lines: every field checked
            entry = decode(json.loads(line))
            lines.append(_Line(entry.head(), None, entry, number))
            return
        more = read_more(line)
        if more is None:
            lines.append(_Line(read_head(line), line, None, number))
            return
        entry_id, records = more
        target = next((held for held in lines if held.head.id == entry_id), None)
        if target is None:
            raise ValueError(f"it adds thread records to {entry_id}, no entry above it")
        target.add(records, self.path)

    # -- writing ---------------------------------------------------------------

    def add(self, entry: JournalEntry) -> None:
        with self.locked():
            lines = self._lines()
            if any(line.head.id == entry.id for line in lines):
                raise JournalError(f"entry {entry.id} is already in the affmon journal {self.path}")
            self._store([*lines, _Line.new(entry)])

    def update(self, entry: JournalEntry) -> None:
        """Replace the entry with the same id, leaving every other entry as it is."""
        with self.locked():
            lines = self._lines()
            i, _ = self._find(lines, entry.id)
            lines[i] = _Line.new(entry)
            self._store(lines)

    def extend(self, entry_id: str, records: tuple[ThreadRecord, ...]) -> None:
        """Add ``records`` to the entry ``entry_id`` (a pin's round after its first): one
        line appended and synced, not the file rewritten; the next rewrite merges it. A
        file that ends in an unfinished line is rewritten instead."""
        with self.locked():
            lines = self._lines()
            _, line = self._find(lines, entry_id)
            if self._torn:
                line.add(records, self.path)
                self._store(lines)
                return
            self._append(seal_more(entry_id, records) + "\n")
            line.add(records, self.path)

    def set_state(self, entry_id: str, state: EntryState) -> JournalEntry:
        with self.locked():
            entry = replace(self.get(entry_id), state=state)
            self.update(entry)
            return entry

    def refine(self, entry_id: str, masks: Mapping[ProcessKey, CpuSet]) -> JournalEntry:
        """Record, in the entry in force ``entry_id``, the part of its CPUs each of the given
        pinned processes is about to be pinned to; returns the entry as written. Written
        before the caller sets the parts, so a crash half way leaves an entry whose every
        mask undo recognises."""
        with self.locked():
            entry = self.get(entry_id)
            if entry.state not in ("pending", "applied"):
                raise JournalError(f"entry {entry_id} in the affmon journal {self.path} is {entry.state}, not in force")
            pinned = set(entry.pinned_processes())
            for key, cpus in masks.items():
                if key not in pinned or not cpus or not cpus <= entry.cpus:
                    raise JournalError(
                        f"cannot refine entry {entry_id}: PID {key[0]} is not one of its processes,"
                        " or CPUs outside the entry's were given"
                    )
            kept = tuple(m for m in entry.masks if m.key not in masks)
            added = tuple(ProcessMask(pid, start, frozenset(cpus)) for (pid, start), cpus in masks.items())
            entry = replace(entry, masks=kept + added)
            self.update(entry)
            return entry

    def remove(self, entry_id: str) -> None:
        with self.locked():
            lines = self._lines()
            i, _ = self._find(lines, entry_id)
            del lines[i]
            self._store(lines)

    def prepare(self, alive: Callable[[ThreadRecord], bool] | None = None) -> list[JournalEntry]:
        """Inside ``locked``, before anything changes: prove the journal can be written
        (rewrite it whole, compacted; a read-only or full file system fails here, with
        every mask still as it was) and mark ``expired`` every pending or applied entry
        none of whose recorded threads is ``alive`` any more. Returns the entries."""
        with self.locked():
            return [line.entry(self.path) for line in self._prepare(alive)]

    def prepare_heads(self, alive: Callable[[ThreadRecord], bool] | None = None) -> list[EntryHead]:
        """``prepare``, returning the entries without their thread records: an entry whose
        ``leads`` include a live thread is not parsed further (one that touches no live
        process is, to be sure none of its threads is alive before it expires)."""
        with self.locked():
            return [line.head for line in self._prepare(alive)]

    def _prepare(self, alive: Callable[[ThreadRecord], bool] | None) -> list[_Line]:
        lines = self._lines()
        if alive is not None:
            lines = [
                _Line.new(line.head.bare("expired"))
                if line.head.state in IN_FORCE
                and not any(alive(t) for t in line.head.leads)
                and not any(alive(t) for t in line.entry(self.path).threads)
                else line
                for line in lines
            ]
        return self._store(lines)

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
        dir_fd = open_private_dir(self.path.parent, create=True)
        assert dir_fd is not None
        lock_name = f"{self.path.name}.lock"
        try:
            fd = os.open(lock_name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        except OSError as exc:
            os.close(dir_fd)
            raise JournalError(f"cannot lock the affmon journal {self.path}: {reason(exc)}") from None
        try:
            check_owned(os.fstat(fd), self.path.with_name(lock_name), regular=True)
            deadline = time.monotonic() + self.lock_timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise JournalError(
                            f"another affmon has held the journal {self.path} for {self.lock_timeout_s:g} s"
                            " (a pin or undo in progress); try again"
                        ) from None
                    time.sleep(0.02)
                except OSError as exc:
                    raise JournalError(f"cannot lock the affmon journal {self.path}: {reason(exc)}") from None
        except BaseException:
            os.close(fd)
            os.close(dir_fd)
            raise
        self._lock_fd = fd
        self._dir_fd = dir_fd

    def in_progress(self) -> bool:
        """Whether another affmon holds the lock now (a pin or undo under way): a pending
        entry then may be its work, not one killed half way. Probed with a shared lock
        taken and let go at once (a writer waiting for it retries 20 ms later)."""
        try:
            fd = os.open(self.path.with_name(f"{self.path.name}.lock"), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return False  # no lock file: no affmon has written this journal
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return False
        finally:
            os.close(fd)  # closing it lets go of the lock
        return False

    def _release(self) -> None:
        for fd in (self._lock_fd, self._dir_fd):
            if fd is not None:
                os.close(fd)  # closing the lock file releases the lock
        self._lock_fd = None
        self._dir_fd = None
        self._held = None  # another affmon may write once the lock is gone

    # -- the directory -----------------------------------------------------------

    def _write(self, entries: list[JournalEntry]) -> None:
        """Replace the file with ``entries``, compacted."""
        self._store([_Line.new(e) for e in entries])

    def _store(self, lines: list[_Line]) -> list[_Line]:
        """Replace the file with ``lines``, compacted: the finished entries as ``compact``
        keeps them, and every line added or changed compacted against the pins in force
        above it (``stacked``) and sealed; every other line as it was read. Returns the
        lines written, which are held until the lock is released."""
        dropped = dropped_finished([line.head.state for line in lines])
        kept: list[_Line] = []
        below: set[ProcessKey] = set()
        for i, line in enumerate(lines):
            if i in dropped:
                continue
            head = line.head
            finished = head.state in FINISHED
            if line.text is None or (finished and (head.leads or head.masks or head.unlisted)):
                entry = head.bare() if finished else stacked(line.entry(self.path), below)
                line = _Line(entry.head(), seal(entry), entry)
            if not finished:
                below.update(line.head.pinned_processes())
            kept.append(line)
        self._replace("".join(f"{line.text}\n" for line in kept))
        self._held = kept
        self._torn = False
        return list(kept)

    def _append(self, text: str) -> None:
        assert self._dir_fd is not None, "writes happen under locked()"
        try:
            fd = os.open(self.path.name, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._dir_fd)
        except OSError as exc:
            raise JournalError(f"cannot write the affmon journal {self.path}: {reason(exc)}") from None
        try:
            check_owned(os.fstat(fd), self.path, regular=True)
            data = text.encode()
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        except OSError as exc:
            self._torn = True  # part of the line may be there: the next write rewrites the file
            raise JournalError(f"cannot write the affmon journal {self.path}: {reason(exc)}") from None
        finally:
            os.close(fd)

    def _replace(self, text: str) -> None:
        """Replace the file with ``text`` through a new file in the held directory (never
        following a link there), then remove what killed writers left."""
        assert self._dir_fd is not None, "writes happen under locked()"
        dir_fd = self._dir_fd
        tmp = None
        try:
            for _attempt in range(16):
                name = f"{self._tmp_prefix}{os.urandom(6).hex()}.tmp"  # secrets' source, without its libcrypto
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
            raise JournalError(f"cannot write the affmon journal {self.path}: {reason(exc)}") from None
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dir_fd)
        self._remove_leftovers(dir_fd)

    @property
    def _tmp_prefix(self) -> str:
        return f".{self.path.name}."

    def _remove_leftovers(self, dir_fd: int) -> None:
        """Temporary files of writers killed before their rename (``.journal.jsonl.<12 hex
        digits>.tmp``): under the lock no writer is between its open and its rename, so
        each is a leftover. Never the journal, its lock, or anything named otherwise."""
        prefix = self._tmp_prefix
        try:
            names = os.listdir(dir_fd)
        except OSError:
            return
        for name in names:
            middle = name[len(prefix) : -len(".tmp")]
            if name.startswith(prefix) and name.endswith(".tmp") and len(middle) == 12 and _is_hex(middle):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=dir_fd)


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


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
        self._env: tuple[str | None, str | None] | None = None  # what the default path was built from
        self._default: Path | None = None

    def _journal_path(self) -> Path:
        """The journal's path: built again only when the variables it is made of changed."""
        if self._path is not None:
            return self._path
        env = (os.environ.get("XDG_STATE_HOME"), os.environ.get("HOME"))
        if env != self._env or self._default is None:
            self._default = default_journal_path()
            self._env = env
        return self._default

    def __call__(self) -> Mapping[ProcessKey, CpuSet]:
        try:
            path = self._journal_path()
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
            # A pending entry read while an affmon held the lock is read again next time:
            # that affmon may be killed before it writes again.
            self._seen = None if getattr(self._masks, "unsure", False) else seen
        return self._masks


def pinned_masks() -> Mapping[ProcessKey, CpuSet]:
    """One read of the default journal's expected masks (a view that asks every tick keeps
    a ``PinnedMasks`` instead)."""
    return PinnedMasks()()


def expected_masks(journal: Journal) -> ExpectedPins:
    """(PID, start time) -> the CPUs affmon pinned that process to and has not undone (the
    newest applied pin of each process wins; within a split, the part that process was
    given), for a rule that reports a pin lost behind affmon's back. Keyed by start time
    too, so a new process that reused a pinned PID is never taken for the pinned one.

    Only ``applied`` entries count: a ``pending`` one is a pin or an undo killed half way
    (its masks are unknown until undone) or one still in progress. Those killed half way
    (no affmon holds the lock) are ``cut_short``, for the rule to say `affmon undo` again
    finishes them; while an affmon holds the lock none is, and ``unsure`` is True."""
    expected: dict[ProcessKey, CpuSet] = {}
    pending: dict[ProcessKey, CutShort] = {}
    for entry in journal.heads():  # no thread record is needed
        if entry.state in ("applied", "pending"):
            for key in entry.pinned_processes():
                if entry.state == "applied":  # the newest entry of a process says what to expect
                    expected[key] = entry.cpus_of(key)
                    pending.pop(key, None)
                else:
                    pending[key] = CutShort(entry.cpus_of(key), entry.pid)
                    expected.pop(key, None)
    busy = bool(pending) and journal.in_progress()
    found = ExpectedPins(expected, {} if busy else pending)
    found.unsure = busy
    return found
