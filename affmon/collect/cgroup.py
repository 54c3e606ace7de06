"""The cpuset cgroup of a task: which CPUs its cgroup lets it use.

Resolution follows hwloc's ``topology-linux.c`` (``hwloc_find_linux_cgroup_mntpnt``,
``hwloc_read_linux_cgroup_name``, ``hwloc_admin_disable_set_from_cgroup``):

1. Find the hierarchy that carries the cpuset controller in ``/proc/mounts``, first
   usable line wins:

   * ``cgroup2`` whose root ``cgroup.controllers`` lists ``cpuset``; files
     ``cpuset.cpus.effective``;
   * ``cgroup`` (v1) with the ``cpuset`` option; files ``cpuset.effective_cpus`` then
     ``cpuset.cpus`` (with the ``noprefix`` option: ``effective_cpus`` then ``cpus``);
   * ``cpuset`` (the old cpuset filesystem); files ``effective_cpus`` then ``cpus``.

   Only when there is no mount table at all (a recorded tree without ``/proc/mounts``)
   are the standard places tried: ``/sys/fs/cgroup`` (v2), ``/sys/fs/cgroup/cpuset``
   (v1), ``/dev/cpuset`` (cpuset fs). (hwloc tries those first; the mount table is the
   better authority where it exists.)
2. Find the task's path in that hierarchy from ``/proc/<pid>/cgroup``: the v2 line
   ``0::/path`` for a ``cgroup2`` hierarchy, else the v1 line whose controller list
   holds ``cpuset``. When that file is missing or has no such line,
   ``/proc/<pid>/cpuset`` (one line, the path) is used.
3. Read the file under ``<mount point><path>``. In cgroup v2 a cgroup where the cpuset
   controller is not enabled has no ``cpuset.*`` files and inherits its parent's
   effective sets, so the nearest ancestor that has the file is read (up to the mount
   point). In v1 every cgroup of the cpuset hierarchy has the files; no walk.

Unlike hwloc, v1 reads ``effective_cpus`` before ``cpus``: hwloc reads ``cpuset.cpus``
and only removes offline CPUs afterwards, but the kernel applies the effective set to
the tasks, and the two can differ (``hwloc-sysfs__nvidiagpunumanodes``: ``cpus`` 0-175,
``effective_cpus`` 0-87).

Mount points are paths on the live system; they are read under ``root`` like every
other file. Anything unknown (no cgroup, no file, unreadable, a path that leaves the
hierarchy) gives ``None``, never a guess such as the host's CPU list. Malformed content
raises ``ParseError``.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from enum import Enum

from affmon.collect.fs import clipped, list_dir, quoted, read_line, read_text, shown_path
from affmon.core.errors import ParseError
from affmon.core.model.cpuset import CpuSet, parse_cpulist


@dataclass(frozen=True, slots=True)
class Mount:
    """One line of ``/proc/mounts`` (escapes such as ``\\040`` decoded)."""

    device: str
    mountpoint: str
    fstype: str
    options: frozenset[str]


class _Kind(Enum):
    CGROUP2 = "cgroup2"
    CGROUP1 = "cgroup"  # v1 hierarchy with the cpuset controller, files prefixed "cpuset."
    CPUSET = "cpuset"  # old cpuset fs, or a v1 cpuset hierarchy mounted with noprefix


@dataclass(frozen=True, slots=True)
class _Hierarchy:
    kind: _Kind
    mountpoint: str


_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")

# The places hwloc tries before it reads the mount table: (file proving it, kind, mount).
_STANDARD_MOUNTS = (
    ("/sys/fs/cgroup/cpuset.cpus.effective", _Kind.CGROUP2, "/sys/fs/cgroup"),
    ("/sys/fs/cgroup/cpuset/cpuset.cpus", _Kind.CGROUP1, "/sys/fs/cgroup/cpuset"),
    ("/dev/cpuset/cpus", _Kind.CPUSET, "/dev/cpuset"),
)


def _unescape(field: str) -> str:
    """Undo the kernel's octal escapes of space, tab, newline and backslash."""
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mounts(text: str) -> tuple[Mount, ...]:
    r"""Parse the text of ``/proc/mounts`` (fstab format: device, mount point, type,
    options, then two numbers).

    The kernel escapes only space, tab, newline and backslash in a field, so only those
    separate lines and fields: ``splitlines``/``split()`` would also cut a mount point at
    the other characters Python counts as whitespace or line breaks (\x1c-\x1f, \x85,
    \xa0, \u2028, ...), which a path may hold."""
    mounts = []
    for line in text.split("\n"):
        fields = [field for field in re.split("[ \t]", line) if field]
        if not fields:
            continue
        if len(fields) < 4:
            raise ParseError(f"bad /proc/mounts line {quoted(line, 80)}")
        device, mountpoint, fstype, options = fields[:4]
        mounts.append(
            Mount(
                device=_unescape(device),
                mountpoint=_unescape(mountpoint),
                fstype=fstype,
                options=frozenset(_unescape(opt) for opt in options.split(",")),
            )
        )
    return tuple(mounts)


def read_mounts(root: str = "/") -> tuple[Mount, ...]:
    """The mount table seen under ``root`` (``/proc/mounts``, else ``/proc/self/mounts``);
    empty when neither can be read."""
    text = read_text(root, "/proc/mounts")
    if text is None:
        text = read_text(root, "/proc/self/mounts")
    return () if text is None else parse_mounts(text)


def cgroup_cpuset(root: str = "/", pid: int | str = "self", mounts: tuple[Mount, ...] | None = None) -> CpuSet | None:
    """CPUs the cpuset cgroup of ``pid`` allows, or None when unknown."""
    task = _pid_dir(pid)
    hierarchy = _find_hierarchy(root, read_mounts(root) if mounts is None else mounts)
    if hierarchy is None:
        return None
    path = _task_path(root, task, hierarchy.kind)
    if path is None:
        return None
    parts = _path_parts(path)
    if parts is None:
        return None
    if hierarchy.kind is _Kind.CGROUP2:
        return _read_v2(root, hierarchy.mountpoint, parts, "cpuset.cpus.effective")
    prefix = "cpuset." if hierarchy.kind is _Kind.CGROUP1 else ""
    directory = _under(hierarchy.mountpoint, parts)
    for name in (f"{prefix}effective_cpus", f"{prefix}cpus"):
        text = read_line(root, f"{directory}/{name}")
        if text is not None:
            return _parse(text, directory, name)
    return None


def _pid_dir(pid: int | str) -> str:
    text = str(pid)
    if text in ("self", "thread-self") or (text.isascii() and text.isdigit()):
        return text
    raise ValueError(f"not a process id: {pid!r}")


def _find_hierarchy(root: str, mounts: tuple[Mount, ...]) -> _Hierarchy | None:
    for mount in mounts:
        if mount.fstype == "cgroup2":
            controllers = read_line(root, posixpath.join(mount.mountpoint, "cgroup.controllers"))
            if controllers is not None and "cpuset" in controllers.split():
                return _Hierarchy(_Kind.CGROUP2, mount.mountpoint)
        elif mount.fstype == "cgroup" and "cpuset" in mount.options:
            kind = _Kind.CPUSET if "noprefix" in mount.options else _Kind.CGROUP1
            return _Hierarchy(kind, mount.mountpoint)
        elif mount.fstype == "cpuset":
            return _Hierarchy(_Kind.CPUSET, mount.mountpoint)
    if mounts:
        return None  # the mount table is the authority when there is one
    for probe, kind, mountpoint in _STANDARD_MOUNTS:
        if read_line(root, probe) is not None:
            return _Hierarchy(kind, mountpoint)
    return None


def _task_path(root: str, task: str, kind: _Kind) -> str | None:
    """The task's cgroup path in the hierarchy of ``kind``, or None."""
    text = read_text(root, f"/proc/{task}/cgroup")
    if text is not None:
        for line in text.split("\n"):  # a cgroup name may hold \x85 or \u2028: see parse_mounts
            hierarchy_id, sep1, rest = line.partition(":")
            controllers, sep2, path = rest.partition(":")
            if not (sep1 and sep2):
                continue
            if kind is _Kind.CGROUP2:
                if hierarchy_id == "0" and controllers == "":
                    return path
            elif "cpuset" in controllers.split(","):
                return path
    # One line, the path, then "\n": only that is taken off (a cgroup's name may end in a
    # space, and ``strip`` would make it another cgroup's).
    text = read_text(root, f"/proc/{task}/cpuset")
    name = None if text is None else text.split("\n")[0]
    return name or None


def _path_parts(path: str) -> list[str] | None:
    """Components of a cgroup path; None for one that leaves its hierarchy (``..``, as a
    task outside our cgroup namespace shows) or is not absolute."""
    if not path.startswith("/"):
        return None
    parts = [p for p in path.split("/") if p and p != "."]
    if ".." in parts:
        return None
    return parts


def _under(mountpoint: str, parts: list[str]) -> str:
    return posixpath.join(mountpoint, *parts) if parts else mountpoint


def _read_v2(root: str, mountpoint: str, parts: list[str], name: str) -> CpuSet | None:
    # The task's own cgroup must exist; only then may its set be inherited from above.
    if not list_dir(root, _under(mountpoint, parts)):
        return None
    for depth in range(len(parts), -1, -1):
        directory = _under(mountpoint, parts[:depth])
        text = read_line(root, f"{directory}/{name}")
        if text is not None:
            return _parse(text, directory, name)
    return None


def _parse(text: str, directory: str, name: str) -> CpuSet:
    try:
        return parse_cpulist(text)
    except ParseError as exc:
        raise ParseError(f"{shown_path(directory)}/{name}: {clipped(str(exc))}") from None


__all__ = ["Mount", "cgroup_cpuset", "parse_mounts", "read_mounts"]
