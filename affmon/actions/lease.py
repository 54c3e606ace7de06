"""A tune's lease on its job: while ``affmon tune`` (or ``T`` in the monitor) tries
placements on a job, no other affmon, of any user, pins that job or tunes it too.

A lease is a file in a directory every user's affmon sees: the first of ``/run/lock``,
``/dev/shm`` and ``/tmp`` that is a real directory (not a link), owned by root, writable by
all and sticky, so that no user can remove or replace another's file
(``AFFMON_LEASE_DIR`` names another, for tests; it must be owned by root or the user and
be sticky where others may write it). Each holder creates its own file,
``affmon-tune.<job pid>.<job start>.<holder pid>``, with ``O_EXCL | O_NOFOLLOW``, holds an
exclusive ``flock`` on it for the length of the tune, and removes it at the end. The kernel
drops the lock when the holder dies, however it dies.

A lease counts only where its file is owned by root or by the job's owner, the only users
who can change the job's masks: a file another user made cannot hold anyone off. A lease
is *held* when its lock is (another affmon's shared ``flock`` on it fails); a file whose
lock is free is *stale*: its tune was killed (``SIGKILL``) before it could put the masks
back, and ``stale`` names it so the user can run ``affmon undo``. Two tunes started at the
same moment both see the other's file once theirs is made: the later file (by its holder's
start time, then its PID) gives way.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from affmon.actions.journal_trust import user_name
from affmon.core.errors import AffmonError

LEASE_DIRS = ("/run/lock", "/dev/shm", "/tmp")
PREFIX = "affmon-tune"
MAX_LEASE_BYTES = 4096
JobKey = tuple[int, int]  # (PID, start ticks)


class LeaseHeld(AffmonError):
    """The job is being tuned by another affmon; ``holder`` says which."""

    def __init__(self, message: str, holder: Holder) -> None:
        super().__init__(message)
        self.holder = holder


@dataclass(frozen=True)
class Holder:
    """Who holds (or held) a lease: the affmon process and its user, since when."""

    pid: int
    start_ticks: int | None
    uid: int
    since: float
    path: Path

    def sentence(self, job_pid: int) -> str:
        when = time.strftime("%H:%M:%S", time.localtime(self.since))
        return f"PID {job_pid} is being tuned by affmon PID {self.pid} of user {user_name(self.uid)} since {when}"


def lease_dir() -> Path | None:
    """The directory leases live in; None when none is fit (then no lease is taken)."""
    wanted = os.environ.get("AFFMON_LEASE_DIR")
    for name in (wanted,) if wanted else LEASE_DIRS:
        try:
            info = os.lstat(name)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode):
            continue
        if info.st_uid not in (0, os.geteuid()):
            continue
        shared = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if shared and not info.st_mode & stat.S_ISVTX:
            continue  # others may write there and remove each other's files
        return Path(name)
    return None


def _prefix(job: JobKey) -> str:
    return f"{PREFIX}.{job[0]}.{job[1]}."


def _read_holder(fd: int, path: Path, uid: int) -> Holder | None:
    try:
        data = os.pread(fd, MAX_LEASE_BYTES, 0)
        found = json.loads(data.decode("utf-8"))
        return Holder(int(found["pid"]), found.get("start"), uid, float(found["since"]), path)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _locked_by_someone(fd: int) -> bool:
    """Whether another process holds the file's exclusive lock (a shared lock would fail)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        raise
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


@dataclass(frozen=True)
class Seen:
    """The leases of one job found in the directory: those held now, those left by a tune
    that died (stale)."""

    held: tuple[Holder, ...]
    stale: tuple[Holder, ...]


def leases_of(job: JobKey, job_uid: int | None, directory: Path | None = None, skip: Path | None = None) -> Seen:
    """Every lease file of ``job`` that counts (owned by root or the job's owner)."""
    where = directory if directory is not None else lease_dir()
    if where is None:
        return Seen((), ())
    held: list[Holder] = []
    stale: list[Holder] = []
    try:
        names = sorted(os.listdir(where))
    except OSError:
        return Seen((), ())
    for name in names:
        if not name.startswith(_prefix(job)):
            continue
        path = where / name
        if skip is not None and path == skip:
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            continue  # gone meanwhile, a link, or not ours to read
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_uid not in {0, job_uid}:
                continue  # another user's file: it holds no one off
            holder = _read_holder(fd, path, info.st_uid) or Holder(0, None, info.st_uid, info.st_mtime, path)
            (held if _locked_by_someone(fd) else stale).append(holder)
        finally:
            os.close(fd)
    return Seen(tuple(held), tuple(stale))


def holder_of(job: JobKey, job_uid: int | None) -> Holder | None:
    """The affmon tuning ``job`` now, if any."""
    found = leases_of(job, job_uid)
    return found.held[0] if found.held else None


def stale_note(job_pid: int, stale: tuple[Holder, ...]) -> str | None:
    """One line about a tune of the job that died before putting the masks back."""
    if not stale:
        return None
    s = stale[0]
    when = time.strftime("%H:%M:%S", time.localtime(s.since))
    return (
        f"a tune of PID {job_pid} by affmon PID {s.pid} of user {user_name(s.uid)} (since {when}) ended without "
        f"putting the masks back (killed); `affmon undo {job_pid}` restores them"
    )


class Lease:
    """This affmon's lease on ``job`` (a process owned by ``job_uid``): ``acquire`` takes it
    (``LeaseHeld`` when another affmon holds one), ``release`` gives it back."""

    def __init__(self, job: JobKey, job_uid: int | None, directory: Path | None = None) -> None:
        self.job = job
        self.job_uid = job_uid
        self.directory = directory if directory is not None else lease_dir()
        self.path: Path | None = None
        self._fd: int | None = None
        self.stale: tuple[Holder, ...] = ()  # leases of tunes that died, seen when this one was taken

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        if self._fd is not None or self.directory is None:
            return  # no directory fit for leases: nothing to take (said by lease_dir's absence)
        seen = leases_of(self.job, self.job_uid, self.directory)
        if seen.held:
            raise LeaseHeld(seen.held[0].sentence(self.job[0]), seen.held[0])
        path = self.directory / f"{_prefix(self.job)}{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # an earlier affmon of this PID that died: its file, its number
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        since = time.time()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            me = {"pid": os.getpid(), "start": _start(os.getpid()), "since": since, "job": list(self.job)}
            os.write(fd, json.dumps(me).encode())
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        self._fd, self.path = fd, path
        # Another tune that made its file at the same moment: the later one gives way.
        again = leases_of(self.job, self.job_uid, self.directory, skip=path)
        rivals = [h for h in again.held if (h.since, h.pid) < (since, os.getpid())]
        if rivals:
            self.release()
            raise LeaseHeld(rivals[0].sentence(self.job[0]), rivals[0])
        self.stale = seen.stale

    def release(self) -> None:
        fd, path = self._fd, self.path
        self._fd = self.path = None
        if path is not None:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if fd is not None:
            os.close(fd)  # the lock goes with it

    def __enter__(self) -> Lease:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def wait_released(job: JobKey, job_uid: int | None, timeout_s: float) -> bool:
    """Wait until no affmon holds a lease on ``job``; False after ``timeout_s``."""
    end = time.monotonic() + timeout_s
    while holder_of(job, job_uid) is not None:
        if time.monotonic() >= end:
            return False
        time.sleep(0.1)
    return True


def forget_stale(pid: int) -> int:
    """Remove the stale leases of any job whose PID is ``pid`` that this user may remove
    (``affmon undo PID`` has put its masks back); the number removed."""
    where = lease_dir()
    if where is None:
        return 0
    removed = 0
    try:
        names = os.listdir(where)
    except OSError:
        return 0
    for name in names:
        if not name.startswith(f"{PREFIX}.{pid}."):
            continue
        path = where / name
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode) or _locked_by_someone(fd):
                continue
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed += 1
        finally:
            os.close(fd)
    return removed


def _owner(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _parent(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        return int(text[text.rindex(")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _start(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        return int(text[text.rindex(")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def tuning(pid: int, depth: int = 4) -> tuple[int, Holder | None, tuple[Holder, ...]]:
    """The tune that holds ``pid`` or one of its ancestors (a worker's rank), if any: the
    tuned PID, its holder, and the stale leases of those processes."""
    stale: list[Holder] = []
    up: int | None = pid
    for _ in range(depth):
        if up is None or up <= 1:
            break
        start = _start(up)
        if start is None:
            break
        seen = leases_of((up, start), _owner(up))
        if seen.held:
            return up, seen.held[0], tuple(stale)
        stale += seen.stale
        up = _parent(up)
    return pid, None, tuple(stale)


def end_tune(tuned: int, holder: Holder, timeout_s: float = 30.0) -> None:
    """Ask the affmon that holds the lease to stop (SIGTERM: it puts its trial back and gives
    the lease up) and wait for it; ``AffmonError`` when it cannot be asked or does not end."""
    if holder.pid <= 1 or (holder.start_ticks is not None and _start(holder.pid) != holder.start_ticks):
        raise AffmonError(f"the tune of PID {tuned} could not be ended: its affmon (PID {holder.pid}) is gone")
    try:
        os.kill(holder.pid, 15)
    except PermissionError:
        raise AffmonError(
            f"the tune of PID {tuned} by affmon PID {holder.pid} of user {user_name(holder.uid)} could not be ended: "
            "not permitted (root can)"
        ) from None
    except ProcessLookupError:
        return
    start = _start(tuned)
    if start is None or not wait_released((tuned, start), _owner(tuned), timeout_s):
        raise AffmonError(f"the tune of PID {tuned} by affmon PID {holder.pid} did not end within {timeout_s:.0f} s")
