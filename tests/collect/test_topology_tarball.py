"""``affmon topology --root FILE.tar.bz2``: hwloc's gather tarballs read as trees, and
hostile archives refused in one line without writing anything outside a temporary
directory, which is removed.

Every tarball in ``tests/fixtures/sysfs`` is read both ways, as the archive and as the
tree extracted by the tests' own extraction (``tests/collect/test_topology_sysfs.py``), and the
two ``--json`` outputs must be equal.
"""

from __future__ import annotations

import bz2
import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

import affmon.collect.gather_tarball as gather_tarball
from affmon.collect.gather_tarball import extracted_root
from affmon.collect.sysfs_topology import read_topology
from affmon.core.errors import SourceError
from tests.helpers.topology_trees import FIXTURES, TREES, extract_tree, lstopo_memory_and_distances


def affmon(*args: str, tmpdir: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    return subprocess.run(
        [sys.executable, "-m", "affmon", *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


@pytest.mark.parametrize("name", sorted(TREES))
def test_gather_tarball_reads_as_its_extracted_tree(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    with extracted_root(str(FIXTURES / f"{TREES[name]}.tar.bz2")) as root:
        from_archive = read_topology(root)
    assert not Path(root).exists()  # the temporary directory is gone
    from_tree = read_topology(str(extract_tree(tmp_path_factory, name)))
    assert from_archive == from_tree and from_archive.notes == from_tree.notes


def test_command_reads_the_h200x2_tarball(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The report's case: ``--root`` given the tarball said only "not a directory"."""
    archive = FIXTURES / f"{TREES['h200x2']}.tar.bz2"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    from_archive = affmon("topology", "--root", str(archive), "--json", tmpdir=scratch)
    assert from_archive.returncode == 0 and from_archive.stderr == "", from_archive.stderr
    from_tree = affmon("topology", "--root", str(extract_tree(tmp_path_factory, "h200x2")), "--json")
    assert json.loads(from_archive.stdout) == json.loads(from_tree.stdout)
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize("name", ["gpunuma", "sparse"])
def test_command_on_a_tarball_gives_lstopos_memory_and_distances(
    name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Debian's hwloc cannot open an archive itself ("does not support loading from an
    archive"), so lstopo reads the tree extracted by the tests; affmon reads the archive."""
    out = affmon("topology", "--root", str(FIXTURES / f"{TREES[name]}.tar.bz2"), "--json")
    assert out.returncode == 0 and out.stderr == "", out.stderr
    data = json.loads(out.stdout)
    memory, matrix = lstopo_memory_and_distances(extract_tree(tmp_path_factory, name))
    ids = [n["id"] for n in data["numa_nodes"]]
    assert matrix is not None and sorted(matrix) == ids
    assert data["node_distances"] == [[matrix[a][b] for b in ids] for a in ids]
    assert {n["id"]: n["memory_bytes"] for n in data["numa_nodes"]} == {i: memory.get(i, 0) for i in ids}


def repacked(tmp_path: Path, mode: str, suffix: str) -> Path:
    """The h200x2 tree in another compression (or none)."""
    out = tmp_path / f"h200x2{suffix}"
    with tarfile.open(FIXTURES / f"{TREES['h200x2']}.tar.bz2") as src, tarfile.open(out, mode) as dst:
        for member in src.getmembers():
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    return out


@pytest.mark.parametrize(("mode", "suffix"), [("w:gz", ".tar.gz"), ("w:xz", ".tar.xz"), ("w", ".tar"), ("w", ".bin")])
def test_other_compressions_and_names(tmp_path: Path, mode: str, suffix: str) -> None:
    out = affmon("topology", "--root", str(repacked(tmp_path, mode, suffix)))
    assert out.returncode == 0, out.stderr
    assert "CPUs: 32 online (0-31), allowed 0-31" in out.stdout.splitlines()
    assert "this tree has no PCI bus: GPUs unknown" in out.stdout.splitlines()


def test_archive_with_entries_at_its_top(tmp_path: Path, tmp_path_factory) -> None:
    """Made with ``tar -C tree .``: the root is the extraction directory itself."""
    tree = extract_tree(tmp_path_factory, "cgroup2")
    archive = tmp_path / "flat.tar.bz2"
    with tarfile.open(archive, "w:bz2") as tar:
        tar.add(tree, arcname=".")
    out = affmon("topology", "--root", str(archive), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == json.loads(affmon("topology", "--root", str(tree), "--json").stdout)


# ------------------------------------------------------------------ hostile archives


def member(
    name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"x\n", link: str = ""
) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, data


def archive(tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes]], name: str = "bad.tar.bz2") -> Path:
    """A bzip2 tar of the given members after a minimal valid tree."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for info, data in [member("t/sys/devices/system/cpu/online", data=b"0\n"), *members]:
            tar.addfile(info, io.BytesIO(data) if info.type == tarfile.REGTYPE else None)
    path = tmp_path / name
    path.write_bytes(bz2.compress(buffer.getvalue()))
    return path


ESCAPE = "escaped"  # what a member tries to create next to the archive


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ([member(f"/tmp/{ESCAPE}")], "has an absolute path"),
        ([member(f"t/../../{ESCAPE}")], "has a '..' in its path"),
        ([member("t/l", tarfile.SYMTYPE, link="/etc")], "is a link leading out of the tree ('/etc')"),
        ([member("t/l", tarfile.SYMTYPE, link="../..")], "is a link leading out of the tree"),
        ([member("t/sys/l", tarfile.SYMTYPE, link="../../../x")], "is a link leading out of the tree"),
        ([member("t/l", tarfile.SYMTYPE, link="sys/../../x")], "is a link leading out of the tree"),
        ([member("t/l", tarfile.SYMTYPE, link="")], "is a link leading out of the tree"),
        (
            [member("t/l", tarfile.SYMTYPE, link="."), member(f"t/l/{ESCAPE}")],
            "lies under the symbolic link 't/l'",
        ),
        ([member("t/f"), member("t/f/x")], "lies under the file 't/f'"),
        ([member("t/f"), member("t/f")], "appears twice"),
        ([member("t/f"), member("t/f", tarfile.SYMTYPE, link="sys")], "appears twice"),
        ([member("t/h", tarfile.LNKTYPE, link="t/sys/devices/system/cpu/online")], "is a hard link"),
        ([member("t/fifo", tarfile.FIFOTYPE)], "is a device, FIFO or other special file"),
        ([member("t/zero", tarfile.CHRTYPE)], "is a device, FIFO or other special file"),
    ],
)
def test_hostile_members_are_refused_in_one_line(
    tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes]], message: str
) -> None:
    path = archive(tmp_path, members)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    out = affmon("topology", "--root", str(path), tmpdir=scratch)
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert message in lines[0] and f"(extract it first if you trust it: tar -xjf {path})" in lines[0], lines[0]
    assert "Traceback" not in out.stderr
    assert list(scratch.iterdir()) == []
    assert not list(tmp_path.rglob(ESCAPE)) and not Path("/tmp", ESCAPE).exists()


def refused(path: Path) -> str:
    with pytest.raises(SourceError) as info, extracted_root(str(path)):
        pass
    assert "\n" not in str(info.value)
    return str(info.value)


@pytest.mark.parametrize(
    ("bound", "value", "members", "message"),
    [
        ("MAX_MEMBERS", 3, [member(f"t/{i}") for i in range(3)], "more than 3 members"),
        ("MAX_BYTES", 1 << 20, [member("t/big", data=b"0" * (1 << 20))], "more than 1 MiB of files"),
        ("MAX_STREAM_BYTES", 1 << 20, [member("t/big", data=b"0" * (1 << 20))], "more than 1 MiB once decompressed"),
    ],
)
def test_bounds(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    bound: str,
    value: int,
    members: list[tuple[tarfile.TarInfo, bytes]],
    message: str,
) -> None:
    path = archive(tmp_path, members)
    with extracted_root(str(path)) as root:  # within the real bounds it reads
        assert Path(root, "sys/devices/system/cpu/online").read_text() == "0\n"
    monkeypatch.setattr(gather_tarball, bound, value)
    assert message in refused(path)


def test_header_claiming_gigabytes_stops_at_the_stream_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pax header whose size says 8 GiB (the most ustar spells) is not read into
    memory: the stream ends first."""
    header = tarfile.TarInfo("././@PaxHeader")
    header.type = tarfile.XHDTYPE
    header.size = (8 << 30) - 1
    path = tmp_path / "pax.tar.bz2"
    path.write_bytes(bz2.compress(header.tobuf(format=tarfile.USTAR_FORMAT) + b"\0" * (2 << 20)))
    monkeypatch.setattr(gather_tarball, "MAX_STREAM_BYTES", 1 << 20)
    assert "once decompressed" in refused(path)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.write_text("not an archive\n"), "not a tar archive (hwloc-gather-topology writes a .tar.bz2)"),
        (lambda p: p.write_bytes(b""), "not a tar archive"),
        (lambda p: p.write_bytes((FIXTURES / f"{TREES['h200x2']}.tar.bz2").read_bytes()[:5000]), "not a readable"),
        (lambda p: p.write_bytes(b"BZh9garbage"), "not a readable tar archive"),
    ],
)
def test_not_an_archive(tmp_path: Path, make: Callable[[Path], object], message: str) -> None:
    path = tmp_path / "x.tar.bz2"
    make(path)
    out = affmon("topology", "--root", str(path))
    assert out.returncode == 2 and out.stdout == "" and len(out.stderr.splitlines()) == 1, out.stderr
    assert message in out.stderr
    assert "extract it first" not in out.stderr  # no tar command for what tar cannot read


def test_archive_without_a_sysfs_tree(tmp_path: Path) -> None:
    path = tmp_path / "empty.tar.bz2"
    with tarfile.open(path, "w:bz2") as tar:
        info, data = member("other/file")
        tar.addfile(info, io.BytesIO(data))
    out = affmon("topology", "--root", str(path))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().endswith("the archive holds no sys/devices/system/cpu: not a gathered Linux tree")


def test_unreadable_archive_and_missing_root(tmp_path: Path) -> None:
    missing = affmon("topology", "--root", str(tmp_path / "nothing.tar.bz2"))
    assert missing.returncode == 2 and "not a directory" in missing.stderr
    if os.geteuid() != 0:
        path = tmp_path / "locked.tar.bz2"
        path.write_bytes(b"")
        path.chmod(0)
        out = affmon("topology", "--root", str(path))
        assert out.returncode == 2 and "cannot read: Permission denied" in out.stderr
