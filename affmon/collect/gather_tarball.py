"""A tree gathered by ``hwloc-gather-topology`` (``NAME.tar.bz2``) read as a ``--root``.

``lstopo -i`` reads such an archive by extracting it into a temporary directory and
reading the one directory inside; ``extracted_root`` does the same. The archive may be
bzip2, gzip or xz compressed, or a plain tar (told by its first bytes, not its name).
The directory is new, private to the user (``mkdtemp``) and removed afterwards; the
root is the archive's one top directory (hwloc names it after the machine or the
``--output`` base), or the directory itself when the archive holds several entries.

The archive is data from elsewhere. Its members are written by this module, not by
``tarfile.extractall``, and the whole archive is refused (``SourceError``: one line,
with the ``tar`` command that extracts it for a reader who trusts it) when a member:

* has an absolute path or a ``..`` component, or lies under a symbolic link of the
  archive (writing through the link could leave the directory);
* is a symbolic link whose target is absolute, climbs above the top directory (more
  leading ``..`` than the link is deep), or has a ``..`` after a name (the name may be
  a link, which moves where ``..`` lands); sysfs links are ``../../devices/...``;
* is a hard link, a device, a FIFO, or anything but a directory, a regular file or a
  symbolic link;
* names a path already written (the later one would replace or follow it).

Bounds: at most ``MAX_MEMBERS`` members and ``MAX_BYTES`` bytes of file contents, and
the decompressed stream is cut at ``MAX_STREAM_BYTES`` (a header claiming gigabytes, or
a member that decompresses without end, stops there, not in memory). The gathered trees
in ``tests/fixtures/sysfs`` hold 472 to 11,495 members (about 100 per CPU, 6,389 for 64
CPUs) and at most 0.3 MB of contents; the bounds leave room for 2,000 CPUs gathered
with ``--io``. Modes, owners and times are not kept: files are written 0600 and
directories 0700, which is all a reader of the tree needs.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import posixpath
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import IO, Protocol

from affmon.collect.fs import quoted, shown_path
from affmon.core.errors import SourceError

MAX_MEMBERS = 1 << 18
MAX_BYTES = 256 << 20
# Each member costs a 512-byte header and up to 511 bytes of padding besides its contents.
MAX_STREAM_BYTES = MAX_BYTES + MAX_MEMBERS * 1024
_CHUNK = 1 << 16
# First bytes of each compression, and the tar option that reads it.
_FORMATS: tuple[tuple[bytes, str], ...] = ((b"BZh", "j"), (b"\x1f\x8b", "z"), (b"\xfd7zXZ\x00", "J"))


class _Reader(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class _Refused(Exception):
    """A member the module doc refuses; the message says which and why."""


class _NotTar(Exception):
    """The file is no tar archive at all: there is nothing to extract by hand either."""


class _Bounded(io.RawIOBase):
    """A stream that ends in an error once more than ``limit`` bytes were asked of it."""

    def __init__(self, inner: _Reader, limit: int) -> None:
        self._inner = inner
        self._left = limit

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        wanted = self._left + 1 if size is None or size < 0 else min(size, self._left + 1)
        data = self._inner.read(wanted)
        if len(data) > self._left:
            raise _Refused(f"more than {MAX_STREAM_BYTES >> 20} MiB once decompressed")
        self._left -= len(data)
        return data

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def is_archive(path: str) -> bool:
    """Whether ``--root path`` names a regular file: an archive to extract, not a tree."""
    return os.path.isfile(path)


@contextmanager
def extracted_root(path: str) -> Iterator[str]:
    """The root directory of the archive at ``path``, extracted (module doc); removed
    when the block ends."""
    dest = tempfile.mkdtemp(prefix="affmon-root-")
    try:
        with open_archive(path) as (stream, option):
            try:
                _extract(stream, dest)
            except _NotTar:
                raise SourceError(
                    f"--root {shown_path(path)}: not a tar archive (hwloc-gather-topology writes a .tar.bz2)"
                ) from None
            except _Refused as exc:
                raise SourceError(
                    f"--root {shown_path(path)}: {exc}: not extracted "
                    f"(extract it first if you trust it: tar -x{option}f {shown_path(path)})"
                ) from None
            except (tarfile.TarError, EOFError, OSError, lzma.LZMAError, zlib.error) as exc:
                reason = getattr(exc, "strerror", None) or str(exc) or exc.__class__.__name__
                raise SourceError(
                    f"--root {shown_path(path)}: not a readable tar archive: {quoted(reason, 80)}"
                ) from None
        entries = os.listdir(dest)
        only = os.path.join(dest, entries[0]) if len(entries) == 1 else None
        yield only if only is not None and os.path.isdir(only) and not os.path.islink(only) else dest
    finally:
        shutil.rmtree(dest, ignore_errors=True)


@contextmanager
def open_archive(path: str) -> Iterator[tuple[IO[bytes], str]]:
    """The decompressed, bounded stream of the archive, and ``tar``'s option for it."""
    with ExitStack() as stack:
        try:
            raw = stack.enter_context(open(path, "rb"))
        except OSError as exc:
            reason = exc.strerror or exc.__class__.__name__
            raise SourceError(f"--root {shown_path(path)}: cannot read: {reason}") from None
        head = raw.read(6)
        raw.seek(0)
        option = next((opt for magic, opt in _FORMATS if head.startswith(magic)), "")
        inner: _Reader = raw
        if option == "j":
            inner = stack.enter_context(bz2.BZ2File(raw))
        elif option == "z":
            inner = stack.enter_context(gzip.GzipFile(fileobj=raw))
        elif option == "J":
            inner = stack.enter_context(lzma.LZMAFile(raw))
        yield _Bounded(inner, MAX_STREAM_BYTES), option  # type: ignore[misc]


def _extract(stream: IO[bytes], dest: str) -> None:
    links: set[str] = set()
    written: set[str] = set()
    made: set[str] = set()
    total = 0
    with ExitStack() as stack:
        try:
            tar = stack.enter_context(tarfile.open(fileobj=stream, mode="r|"))
        except tarfile.ReadError:
            raise _NotTar from None
        for count, member in enumerate(tar, start=1):
            if count > MAX_MEMBERS:
                raise _Refused(f"more than {MAX_MEMBERS:,} members")
            parts = _parts(member.name)
            if not parts:
                continue  # "." or "./": the top itself
            name = "/".join(parts)
            shown = quoted(member.name, 80)
            for parent in ("/".join(parts[:k]) for k in range(1, len(parts))):
                if parent in links:
                    raise _Refused(f"member {shown} lies under the symbolic link {quoted(parent, 80)}")
                if parent in written:
                    raise _Refused(f"member {shown} lies under the file {quoted(parent, 80)}")
            if name in written or name in links:
                raise _Refused(f"member {shown} appears twice")
            target = os.path.join(dest, *parts)
            if member.isdir():
                _make_dirs(target, made)
                continue
            _make_dirs(os.path.dirname(target), made)
            if member.issym():
                _check_link(member.linkname, len(parts) - 1, shown)
                os.symlink(member.linkname, target)
                links.add(name)
            elif member.isreg():
                total += member.size
                if total > MAX_BYTES:
                    raise _Refused(f"more than {MAX_BYTES >> 20} MiB of files")
                _write(tar, member, target)
                written.add(name)
            else:
                kind = "a hard link" if member.islnk() else "a device, FIFO or other special file"
                raise _Refused(f"member {shown} is {kind}")


def _make_dirs(path: str, made: set[str]) -> None:
    """``os.makedirs`` once per directory (a tree has thousands of files in a few
    hundred directories)."""
    if path not in made:
        os.makedirs(path, mode=0o700, exist_ok=True)
        made.add(path)


def _parts(name: str) -> list[str]:
    if "\0" in name:
        raise _Refused(f"member {quoted(name, 80)} has a NUL in its path")
    if name.startswith("/"):
        raise _Refused(f"member {quoted(name, 80)} has an absolute path")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise _Refused(f"member {quoted(name, 80)} has a '..' in its path")
    return parts


def _check_link(target: str, depth: int, shown: str) -> None:
    """Refuse a link target that is absolute or may leave the top directory, from a link
    ``depth`` directories below it (module doc)."""
    parts = [part for part in target.split("/") if part not in ("", ".")]
    climbs = 0
    while climbs < len(parts) and parts[climbs] == "..":
        climbs += 1
    if not target or "\0" in target or posixpath.isabs(target) or climbs > depth or ".." in parts[climbs:]:
        raise _Refused(f"member {shown} is a link leading out of the tree ({quoted(target, 80)})")


def _write(tar: tarfile.TarFile, member: tarfile.TarInfo, target: str) -> None:
    """The member's contents into a new file (``O_EXCL | O_NOFOLLOW``: never through a
    link, never over another file)."""
    source = tar.extractfile(member)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as out:
        while source is not None and (chunk := source.read(_CHUNK)):
            out.write(chunk)


__all__ = ["MAX_BYTES", "MAX_MEMBERS", "MAX_STREAM_BYTES", "extracted_root", "is_archive", "open_archive"]
