"""The journal tells the truth and stays small: a read-only or full file system changes
nothing, a write that fails part way says what was restored, finished entries are
compacted and a view's per-tick read does not grow with history, and a journal another
user could have written (their file, their directory, a link) is refused in one line."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from affmon.actions.describe import result_text
from affmon.actions.journal import KEEP_FINISHED, EntryHead, Journal, PinnedMasks, new_entry_id
from affmon.actions.journal_records import JournalEntry, JournalError, ThreadRecord
from affmon.actions.pin import pin
from affmon.actions.undo import undo
from tests.helpers.live import usable_cpus, workload
from tests.helpers.proc import start_ticks, thread_masks

REPO = Path(__file__).resolve().parent.parent.parent
CPUS = usable_cpus()
A, B = CPUS[0], CPUS[-1]
BOTH = frozenset({A, B})
NOBODY = 65534


def one_line(out: subprocess.CompletedProcess[str], status: int) -> str:
    assert out.returncode == status, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("affmon: "), out.stderr
    return lines[0]


@pytest.fixture
def mountpoint() -> Iterator[Path]:
    """An empty directory a mount namespace mounts a small tmpfs on (root's, 0700)."""
    path = Path(tempfile.mkdtemp(prefix="affmon-fs-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def in_mount_namespace(script: str, mountpoint: Path, pid: int) -> subprocess.CompletedProcess[str]:
    """Run ``script`` (sh) in a new mount namespace with a 256 KiB tmpfs on ``mountpoint``,
    which is also XDG_STATE_HOME: the file system is gone when the script ends."""
    env = {**os.environ, "XDG_STATE_HOME": str(mountpoint), "PID": str(pid), "A": str(A), "B": str(B)}
    env["AFFMON"] = f"{sys.executable} -m affmon"
    setup = f"mount -t tmpfs -o size=256k,mode=0700 tmpfs {mountpoint} || exit 97\n"
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", setup + script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=env,
    )


def mount_namespaces_work(mountpoint: Path) -> bool:
    probe = subprocess.run(
        ["unshare", "--mount", "sh", "-c", f"mount -t tmpfs tmpfs {mountpoint}"], capture_output=True, timeout=30
    )
    return probe.returncode == 0


# -- a file system that will not take the write ---------------------------------------


@pytest.mark.parametrize("trouble", ["read-only", "full"])
def test_undo_where_the_journal_cannot_be_written_changes_nothing(mountpoint: Path, trouble: str) -> None:
    """The pin is journaled on a small tmpfs; then the file system is remounted read-only,
    or filled to the last block, and undo runs: one line, exit 2, every mask as pinned
    (before the fix, undo restored the masks and then failed to mark the entry, which
    left it 'applied' and raised a false drift)."""
    assert mount_namespaces_work(mountpoint), "unshare --mount with a tmpfs is needed (root)"
    spoil = (
        f"mount -o remount,ro {mountpoint}"
        if trouble == "read-only"
        else f"dd if=/dev/zero of={mountpoint}/filler bs=4k 2>/dev/null; df {mountpoint} >&2"
    )
    script = f"""
$AFFMON pin $PID --cpus $A --json > {mountpoint}/../pin-out.json || exit 98
{spoil}
$AFFMON undo $PID
echo "undo-status=$?"
"""
    with workload("--cpus", f"{A},{B}", "--sleepers", "2") as w:
        before = thread_masks(w["pid"])
        out = in_mount_namespace(script, mountpoint, w["pid"])
        try:
            assert "undo-status=2" in out.stdout, (out.stdout, out.stderr)
            errors = [line for line in out.stderr.splitlines() if line.startswith("affmon: ")]
            assert len(errors) == 1 and "Traceback" not in out.stderr, out.stderr
            reason = "Read-only file system" if trouble == "read-only" else "No space left on device"
            assert reason in errors[0] and errors[0].endswith("nothing was changed"), errors[0]
            assert set(thread_masks(w["pid"]).values()) == {frozenset({A})}  # still pinned: undo changed nothing
        finally:
            for tid, mask in before.items():
                os.sched_setaffinity(tid, mask)
            (mountpoint.parent / "pin-out.json").unlink(missing_ok=True)


def test_a_write_that_fails_part_way_says_exactly_what_was_restored(tmp_path: Path, monkeypatch) -> None:
    """Two pins, undo --all: the newest is restored and marked, then marking the older one
    fails. The result lists every thread restored, names the entry marked undone, and
    says which still reads as in force."""
    journal = Journal(tmp_path / "journal.jsonl")
    with workload("--cpus", f"{A},{B}", "--sleepers", "1") as first, workload("--cpus", f"{A},{B}") as second:
        older = pin(first["pid"], {A}, journal=journal)
        newer = pin(second["pid"], {A}, journal=journal)
        assert older.ok and newer.ok and older.journal_id and newer.journal_id
        real = Journal.set_state
        calls = []

        def failing_second(self: Journal, entry_id: str, state: str) -> JournalEntry:
            calls.append(entry_id)
            if entry_id == older.journal_id and state == "undone":  # its threads are back by then
                raise JournalError(f"cannot write the affmon journal {self.path}: No space left on device")
            return real(self, entry_id, state)  # type: ignore[arg-type]

        monkeypatch.setattr(Journal, "set_state", failing_second)
        result = undo(journal)
        assert not result.ok and result.entry_ids == (newer.journal_id,)
        assert result.error is not None and "No space left on device" in result.error
        assert f"entries {newer.journal_id} are marked undone" in result.error
        assert f"entry {older.journal_id} and any older one still read as in force" in result.error
        restored = {t.pid for t in result.threads if t.status == "restored"}
        assert restored == {first["pid"], second["pid"]}  # the older entry's threads were put back too...
        assert set(thread_masks(first["pid"]).values()) == {BOTH}
        monkeypatch.setattr(Journal, "set_state", real)
        # ...and it says so: marked pending (written before its first thread was put back).
        assert {e.id: e.state for e in journal.entries()}[older.journal_id] == "pending"
        again = undo(journal)  # a second run finishes the job
        assert again.ok and again.entry_ids == (older.journal_id,)


# -- small, and cheap to watch --------------------------------------------------------


def dead_entry(pid: int, threads: int) -> JournalEntry:
    """An applied pin of a process that no longer exists (start time 1: long gone)."""
    records = tuple(ThreadRecord(pid, pid + i, 1, frozenset({0, 1}), "pin") for i in range(threads))
    return JournalEntry(new_entry_id(), time.time(), pid, 1, frozenset({0}), "applied", records, since_ticks=1)


def test_history_is_compacted_and_a_pin_does_not_pay_for_it(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    with journal.locked():
        journal._write([dead_entry(4_000_000 + i, 2_000) for i in range(30)])
    big = journal.path.stat().st_size
    assert big > 3_000_000
    with workload("--cpus", f"{A},{B}") as w:
        started = time.monotonic()
        result = pin(w["pid"], {A}, journal=journal)
        took = time.monotonic() - started
        assert result.ok, result.error
        entries = journal.entries()
        expired = [e for e in entries if e.state == "expired"]
        assert len(expired) == KEEP_FINISHED and all(e.threads == () for e in expired)
        assert [e.state for e in entries[-1:]] == ["applied"]
        assert journal.path.stat().st_size < 20_000  # from more than 3 MB
        assert took < 30  # one rewrite of the old file, not one per thread
        assert undo(journal, w["pid"]).ok
    assert journal.path.stat().st_size < 20_000


def test_a_view_reads_the_journal_again_only_when_it_changed(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    with workload("--cpus", f"{A},{B}") as w:
        assert pin(w["pid"], {A}, journal=journal).ok
        reads = []
        real = Journal.heads  # what a view reads: the entries without their thread records

        def counted(self: Journal) -> list[EntryHead]:
            reads.append(1)
            return real(self)

        monkeypatch.setattr(Journal, "heads", counted)
        watch = PinnedMasks(path)
        for _tick in range(50):
            assert watch() == {(w["pid"], start_ticks(w["pid"])): frozenset({A})}
        assert len(reads) == 1  # fifty ticks, one read
        monkeypatch.setattr(Journal, "heads", real)
        assert undo(journal, w["pid"]).ok
        assert watch() == {}  # the file changed: read again, nothing in force


def test_the_default_journal_follows_the_state_directory_it_is_named_by(tmp_path: Path, monkeypatch) -> None:
    """The default path is kept between ticks, and built again when XDG_STATE_HOME changes."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "a"))
    journal = Journal(tmp_path / "a" / "affmon" / "journal.jsonl")
    with workload("--cpus", f"{A},{B}") as w:
        assert pin(w["pid"], {A}, journal=journal).ok
        watch = PinnedMasks()
        pinned = {(w["pid"], start_ticks(w["pid"])): frozenset({A})}
        assert watch() == pinned
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "b"))  # no journal there
        assert watch() == {}
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "a"))
        assert watch() == pinned


# -- whose journal it is -----------------------------------------------------------------


def entry_for(pid: int) -> JournalEntry:
    return JournalEntry(
        new_entry_id(),
        time.time(),
        pid,
        start_ticks(pid),
        frozenset({A}),
        "applied",
        (ThreadRecord(pid, pid, start_ticks(pid), BOTH),),
    )


def test_a_journal_file_of_another_user_is_refused(tmp_path: Path) -> None:
    """A `nobody`-written entry made root's `undo --all` re-pin a root process."""
    journal = Journal(tmp_path / "state" / "affmon" / "journal.jsonl")
    with workload("--cpus", str(A)) as w:
        journal.add(
            replace(entry_for(w["pid"]), threads=(ThreadRecord(w["pid"], w["pid"], start_ticks(w["pid"]), BOTH),))
        )
        os.chown(journal.path, NOBODY, NOBODY)
        with pytest.raises(JournalError, match=r"belongs to nobody, not to root"):
            journal.entries()
        env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
        out = subprocess.run(
            [sys.executable, "-m", "affmon", "undo", "--all"], capture_output=True, text=True, env=env, timeout=60
        )
        line = one_line(out, 2)
        assert "belongs to nobody" in line and line.endswith("nothing was changed")
        assert set(thread_masks(w["pid"]).values()) == {frozenset({A})}  # not "restored" to what nobody wrote
        assert PinnedMasks(journal.path)() == {}  # the views do not trust it either


def test_links_in_the_journal_directory_are_never_followed(tmp_path: Path) -> None:
    state = tmp_path / "state" / "affmon"
    state.mkdir(parents=True, mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    journal = Journal(state / "journal.jsonl")
    (state / "journal.jsonl.lock").symlink_to(elsewhere)
    with pytest.raises(JournalError, match="cannot lock"):
        journal.add(dead_entry(4_100_000, 1))
    assert not elsewhere.exists()  # the link made root create nothing
    (state / "journal.jsonl.lock").unlink()
    target = tmp_path / "victim"
    target.write_text("")
    (state / "journal.jsonl").symlink_to(target)
    with pytest.raises(JournalError):
        journal.entries()
    with pytest.raises(JournalError):
        journal.add(dead_entry(4_100_001, 1))
    assert target.read_text() == ""
    # The directory itself as a link
    shutil.rmtree(state)
    real_dir = tmp_path / "real"
    real_dir.mkdir(mode=0o700)
    state.symlink_to(real_dir)
    with pytest.raises(JournalError, match="symbolic link"):
        journal.add(dead_entry(4_100_002, 1))
    assert list(real_dir.iterdir()) == []


def test_root_with_another_users_home_is_refused(tmp_path: Path) -> None:
    """`sudo -E`: root with a user's HOME. The user could swap the journal's directory for
    a link, or write entries: root refuses the whole path, in one line, before changing
    anything."""
    home = tmp_path / "home" / "alice"
    home.mkdir(parents=True)
    os.chown(home, NOBODY, NOBODY)
    env = {k: v for k, v in os.environ.items() if k != "XDG_STATE_HOME"}
    env["HOME"] = str(home)
    with workload("--cpus", f"{A},{B}") as w:
        out = subprocess.run(
            [sys.executable, "-m", "affmon", "pin", str(w["pid"]), "--cpus", str(A)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert out.returncode == 1, (out.stdout, out.stderr)
        assert f"{home} is not root's alone (nobody)" in out.stderr
        assert "nothing was changed" in out.stdout and "put back" not in out.stdout
        assert set(thread_masks(w["pid"]).values()) == {BOTH}
    assert not (home / ".local").exists()  # nothing created in the user's home


def test_a_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "affmon"
    state.mkdir()
    state.chmod(0o777)
    with pytest.raises(JournalError, match=r"other users may write in it \(mode 0777\)"):
        Journal(state / "journal.jsonl").add(dead_entry(4_200_000, 1))


# -- what the messages say ---------------------------------------------------------------


def test_a_pin_refused_before_anything_changed_says_so(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    kthreadd = 2
    result = pin(kthreadd, {A}, journal=journal)
    assert not result.ok and not result.changed
    text = "\n".join(result_text(result))
    assert "nothing was changed" in text and "put back" not in text


def test_pin_of_a_pid_that_does_not_exist_is_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path)}
    for argv in (["pin", "999999", "--cpus", str(A)], ["pin", "999999", "--suggest"]):
        out = subprocess.run(
            [sys.executable, "-m", "affmon", *argv], capture_output=True, text=True, env=env, timeout=60
        )
        assert one_line(out, 2) == "affmon: no such process: 999999"
        assert out.stdout == ""


PINNER = """
import sys, time
from affmon.actions.journal import Journal
from affmon.actions.pin import pin
journal = Journal(sys.argv[1])
result = pin(int(sys.argv[2]), {int(sys.argv[3])}, journal=journal)
print(result.ok, result.warning or "")
"""


def test_two_pins_of_one_process_at_once_are_serialised_and_the_second_says_so(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    with workload("--cpus", f"{A},{B}", "--sleepers", "20") as w:
        runs = [
            subprocess.Popen(
                [sys.executable, "-c", PINNER, str(path), str(w["pid"]), str(cpu)],
                cwd=REPO,
                stdout=subprocess.PIPE,
                text=True,
            )
            for cpu in (A, B)
        ]
        outputs = [r.communicate(timeout=60)[0].strip() for r in runs]
        assert all(o.startswith("True") for o in outputs), outputs
        warned = [o for o in outputs if "was already pinned by affmon" in o]
        assert len(warned) == 1, outputs  # exactly the one that ran second knew of the first
        entries = Journal(path).entries()
        assert [e.state for e in entries] == ["applied", "applied"]
        # Whole pins, never interleaved: every thread has the mask of the entry written last.
        assert set(thread_masks(w["pid"]).values()) == {entries[-1].cpus}
        json.dumps([e.id for e in entries])


def test_missing_parents_are_made_private_whatever_the_umask(tmp_path: Path) -> None:
    """Under umask 002 `mkdir -p` makes the parents 0775, which the next run would refuse:
    affmon makes each missing directory 0700, so a pin can always be undone."""
    journal = Journal(tmp_path / "home" / ".local" / "state" / "affmon" / "journal.jsonl")
    old = os.umask(0o002)
    try:
        journal.add(dead_entry(4_300_000, 1))
    finally:
        os.umask(old)
    for made in (tmp_path / "home", tmp_path / "home" / ".local", journal.path.parent.parent, journal.path.parent):
        assert stat.S_IMODE(made.stat().st_mode) == 0o700, made
    assert len(Journal(journal.path).entries()) == 1  # and the next run trusts it


def test_a_group_writable_directory_is_trusted_only_for_a_private_group(tmp_path: Path) -> None:
    """umask 002 on a system of per-user groups: the group is the user's alone. Any other
    group that may write could swap the journal."""
    import grp
    import pwd

    me = pwd.getpwuid(os.geteuid())
    state = tmp_path / "state"
    state.mkdir()
    own = grp.getgrgid(me.pw_gid)
    state.chmod(0o770)
    os.chown(state, os.geteuid(), me.pw_gid)
    journal = Journal(state / "affmon" / "journal.jsonl")
    if own.gr_name == me.pw_name and not set(own.gr_mem) - {me.pw_name}:
        journal.add(dead_entry(4_400_000, 1))  # a private group: trusted
    other = next(g for g in grp.getgrall() if g.gr_gid != me.pw_gid)
    os.chown(state, os.geteuid(), other.gr_gid)
    with pytest.raises(JournalError, match="other users may write in it"):
        Journal(state / "affmon" / "journal.jsonl").entries()


def test_the_monitors_undo_offers_the_newest_pin_in_force_and_says_why_it_cannot(tmp_path: Path) -> None:
    """`u` must not offer a pin whose processes have all exited (undoing it would say
    "nothing to undo" and leave the pin in force untouched), and must show a journal it
    cannot trust instead of claiming there is no pin."""
    from affmon.core.errors import AffmonError
    from affmon.tui.pinner import SystemPinner

    journal = Journal(tmp_path / "state" / "affmon" / "journal.jsonl")
    pinner = SystemPinner(journal)
    with workload("--cpus", f"{A},{B}") as w:
        assert pin(w["pid"], {A}, journal=journal).ok
        with journal.locked():  # a newer pin of a process that has since exited
            journal._write([*journal.entries(), dead_entry(4_500_000, 3)])
        assert pinner.last_pin() == f"PID {w['pid']} pinned to CPUs {A} (1 threads journaled)"
        result = pinner.undo_last()
        assert result.ok, result.error
        assert set(thread_masks(w["pid"]).values()) == {BOTH}
    assert pinner.last_pin() is None
    os.chown(journal.path, NOBODY, NOBODY)
    with pytest.raises(AffmonError, match="belongs to nobody"):
        pinner.last_pin()
    assert pinner.undo_last().error is not None
