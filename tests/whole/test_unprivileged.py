"""Unprivileged use. When the tests run as root, affmon's sampler and pin are
run as ``nobody`` (``setpriv --reuid=65534 --regid=65534 --clear-groups``, with a HOME
and XDG_STATE_HOME it may write) against root-owned processes: sampling shows what that
user may read and marks the rest unknown (null, never 0); pin, its dry run included,
refuses in one line naming the missing privilege (CAP_SYS_NICE) and leaves every mask
as it was. And affmon never runs a shell, with user-supplied text or any other.

(The exporter's loopback binding is the exporter's own tests' business; a plain
``affmon pin`` as nobody is in ``tests/commands/test_pin_cli.py``.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.live import usable_cpus, workload
from tests.helpers.proc import thread_masks
from tests.helpers.topology_trees import extract_tree

REPO = Path(__file__).resolve().parent.parent.parent
AFFMON = REPO / "affmon"
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

as_root_only = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv to run affmon as nobody"
)


@pytest.fixture
def nobody_home() -> Iterator[Path]:
    """A directory nobody may write (pytest's tmp_path is root's alone), removed after."""
    home = Path(tempfile.mkdtemp(prefix="affmon-nobody-"))
    os.chown(home, 65534, 65534)  # nobody's own: affmon trusts no journal another user could replace
    home.chmod(0o700)
    try:
        yield home
    finally:
        shutil.rmtree(home)


def affmon(*args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m affmon ARGS``, as nobody when ``home`` is given."""
    env = dict(os.environ)
    if home is not None:
        env.update(HOME=str(home), XDG_STATE_HOME=str(home / "state"))
    prefix = NOBODY if home is not None else []
    return subprocess.run(
        [*prefix, sys.executable, "-m", "affmon", *args], capture_output=True, text=True, timeout=60, cwd=REPO, env=env
    )


def one_line_refusal(out: subprocess.CompletedProcess[str], status: int) -> str:
    assert out.returncode == status, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("affmon: "), out.stderr
    return lines[0]


# -- sampling -----------------------------------------------------------------------

STATIC = ("pid", "ppid", "user", "name", "cmdline", "thread_count", "allowed_cpus", "cgroup_cpus", "mems_allowed")


@as_root_only
def test_sampling_a_root_process_as_nobody_shows_what_nobody_may_read(nobody_home: Path) -> None:
    with workload("--busy", "1", "--sleepers", "2") as w:
        args = ("snapshot", "--pid", str(w["pid"]), "--json", "--interval", "0.3")
        with ThreadPoolExecutor(2) as pool:
            mine = pool.submit(affmon, *args, home=nobody_home)
            roots = pool.submit(affmon, *args)
            out, root_out = mine.result(), roots.result()
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert root_out.returncode == 0, root_out.stderr
    (theirs,) = json.loads(root_out.stdout)["processes"]
    (seen,) = json.loads(out.stdout)["processes"]
    for key in STATIC:  # each field is what root sees, or unknown: never a made-up value
        assert seen[key] is None or seen[key] == theirs[key], (key, seen[key], theirs[key])
    assert seen["user"] == "root" and seen["thread_count"] == 4  # main, busy, two sleepers
    assert {t["tid"] for t in seen["threads"]} == {t["tid"] for t in theirs["threads"]}
    busy = next(t for t in seen["threads"] if t["tid"] == w["busy"][0])
    assert busy["cpu_percent"] is None or busy["cpu_percent"] > 5  # it ran: unknown or more than 0


def readable_tree(home: Path, tmp_path_factory: pytest.TempPathFactory, pid: int) -> Path:
    """hwloc's gpunuma fixture plus a copy of ``pid``'s /proc files, where nobody may read
    it (under ``home``), every file root's."""
    root = home / "tree"
    shutil.copytree(extract_tree(tmp_path_factory, "gpunuma"), root, symlinks=True)
    dest = root / f"proc/{pid}"
    dest.mkdir(parents=True)
    for name in ("stat", "status", "cmdline"):
        (dest / name).write_bytes(Path(f"/proc/{pid}/{name}").read_bytes())
    (dest / "cgroup").write_text("7:cpuset:/jjh\n")
    for task in Path(f"/proc/{pid}/task").iterdir():
        (dest / "task" / task.name).mkdir(parents=True)
        for name in ("stat", "status", "schedstat", "sched"):
            (dest / "task" / task.name / name).write_bytes((task / name).read_bytes())
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
    return root


@as_root_only
def test_files_nobody_may_not_read_are_unknown_not_zero(
    nobody_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """As root, chmod 000 stops nothing; as nobody it does: a recorded tree whose status,
    cgroup and per-thread status files are root's alone (0600) gives null for the owner,
    the memory nodes, the cgroup and the masks, and the rest as root reads it."""
    with workload("--sleepers", "2") as w:
        root = readable_tree(nobody_home, tmp_path_factory, w["pid"])
    private = [root / f"proc/{w['pid']}/status", root / f"proc/{w['pid']}/cgroup"]
    private += list(root.glob(f"proc/{w['pid']}/task/*/status"))
    for path in private:
        path.chmod(0o600)
    args = ("snapshot", "--root", str(root), "--all", "--json", "--interval", "0.01")
    with ThreadPoolExecutor(2) as pool:
        mine, roots = pool.submit(affmon, *args, home=nobody_home), pool.submit(affmon, *args)
        out, root_out = mine.result(), roots.result()
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    (theirs,) = json.loads(root_out.stdout)["processes"]
    (seen,) = json.loads(out.stdout)["processes"]
    assert theirs["user"] == "root" and theirs["cgroup_cpus"] == "0-87" and theirs["allowed_cpus"]
    for key in ("user", "mems_allowed", "cgroup_cpus", "allowed_cpus"):
        assert seen[key] is None, key
    assert all(t["allowed_cpus"] is None for t in seen["threads"])
    for key in ("pid", "ppid", "name", "cmdline", "thread_count"):
        assert seen[key] == theirs[key], key
    assert json.loads(out.stdout)["topology"] == json.loads(root_out.stdout)["topology"]


# -- pinning ------------------------------------------------------------------------


@as_root_only
@pytest.mark.parametrize(
    "extra", [["--json"], ["--with-children"], ["--dry-run"]], ids=["json", "with-children", "dry-run"]
)
def test_pin_as_nobody_refuses_naming_cap_sys_nice_and_changes_nothing(nobody_home: Path, extra: list[str]) -> None:
    cpu = usable_cpus()[0]
    with workload("--sleepers", "2", "--child") as w:
        before = {w["pid"]: thread_masks(w["pid"]), w["child"]: thread_masks(w["child"])}
        out = affmon("pin", str(w["pid"]), "--cpus", str(cpu), *extra, home=nobody_home)
        after = {w["pid"]: thread_masks(w["pid"]), w["child"]: thread_masks(w["child"])}
    line = one_line_refusal(out, 1)
    assert "CAP_SYS_NICE" in line and f"PID {w['pid']} (user root)" in line
    assert after == before
    if extra == ["--json"]:
        data: dict[str, Any] = json.loads(out.stdout)
        assert not data["ok"] and "CAP_SYS_NICE" in data["error"]
    journal = nobody_home / "state/affmon/journal.jsonl"
    if extra == ["--dry-run"]:
        assert not journal.exists()
    elif journal.exists():  # written ahead, then removed: a pin refused before any change leaves no entry
        assert journal.read_text() == ""
    undo = affmon("undo", "--all", home=nobody_home)
    assert undo.returncode in (0, 2) and "Traceback" not in undo.stderr


# -- no shell -----------------------------------------------------------------------

SHELL = re.compile(r"shell\s*=\s*True|\bos\s*\.\s*(system|popen)\b|create_subprocess_shell|\bpty\s*\.\s*spawn\b")


def test_affmon_never_runs_a_shell() -> None:
    found = []
    for path in sorted(AFFMON.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if SHELL.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert found == [], "\n".join(found)


def test_the_shell_check_would_catch_one(tmp_path: Path) -> None:
    for text in ("subprocess.run(cmd, shell=True)", "os.system(cmd)", "os.popen(cmd)", "pty.spawn(argv)"):
        assert SHELL.search(text), text
    assert not SHELL.search("os.execvp(command[0], command)")  # affmon exec: argv, no shell
