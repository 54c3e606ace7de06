"""``/proc`` mounted with ``hidepid`` hides other users' processes: affmon must say that what
it reports covers only what it could see. First on recorded mount tables, then for real,
inside ``unshare --mount`` with a fresh ``/proc`` mounted with ``hidepid=2``, as nobody
(who sees only its own processes), as root, and as a member of the exempt ``gid=``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from affmon.collect.identity import hidden_processes_notice
from tests.helpers.pinning import REPO

HOST_PROC = "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0"


def notice(hidepid: str) -> str:
    return (
        f"/proc is mounted with hidepid={hidepid}: other users' processes are hidden from affmon, so their load on"
        " these CPUs cannot be seen or moved; what it reports covers your own processes only"
    )


def recorded(tmp_path: Path, *lines: str) -> str:
    (tmp_path / "proc").mkdir(exist_ok=True)
    (tmp_path / "proc" / "mounts").write_text("".join(line + "\n" for line in lines))
    return str(tmp_path)


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ([HOST_PROC], None),
        (["proc /proc proc rw,relatime,hidepid=2 0 0"], notice("2")),
        (["proc /proc proc rw,relatime,hidepid=invisible 0 0"], notice("invisible")),
        (["proc /proc proc rw,relatime,hidepid=ptraceable 0 0"], notice("ptraceable")),
        (["proc /proc proc rw,relatime,hidepid=0 0 0"], None),
        (["proc /proc proc rw,relatime,hidepid=off 0 0"], None),
        # A recorded table says nothing of who reads it: the exempt group does not apply.
        (["proc /proc proc rw,relatime,gid=27,hidepid=2 0 0"], notice("2")),
        # The last mount on /proc is the one in force (unshare --mount, then mount again).
        ([HOST_PROC, "proc /proc proc rw,relatime,hidepid=invisible 0 0"], notice("invisible")),
        (["proc /proc proc rw,relatime,hidepid=2 0 0", HOST_PROC], None),
        (["proc /mnt/proc proc rw,relatime,hidepid=2 0 0", HOST_PROC], None),
        (["sysfs /proc sysfs rw,hidepid=2 0 0"], None),
        ([], None),
    ],
    ids=[
        "plain",
        "2",
        "invisible",
        "ptraceable",
        "0",
        "off",
        "gid",
        "stacked-hiding",
        "stacked-plain",
        "elsewhere",
        "not-proc",
        "empty",
    ],
)
def test_the_notice_from_a_recorded_mount_table(tmp_path: Path, lines: list[str], expected: str | None) -> None:
    assert hidden_processes_notice(recorded(tmp_path, *lines)) == expected


def test_no_mount_table_no_notice(tmp_path: Path) -> None:
    assert hidden_processes_notice(str(tmp_path)) is None


HIDEPIDS = ["0", "1", "2", "4", "off", "noaccess", "invisible", "ptraceable"]
mount_lines = st.tuples(
    st.sampled_from(["/proc", "/mnt/proc", "/sys"]),
    st.sampled_from(["proc", "sysfs"]),
    st.one_of(st.none(), st.sampled_from(HIDEPIDS)),
    st.booleans(),
)


@given(st.lists(mount_lines, max_size=6))
def test_the_notice_follows_the_last_proc_mount_on_proc(lines: list[tuple[str, str, str | None, bool]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        text = []
        for mountpoint, fstype, hidepid, with_gid in lines:
            options = (
                ["rw", "relatime"] + ([f"hidepid={hidepid}"] if hidepid else []) + (["gid=27"] if with_gid else [])
            )
            text.append(f"{fstype} {mountpoint} {fstype} {','.join(options)} 0 0")
        root = recorded(Path(tmp), *text)
        in_force = [hidepid for mountpoint, fstype, hidepid, _gid in lines if (mountpoint, fstype) == ("/proc", "proc")]
        hides = bool(in_force) and in_force[-1] not in (None, "0", "off")
        assert hidden_processes_notice(root) == (notice(in_force[-1] or "") if hides else None)


# -- a real /proc with hidepid ------------------------------------------------------------------

PRINT_NOTICE = (
    "from affmon.collect.sampler import Selection\n"
    "from affmon.sources.live import open_live_sources\n"
    "sources = open_live_sources(Selection(others=True))\n"
    "print(sources.notice)\n"
    "sources.close()\n"
)
# `affmon pin` of a process of nobody's own, run in the interpreter setpriv starts (the
# interpreter is exec'd by setpriv itself: nobody may not be able to exec it from a shell
# where it lies under a directory only root can enter).
PIN_ISOLATE = (
    "import subprocess, sys\n"
    "from affmon.cli import main\n"
    "target = subprocess.Popen(['sleep', '60'])\n"
    "try:\n"
    "    status = main(['pin', str(target.pid), '--cpus', '0', '--isolate', '--dry-run', '--interval', '0.2'])\n"
    "finally:\n"
    "    target.kill()\n"
    "sys.exit(status)\n"
)
COUNT_PROCESSES = "import os; print(sum(name.isdigit() for name in os.listdir('/proc')))"
MOUNTED_AS = re.compile(r"^/proc is mounted with hidepid=(2|invisible): other users' processes are hidden")


def with_hidden_proc(options: str, *command: str) -> subprocess.CompletedProcess[str]:
    """``command`` in a mount namespace of its own whose /proc is a fresh proc mounted with
    ``options``; the machine's /proc is not touched."""
    script = 'mount -t proc -o "$1" proc /proc && shift && exec "$@"'
    return subprocess.run(
        ["unshare", "--mount", "sh", "-c", script, "sh", options, *command],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def as_user(*groups: int) -> list[str]:
    extra = [f"--groups={','.join(map(str, groups))}"] if groups else ["--clear-groups"]
    return ["setpriv", "--reuid=65534", "--regid=65534", *extra]


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("setpriv")),
    reason="mounting proc needs root, unshare and setpriv",
)


@needs_root
def test_nobody_under_hidepid_is_told_that_other_users_processes_are_hidden() -> None:
    seen = with_hidden_proc("hidepid=2", *as_user(), sys.executable, "-c", COUNT_PROCESSES)
    assert seen.returncode == 0, seen.stderr
    assert int(seen.stdout) < 10  # itself and any other process of nobody's: the rest are hidden
    out = with_hidden_proc("hidepid=2", *as_user(), sys.executable, "-c", PRINT_NOTICE)
    assert out.returncode == 0, out.stderr
    found = MOUNTED_AS.match(out.stdout)  # hidepid=2 reads back as "invisible" since Linux 5.8
    assert found is not None, out.stdout
    assert out.stdout == notice(found.group(1)) + "\n"
    diagnosed = with_hidden_proc(
        "hidepid=2", *as_user(), sys.executable, "-m", "affmon", "diagnose", "--samples", "3", "--interval", "0.2"
    )
    assert diagnosed.returncode in (0, 1) and "Traceback" not in diagnosed.stderr, diagnosed.stderr
    assert f"note: {notice(found.group(1))}" in diagnosed.stdout.splitlines(), diagnosed.stdout


@needs_root
@pytest.mark.parametrize(
    ("options", "user"),
    [("hidepid=2", []), ("hidepid=2,gid=4242", as_user(4242)), ("hidepid=0", as_user())],
    ids=["root", "exempt-group", "hidepid=0"],
)
def test_no_notice_where_every_process_is_visible(options: str, user: list[str]) -> None:
    seen = with_hidden_proc(options, *user, sys.executable, "-c", COUNT_PROCESSES)
    assert seen.returncode == 0, seen.stderr
    assert int(seen.stdout) > 20  # it does see the machine's other processes
    out = with_hidden_proc(options, *user, sys.executable, "-c", PRINT_NOTICE)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "None\n"


@needs_root
def test_pin_isolate_says_it_on_stderr() -> None:
    """``pin --isolate`` chooses whom to move from what it sees: under hidepid it says, in one
    note on stderr, that other users' processes were out of its sight."""
    out = with_hidden_proc("hidepid=2", *as_user(), sys.executable, "-c", PIN_ISOLATE)
    assert out.returncode == 0, out.stderr
    (line,) = out.stderr.splitlines()
    assert line.startswith("affmon: note: ")
    assert MOUNTED_AS.match(line.removeprefix("affmon: note: ")), line
