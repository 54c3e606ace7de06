"""Where ``affmon record`` writes: standard output, or a file only its owner can read.

A recording holds the watched processes' command lines (every process's with ``--all``),
which can carry paths and tokens, so a file is created with mode 0600 and never through
a symbolic link. An existing file is kept unless ``--force``; then a new file (0600, in
the same directory) is renamed over it before anything is written, so the old file's
inode is never written to (it may be a hard link to something else) and the path is at
every moment either the old file or the new one. With ``--force``, a FIFO or character
device is written to as it is (``/dev/null``); a directory, block device or socket is
refused. A name ending in ``.gz`` is written gzip-compressed, flushed after every sample
so that what is on disk always reads up to the last whole sample.

Writes go straight to the file descriptor (no Python buffer), so a full disk or a
reader that went away fails at the write that hit it and leaves nothing pending for
the interpreter to flush at exit. A full disk is a ``SourceError``; a closed pipe is a
``BrokenPipeError``, which the CLI ends quietly as ``ps | head`` does.
"""

from __future__ import annotations

import errno
import gzip
import os
import select
import stat
import sys
import tempfile
import time
from collections.abc import Callable

from affmon.core.errors import SourceError

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_EXISTING = os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY


class _Fd:
    """The file descriptor as the binary file ``GzipFile`` writes to: whole writes only."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]
        return len(data)

    def flush(self) -> None:
        pass


class RecordOutput:
    def __init__(self, fd: int, label: str, *, gz: bool, owned: bool) -> None:
        self.label = label
        self._fd = _Fd(fd)
        self._owned = owned  # closed by us (not standard output)
        mode = os.fstat(fd).st_mode
        self._pipe = stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
        self._gz: gzip.GzipFile | None = None
        if gz:  # GzipFile writes its header at once: that write can fail too
            self._io(self._start_gzip)

    def _start_gzip(self) -> None:
        self._gz = gzip.GzipFile(fileobj=self._fd, mode="wb")

    def write(self, text: str) -> None:
        data = text.encode("utf-8")
        self._io(lambda: self._gz.write(data) if self._gz is not None else self._fd.write(data))

    @property
    def compressed(self) -> bool:
        return self._gz is not None

    def size(self) -> int | None:
        """Bytes in the file so far (compressed, for gzip: what it takes on disk); None on a
        pipe or a terminal, which hold nothing."""
        if self._pipe:
            return None
        try:
            st = os.fstat(self._fd.fd)
        except OSError:
            return None
        return st.st_size if stat.S_ISREG(st.st_mode) else None

    def flush(self) -> None:
        """Push a gzip stream's pending output to the file (a sync point a reader can decode)."""
        if self._gz is not None:
            self._io(self._gz.flush)

    def wait(self, seconds: float) -> None:
        """Sleep ``seconds``; on a pipe, return early with ``BrokenPipeError`` as soon as its
        reader has gone (poll reports POLLERR), not an interval later at the next write."""
        if not self._pipe:
            time.sleep(seconds)
            return
        poller = select.poll()
        poller.register(self._fd.fd, 0)  # no events asked: POLLERR and POLLHUP are always reported
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if any(event & (select.POLLERR | select.POLLHUP) for _, event in poller.poll(left * 1000 + 1)):
                raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

    def close(self, *, quiet: bool = False) -> None:
        """End the gzip stream and close the file; ``quiet`` when another error is already
        on its way out (the file may be what failed)."""
        try:
            if self._gz is not None:
                gz, self._gz = self._gz, None
                self._io(gz.close)
        except (OSError, SourceError):
            if not quiet:
                raise
        finally:
            if self._owned:
                self._owned = False
                os.close(self._fd.fd)

    def _io(self, call: Callable[[], object]) -> None:
        try:
            call()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise SourceError(f"cannot write {self.label}: {exc.strerror or exc}") from None


def open_output(path: str, *, force: bool) -> RecordOutput:
    """Standard output for ``-``; otherwise a new private file, as the module says."""
    if path == "-":
        if sys.stdout is not None:  # None when the shell closed it (>&-)
            sys.stdout.flush()
        try:
            return RecordOutput(1, "to standard output", gz=False, owned=False)
        except OSError as exc:
            raise SourceError(f"cannot write to standard output: {exc.strerror or exc}") from None
    try:
        fd = _open_file(path, force)
    except OSError as exc:
        raise SourceError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        return RecordOutput(fd, path, gz=path.endswith(".gz"), owned=True)
    except BaseException:
        os.close(fd)
        raise


def _open_file(path: str, force: bool) -> int:
    try:
        existing = os.lstat(path)
    except FileNotFoundError:
        return _create(path)
    mode = existing.st_mode
    if stat.S_ISLNK(mode):
        raise SourceError(f"cannot write {path}: it is a symbolic link (affmon does not write through one)")
    if stat.S_ISDIR(mode):
        raise SourceError(f"cannot write {path}: it is a directory")
    if not force:
        raise SourceError(f"{path} exists; affmon record --force replaces it")
    if stat.S_ISREG(mode):
        return _replace(path)
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        fd = os.open(path, _OPEN_EXISTING)
        if stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for a file since: never write into one in place
            os.close(fd)
            raise SourceError(f"cannot write {path}: it changed while being opened")
        return fd
    raise SourceError(f"cannot write {path}: not a file, FIFO or character device")


def _create(path: str) -> int:
    try:
        return os.open(path, _CREATE, 0o600)
    except FileExistsError:  # created since the lstat above
        raise SourceError(f"{path} exists; affmon record --force replaces it") from None


def _replace(path: str) -> int:
    directory, base = os.path.split(path)
    fd, temp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=directory or ".")  # 0600, O_EXCL
    try:
        os.replace(temp, path)
    except BaseException:
        os.close(fd)
        os.unlink(temp)
        raise
    return fd
