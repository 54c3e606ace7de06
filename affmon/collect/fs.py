"""Reading files under an injected root, with races, permissions and hostile trees handled in one place.

Every collector goes through these helpers. A file that vanished (the thread exited),
that we may not read, or that the kernel does not provide gives ``None``: "unknown",
never a made-up value and never an exception.

Two kinds of root:

* The live root ``/`` (or ``""``): a path is opened as it is, with one open, one read
  (two for a file of 64 KiB or more) and one close. The sampler reads thousands of
  ``/proc`` files per tick, so nothing is added on this path but a size cap.
* A recorded tree (any other root) is data, possibly hostile. Every path is resolved
  inside it, as ``openat2(2)`` does with ``RESOLVE_IN_ROOT``: a symbolic link's
  absolute target starts again at the tree's top, ``..`` never climbs above it, and at
  most 40 links are followed (Linux's own limit; ELOOP beyond). So a tree's links,
  relative (``/sys/bus/pci/devices/*`` -> ``../../../devices/...``) or absolute, stay
  in the tree, and a link to ``/etc/shadow`` names the tree's ``etc/shadow``. Only
  regular files are opened: a device, FIFO or socket in a tree is unknown and is not
  even opened (opening some devices has effects). The file opened is checked to be
  the one resolved (same device and inode), so a tree changed while it is read cannot
  make affmon read a file outside it; at worst, with such a race, a device it was
  swapped for is opened and closed unread.

Python has no ``openat2`` binding; the resolver here costs one ``lstat`` per path
component (and a ``readlink`` per link), plus an ``fstat`` after the open. Measured on
an idle 16-core machine: 12-18 us a file of a recorded sysfs tree against 3 us for a
plain open, so a recorded 64-CPU tree's topology reads in 16 ms instead of 4 ms. The
live root does not pay it.

Any file is read up to ``MAX_FILE_BYTES``; a larger one is unknown. No ``/proc`` or
``/sys`` file the collectors read comes near it (a process's ``cmdline`` is bounded by
the kernel's argument limit, 2 MiB with the default 8 MiB stack).
"""

from __future__ import annotations

import errno
import os
import stat
import weakref

# Errors that mean "this value is not available": gone (ENOENT, ESRCH), not allowed
# (EACCES, EPERM), not a file here (ENOTDIR, EISDIR), or refused by the kernel (EINVAL,
# EIO: some sysfs attributes of absent hardware answer that). In a recorded tree, a
# path built from file contents (a cgroup path, a mount point) can also be too long or
# run into a symbolic link loop: no such file can exist, so the value is unknown too.
UNAVAILABLE = frozenset(
    {
        errno.ELOOP,
        errno.ENAMETOOLONG,
        errno.ENOENT,
        errno.ESRCH,
        errno.EACCES,
        errno.EPERM,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.EINVAL,
        errno.EIO,
        errno.ENODEV,
        errno.ENXIO,
    }
)

MAX_FILE_BYTES = 4 << 20
MAX_LINKS = 40  # symbolic links followed in one path before ELOOP, as Linux does
_PATH_MAX = 4096  # Linux's PATH_MAX: a longer path (from file contents) names no file
_READ_SIZE = 65536
_TREE_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC


def is_live(root: str) -> bool:
    """Whether ``root`` is this machine's own root (paths are opened as they are)."""
    return root in ("", "/")


def join(root: str, path: str) -> str:
    """``path`` (absolute, as on the live system) under ``root``, for messages and the
    live root; a recorded tree's files are opened through ``resolve`` instead."""
    if is_live(root):
        return path if path.startswith("/") else "/" + path
    return os.path.join(root, path.lstrip("/"))


def resolve(root: str, path: str) -> tuple[str, os.stat_result]:
    """The real path of ``path`` inside the tree ``root`` (links resolved inside it) and
    its ``lstat``. Raises ``OSError`` as ``open`` would: ENOENT, ENOTDIR, ELOOP, ...

    ``root`` itself is the user's choice: links in it are followed as they are."""
    if not path or "\0" in path:  # the kernel's answer to an empty path, and to no path
        raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    if len(path) >= _PATH_MAX:
        raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), path)
    top = root.rstrip("/") or "/"
    pending = path.split("/")[::-1]  # components still to walk, next one last
    walked: list[str] = [top]  # the real directories walked down from the top, last one deepest
    here: os.stat_result | None = None  # lstat of walked[-1]; None: a directory known as one
    links = 0
    while pending:
        name = pending.pop()
        if here is not None and not stat.S_ISDIR(here.st_mode):
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
        if name in ("", "."):
            continue
        if name == "..":
            if len(walked) > 1:
                walked.pop()
            here = None  # the parent of a directory is one
            continue
        candidate = f"{walked[-1].rstrip('/')}/{name}"
        found = os.lstat(candidate)
        if stat.S_ISLNK(found.st_mode):
            links += 1
            if links > MAX_LINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
            target = os.readlink(candidate)
            if not target:
                raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), path)
            if target.startswith("/"):
                del walked[1:]
            pending.extend(reversed(target.split("/")))
            here = None  # the link's directory, or the top
            continue
        walked.append(candidate)
        here = found
    if len(walked) == 1:  # the top itself, which may be a link: "top/." opens what it names
        return f"{top.rstrip('/')}/.", os.stat(top)
    return walked[-1], here if here is not None else os.lstat(walked[-1])


def read_bytes(path: str) -> bytes | None:
    """Whole file at a live ``path`` with one open/read/close, or None.

    ``O_NONBLOCK``: a FIFO would otherwise block the open forever (regular, proc and sys
    files ignore the flag). A path holding a NUL (it came from a file's contents) names
    no file. More than ``MAX_FILE_BYTES`` is None."""
    if "\0" in path:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in UNAVAILABLE:
            return None
        raise
    try:
        return _read_fd(fd)
    except OSError as exc:
        if exc.errno in UNAVAILABLE:
            return None
        raise
    finally:
        os.close(fd)


def read_file(root: str, path: str) -> bytes | None:
    """Whole file at ``path`` under ``root``, or None (module doc: what a recorded tree
    may and may not make affmon open)."""
    if is_live(root):
        return read_bytes(join(root, path))
    try:
        real, found = resolve(root, path)
        if not stat.S_ISREG(found.st_mode) or found.st_size > MAX_FILE_BYTES:
            return None
        fd = os.open(real, _TREE_OPEN_FLAGS)
    except OSError as exc:
        if exc.errno in UNAVAILABLE:
            return None
        raise
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (found.st_dev, found.st_ino) or not stat.S_ISREG(opened.st_mode):
            return None  # replaced since it was resolved
        return _read_fd(fd)
    except OSError as exc:
        if exc.errno in UNAVAILABLE:
            return None
        raise
    finally:
        os.close(fd)


def _read_fd(fd: int) -> bytes | None:
    """All of ``fd`` up to ``MAX_FILE_BYTES`` (None beyond). One read for a small file: a
    short read is the end of a proc, sys or regular file."""
    chunk = os.read(fd, _READ_SIZE)
    if len(chunk) < _READ_SIZE:
        return chunk
    chunks = [chunk]
    total = len(chunk)
    while True:
        chunk = os.read(fd, _READ_SIZE)
        if not chunk:
            break
        total += len(chunk)
        if total > MAX_FILE_BYTES:
            return None
        chunks.append(chunk)
        if len(chunk) < _READ_SIZE:
            break
    return b"".join(chunks)


def read_text(root: str, path: str) -> str | None:
    """Text of ``path`` under ``root`` (undecodable bytes replaced), or None."""
    data = read_file(root, path)
    return None if data is None else data.decode("utf-8", "replace")


def read_line(root: str, path: str) -> str | None:
    """First line of a one-value sysfs file, stripped, or None."""
    text = read_text(root, path)
    return None if text is None else text.strip()


def list_dir(root: str, path: str) -> list[str]:
    """Names in a directory under ``root``; empty when it is missing or unreadable."""
    if "\0" in path:
        return []
    try:
        if is_live(root):
            return os.listdir(join(root, path))
        real, found = resolve(root, path)
        if not stat.S_ISDIR(found.st_mode):
            return []
        fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in UNAVAILABLE:
            return []
        raise
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (found.st_dev, found.st_ino):
            return []
        return os.listdir(fd)
    except OSError as exc:
        if exc.errno in UNAVAILABLE:
            return []
        raise
    finally:
        os.close(fd)


def is_dir(root: str, path: str) -> bool:
    """Whether ``path`` under ``root`` is a directory (resolved inside a recorded tree)."""
    if is_live(root):
        return os.path.isdir(join(root, path))
    try:
        return stat.S_ISDIR(resolve(root, path)[1].st_mode)
    except OSError:
        return False


def quoted(text: str, limit: int = 40) -> str:
    """``text`` from a file, for an error message: at most ``limit`` characters of it,
    control and other unprintable characters escaped (``repr``), "..." when cut."""
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def clipped(message: str, limit: int = 160) -> str:
    """A parser's message (which quotes file text with ``repr``) cut to ``limit``
    characters, for wrapping in another one."""
    return message if len(message) <= limit else message[: limit - 3] + "..."


def shown_path(path: str) -> str:
    """A path for a message: as it is when printable, else escaped (names of files in a
    recorded tree may hold terminal escapes)."""
    return path if path.isprintable() else repr(path)


class KeptFile:
    """A live ``/proc`` file read many times a second (a thread's ``syscall``, a process's
    ``mem``): opened once, then read again with ``pread`` at the offset wanted, one system
    call a read instead of three. The open file stays the task's it was opened for: once
    that task exits a read fails or comes back empty, even if another task takes its
    number. ``fd`` opens it at the first call and raises what the open raised; ``close``
    closes it, and a later ``fd`` opens the path again. An object that is collected closes
    its file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = -1
        self._closer: weakref.finalize[[int], KeptFile] | None = None

    def fd(self) -> int:
        if self._closer is None:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            self._fd, self._closer = fd, weakref.finalize(self, os.close, fd)
        return self._fd

    def read(self, size: int, offset: int = 0) -> bytes | None:
        """Up to ``size`` bytes at ``offset``; ``None`` when the file is unavailable (the
        task gone, not permitted: ``UNAVAILABLE``). Other errors raise."""
        try:
            return os.pread(self.fd(), size, offset)
        except OSError as exc:
            if exc.errno in UNAVAILABLE:
                return None
            raise

    def close(self) -> None:
        if self._closer is not None:
            self._closer()
            self._closer, self._fd = None, -1
