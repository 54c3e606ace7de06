"""A recorded tree (``--root DIR``) is read inside its bounds.

Every path is resolved inside the root, as openat2's ``RESOLVE_IN_ROOT`` does: a link's
absolute target starts again at the root and ``..`` stops there. Only regular files are
read, at most ``MAX_FILE_BYTES`` of each, and error messages quote a short escaped
prefix of what was read.

The tree is hwloc's ``nvidiagpunumanodes`` sysfs fixture, copied into pytest's tmp dir,
with one file or directory replaced in each test. When ``sys/devices/system/cpu/online``
cannot be read, affmon takes the CPUs whose ``cpuN/online`` is not 0: a test compares
the whole topology with the one read from a copy that has no ``online`` at all.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import resource
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from affmon.collect import fs
from affmon.collect.procfs import ProcFs, parse_status
from affmon.collect.sysfs_topology import read_topology
from affmon.core.errors import ParseError
from tests.helpers.topology_trees import TREES, extract_tree

REPO = Path(__file__).resolve().parent.parent.parent
ONLINE = "sys/devices/system/cpu/online"
PCI = "sys/bus/pci/devices"
MEMORY_LIMIT_BYTES = 1 << 30  # reading /dev/zero or a sparse file without a bound dies here


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return extract_tree(tmp_path_factory, "gpunuma")


@pytest.fixture
def root(source: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "tree"
    shutil.copytree(source, dest, symlinks=True)
    return dest


@pytest.fixture(scope="module")
def without_online(source: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """``affmon topology --json`` of the tree when ``online`` is unknown."""
    dest = tmp_path_factory.mktemp("no-online") / "tree"
    shutil.copytree(source, dest, symlinks=True)
    (dest / ONLINE).unlink()
    topology = read_topology(str(dest)).to_json()
    assert topology["online_cpus"] not in ("0-1", "0-3")  # differs from what the tests plant
    return topology


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the tree, which nothing in the tree may reach."""
    path = tmp_path / "outside"
    path.mkdir()
    return path


def replace(path: Path, make: Callable[[Path], object]) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
    make(path)


def link(path: Path, target: str) -> None:
    replace(path, lambda p: p.symlink_to(target))


def limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


def affmon_topology(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "affmon", "topology", "--root", str(root), "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,  # a hang guard only: each run takes well under a second
        preexec_fn=limit_memory,
    )


def climb(path: str) -> str:
    """A relative link target that climbs far above any root, then goes down to ``path``."""
    return "../" * 40 + path.lstrip("/")


# ------------------------------------------------------------------ links out of the tree


@pytest.mark.parametrize("content", ["SECRET-MARKER-7f3a9\n", "0-1\n"], ids=["secret", "plausible"])
@pytest.mark.parametrize("how", ["absolute", "climbing"])
def test_link_out_of_the_tree_is_not_followed_out(
    root: Path, outside: Path, without_online: dict[str, object], content: str, how: str
) -> None:
    secret = outside / "secret"
    secret.write_text(content)
    link(root / ONLINE, str(secret) if how == "absolute" else climb(str(secret)))
    run = affmon_topology(root)
    assert "SECRET" not in run.stdout + run.stderr
    assert (run.returncode, run.stderr) == (0, "")
    assert json.loads(run.stdout) == without_online  # unknown, then the per-CPU files


def test_absolute_link_inside_the_tree_is_followed_inside(root: Path) -> None:
    gpus = read_topology(str(root)).gpus
    (root / "sys/devices/system/cpu/online.recorded").write_text("0-3\n")
    link(root / ONLINE, "/sys/devices/system/cpu/online.recorded")
    (root / PCI).rename(root / f"{PCI}.recorded")
    (root / PCI).symlink_to(f"/{PCI}.recorded")
    topology = read_topology(str(root))
    assert topology.online_cpus == frozenset(range(4))
    assert topology.gpus == gpus and len(gpus) > 0


def test_dotdot_past_the_root_stays_at_the_root(root: Path) -> None:
    (root / "sys/devices/system/cpu/online.recorded").write_text("0-3\n")
    link(root / ONLINE, climb("sys/devices/system/cpu/online.recorded"))
    assert read_topology(str(root)).online_cpus == frozenset(range(4))
    assert fs.read_file(str(root), "/../../../" + ONLINE) == b"0-3\n"
    assert fs.list_dir(str(root), "/../..") == fs.list_dir(str(root), "/")


def test_directory_link_out_of_the_tree_lists_nothing_outside(root: Path, outside: Path) -> None:
    assert read_topology(str(root)).gpus  # the tree's own GPUs
    shutil.copytree(root / PCI, outside / "devices", symlinks=True)
    link(root / PCI, str(outside / "devices"))
    assert read_topology(str(root)).gpus == ()


def test_recorded_proc_stays_inside(root: Path, outside: Path) -> None:
    pid_dir = root / "proc/4242"
    pid_dir.mkdir()
    (outside / "status").write_text("Name:\tx\nCpus_allowed_list:\t0\n")
    (pid_dir / "status").symlink_to(str(outside / "status"))
    proc = ProcFs(str(root))
    assert proc.pids() == [4242]
    assert proc.status(4242) is None
    # An absolute link to /proc names, inside the tree, the link itself: a loop, not the live /proc.
    link(root / "proc", "/proc")
    assert proc.pids() == []


# ------------------------------------------------------------ files that must not be read


@pytest.mark.parametrize("how", ["dev-zero", "dev-zero-climbing", "sparse", "device-node"])
def test_endless_or_huge_files_are_unknown(root: Path, without_online: dict[str, object], how: str) -> None:
    path = root / ONLINE
    if how == "dev-zero":
        link(path, "/dev/zero")
    elif how == "dev-zero-climbing":
        link(path, climb("/dev/zero"))
    elif how == "sparse":
        path.write_text("0-1\n")
        os.truncate(path, 8 << 30)
    else:
        path.unlink()
        try:
            os.mknod(path, stat.S_IFCHR | 0o644, os.makedev(1, 5))  # /dev/zero's numbers
        except PermissionError:
            pytest.skip("creating a device node needs CAP_MKNOD")
    run = affmon_topology(root)
    assert (run.returncode, run.stderr) == (0, "")
    assert json.loads(run.stdout) == without_online


def test_fifo_in_the_tree_is_not_read(root: Path, without_online: dict[str, object]) -> None:
    path = root / ONLINE
    replace(path, os.mkfifo)
    writer = os.open(path, os.O_RDWR | os.O_NONBLOCK)  # holds the FIFO open, with a value in it
    try:
        os.write(writer, b"0-1\n")
        assert read_topology(str(root)).to_json() == without_online
    finally:
        os.close(writer)


def test_read_is_capped(tmp_path: Path) -> None:
    (tmp_path / "exact").write_bytes(b"7" * fs.MAX_FILE_BYTES)
    (tmp_path / "over").write_bytes(b"7" * (fs.MAX_FILE_BYTES + 1))
    assert fs.read_file(str(tmp_path), "/exact") == b"7" * fs.MAX_FILE_BYTES
    assert fs.read_file(str(tmp_path), "/over") is None
    assert fs.read_bytes(str(tmp_path / "exact")) == b"7" * fs.MAX_FILE_BYTES  # the live path too
    assert fs.read_bytes(str(tmp_path / "over")) is None


# ------------------------------------------------------------------------- error messages


def test_garbage_is_quoted_short_and_escaped(root: Path) -> None:
    (root / ONLINE).write_text("\x1b]0;owned\x07\x1b[2J" + "9" * 20000 + ",x\n")
    run = affmon_topology(root)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("affmon: ")
    assert len(run.stderr) < 300
    assert all(c.isprintable() for c in run.stderr.rstrip("\n"))


@pytest.mark.parametrize("key", ["Uid", "Cpus_allowed_list"])
def test_parser_messages_quote_a_short_prefix(key: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse_status(f"Name:\tx\n{key}:\t\x1b[31m" + "7" * 20000 + "\n")
    assert len(str(caught.value)) < 250 and str(caught.value).isprintable()


# ----------------------------------------- the resolver against the kernel's RESOLVE_IN_ROOT

_OPENAT2 = 437  # the same number on x86_64 and aarch64 (new system calls share one table)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_IN_ROOT = 0x10


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _openat2(dir_fd: int, path: str, flags: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    how = _OpenHow(flags | os.O_CLOEXEC, 0, _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS)
    fd = int(libc.syscall(_OPENAT2, dir_fd, path.encode(), ctypes.byref(how), ctypes.sizeof(how)))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return fd


def _kernel_available() -> bool:
    try:
        os.close(_openat2(os.open("/", os.O_PATH), ".", os.O_PATH))
    except (OSError, AttributeError):
        return False
    return True


def kernel_read(root: str, path: str) -> bytes | None:
    """What the kernel reads at ``path`` resolved in ``root``: the oracle for ``read_file``."""
    top = os.open(root, os.O_PATH | os.O_DIRECTORY)
    try:
        fd = _openat2(top, path, os.O_PATH)
    except OSError:
        return None
    finally:
        os.close(top)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with open(f"/proc/self/fd/{fd}", "rb") as f:
            return f.read()
    finally:
        os.close(fd)


def kernel_list(root: str, path: str) -> list[str]:
    top = os.open(root, os.O_PATH | os.O_DIRECTORY)
    try:
        fd = _openat2(top, path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return []
    finally:
        os.close(top)
    try:
        return sorted(os.listdir(fd))
    finally:
        os.close(fd)


NAMES = ["a", "b", "c"]
STEPS = st.sampled_from([*NAMES, "..", ".", "", "zz"])
TARGETS = st.tuples(st.booleans(), st.lists(STEPS, min_size=1, max_size=5)).map(
    lambda t: ("/" if t[0] else "") + "/".join(t[1])
)
ENTRIES = st.lists(
    st.tuples(
        st.lists(st.sampled_from(NAMES), min_size=1, max_size=3),
        st.sampled_from(["dir", "file", "link"]),
        TARGETS,
    ),
    max_size=25,
)


@pytest.fixture(scope="module")
def kernel() -> None:
    if not _kernel_available():
        pytest.skip("this kernel has no openat2 (Linux < 5.6) or forbids it")


def build_tree(top: Path, entries: list[tuple[list[str], str, str]]) -> None:
    for parts, kind, target in entries:
        path = top.joinpath(*parts)
        parents = [top.joinpath(*parts[:i]) for i in range(1, len(parts))]
        if os.path.lexists(path) or not all(p.is_dir() and not p.is_symlink() for p in parents):
            continue
        if kind == "dir":
            path.mkdir()
        elif kind == "file":
            path.write_text("/".join(parts))
        elif target:
            path.symlink_to(target)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=ENTRIES, queries=st.lists(TARGETS, min_size=1, max_size=12))
def test_resolution_matches_the_kernel_resolve_in_root(
    kernel: None, entries: list[tuple[list[str], str, str]], queries: list[str]
) -> None:
    """Random trees of directories, files and links (relative, absolute, looping,
    climbing with ``..``) next to files outside the tree: ``read_file`` and ``list_dir``
    give what the kernel's openat2 with RESOLVE_IN_ROOT opens, and never the outside."""
    with tempfile.TemporaryDirectory() as scratch:
        for name in NAMES:
            Path(scratch, name).write_text("OUTSIDE")
        top = Path(scratch, "tree")
        top.mkdir()
        build_tree(top, entries)
        for query in queries:
            data = fs.read_file(str(top), query)
            assert data == kernel_read(str(top), query), query
            assert data != b"OUTSIDE"
            assert sorted(fs.list_dir(str(top), query)) == kernel_list(str(top), query), query


def plain_read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def recorded_entries(top: Path) -> Iterator[Path]:
    for directory, dirs, files in os.walk(top):
        for name in dirs + files:
            yield Path(directory, name)


@pytest.mark.parametrize("name", sorted(TREES))
def test_fixture_trees_read_as_a_plain_open_does(tmp_path_factory: pytest.TempPathFactory, name: str) -> None:
    """Real recorded trees only link inside themselves (mostly relative links, as sysfs
    has them): every file and directory in them, links included, reads exactly as a
    plain open follows it."""
    top = extract_tree(tmp_path_factory, name)
    checked = 0
    for path in recorded_entries(top):
        rel = "/" + str(path.relative_to(top))
        assert fs.read_file(str(top), rel) == plain_read(path), rel
        if path.is_dir():
            assert sorted(fs.list_dir(str(top), rel)) == sorted(os.listdir(path)), rel
        checked += 1
    assert checked > 400


def test_empty_path_names_nothing(tmp_path: Path) -> None:
    assert fs.read_file(str(tmp_path), "") is None
    assert fs.list_dir(str(tmp_path), "") == []
    with pytest.raises(OSError) as caught:
        fs.resolve(str(tmp_path), "")
    assert caught.value.errno == errno.ENOENT
