"""Reading files under an injected root, with races and permissions handled in one place.

Every collector goes through these helpers. A file that vanished (the thread exited),
that we may not read, or that the kernel does not provide gives ``None``: "unknown",
never a made-up value and never an exception.
"""

from __future__ import annotations

import errno
import os

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

_READ_SIZE = 65536


def join(root: str, path: str) -> str:
    """``path`` (absolute, as on the live system) under ``root``."""
    if root in ("", "/"):
        return path if path.startswith("/") else "/" + path
    return os.path.join(root, path.lstrip("/"))


def read_bytes(path: str) -> bytes | None:
    """Whole small file at an already-rooted ``path`` with one open/read/close, or None.

    ``O_NONBLOCK``: a FIFO in a recorded tree would otherwise block the open forever
    (regular, proc and sys files ignore the flag). A path holding a NUL (it came from a
    file's contents) names no file."""
    if "\0" in path:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in UNAVAILABLE:
            return None
        raise
    try:
        chunks = []
        while True:
            chunk = os.read(fd, _READ_SIZE)
            if not chunk:
                break
            chunks.append(chunk)
            if len(chunk) < _READ_SIZE:
                break
        return b"".join(chunks)
    except OSError as exc:
        if exc.errno in UNAVAILABLE:
            return None
        raise
    finally:
        os.close(fd)


def read_text(root: str, path: str) -> str | None:
    """Text of ``path`` under ``root`` (undecodable bytes replaced), or None."""
    data = read_bytes(join(root, path))
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
        return os.listdir(join(root, path))
    except OSError as exc:
        if exc.errno in UNAVAILABLE:
            return []
        raise
