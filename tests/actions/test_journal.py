"""The write-ahead journal: round trips, atomic writes, mode 0600, corrupt files, removal
that keeps the others, concurrent writers, and what the drift rule is told to expect."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from affmon.actions.journal import (
    Journal,
    JournalEntry,
    JournalError,
    ThreadRecord,
    default_journal_path,
    expected_masks,
    new_entry_id,
)
from affmon.core.errors import AffmonError

REPO = Path(__file__).resolve().parent.parent.parent


def entry(pid: int, cpus: set[int], *, state: str = "applied", children: tuple[int, ...] = ()) -> JournalEntry:
    threads = [
        ThreadRecord(pid, pid, 100, frozenset({0, 1, 2, 3}), "pin"),
        ThreadRecord(pid, pid + 1, 101, frozenset({3})),
    ]
    threads += [ThreadRecord(c, c, 200, frozenset({0, 1}), "pin") for c in children]
    threads.append(ThreadRecord(9999, 9999, 5, frozenset({0, 8}), "isolate"))
    return JournalEntry(
        id=new_entry_id(),
        time_s=1700000000.5,
        pid=pid,
        start_ticks=100,
        cpus=frozenset(cpus),
        state=state,  # type: ignore[arg-type]
        threads=tuple(threads),
    )


def test_entries_round_trip_through_the_file(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "state" / "affmon" / "journal.jsonl")
    assert journal.entries() == []
    first, second = entry(10, {0, 1}), entry(20, {2, 5, 6, 7}, children=(21, 22))
    journal.add(first)
    journal.add(second)
    assert Journal(journal.path).entries() == [first, second]
    assert journal.get(second.id) == second
    line = json.loads(journal.path.read_text().splitlines()[1])
    assert line["cpus"] == "2,5-7" and line["threads"][1] == {
        "pid": 20,
        "tid": 21,
        "start_ticks": 101,
        "old": "3",
        "role": "pin",
    }
    updated = journal.set_state(first.id, "undone")
    # A finished entry keeps no thread records: nothing is left to restore from them.
    assert journal.entries() == [replace(updated, threads=()), second] and updated.state == "undone"
    with pytest.raises(JournalError, match="already in the affmon journal"):
        journal.add(second)


def test_the_file_is_private_and_so_is_a_new_directory(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "new" / "journal.jsonl")
    old_umask = os.umask(0)  # even with a permissive umask
    try:
        journal.add(entry(10, {0}))
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(journal.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(journal.path.parent.stat().st_mode) == 0o700
    journal.path.chmod(0o644)
    journal.add(entry(11, {1}))  # every rewrite makes it private again
    assert stat.S_IMODE(journal.path.stat().st_mode) == 0o600


def test_removing_one_entry_keeps_every_other(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    entries = [entry(pid, {pid % 4}) for pid in (10, 20, 30, 40)]
    for e in entries:
        journal.add(e)
    journal.remove(entries[1].id)
    assert journal.entries() == [entries[0], entries[2], entries[3]]
    with pytest.raises(JournalError, match="no entry"):
        journal.remove(entries[1].id)
    assert journal.entries() == [entries[0], entries[2], entries[3]]


def test_a_write_replaces_the_file_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    kept = entry(10, {0})
    journal.add(kept)
    before = journal.path.read_bytes()
    inode = journal.path.stat().st_ino
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync_then_record(fd: int) -> None:
        events.append("fsync")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync_then_record)

    def replace_then_record(src: str, dst: str, *, src_dir_fd: int, dst_dir_fd: int) -> None:
        events.append("rename")
        assert src_dir_fd == dst_dir_fd  # within the journal's directory: rename is atomic
        assert os.path.samestat(os.fstat(src_dir_fd), os.stat(journal.path.parent))
        assert dst == journal.path.name
        assert (journal.path.parent / src).read_bytes().startswith(before)  # the whole new text is already there
        real_replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    monkeypatch.setattr(os, "replace", replace_then_record)
    journal.add(entry(20, {1}))
    assert events == ["fsync", "rename", "fsync"]  # data, then rename, then the directory
    assert journal.path.stat().st_ino != inode  # a new file took the old one's place

    # A failure before the rename leaves the old file untouched and no temporary behind.
    def broken(src: str, dst: str, **_dir_fds: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    text = journal.path.read_bytes()
    with pytest.raises(JournalError, match=r"cannot write the affmon journal .*: No space left on device"):
        journal.add(entry(30, {2}))
    assert journal.path.read_bytes() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal.jsonl", "journal.jsonl.lock"]


@pytest.mark.parametrize(
    "line",
    [
        "not json at all",
        '{"version": 1, "id": "x"',  # cut short
        "[1, 2, 3]",
        '{"version": 2}',
        "{}",
        '{"version":1,"id":"x","time":1.0,"pid":1,"start_ticks":1,"cpus":"0-","state":"applied","threads":[]}',
        '{"version":1,"id":"x","time":1.0,"pid":1,"start_ticks":1,"cpus":"0","state":"weird","threads":[]}',
        '{"version":1,"id":"x","time":1.0,"pid":true,"start_ticks":1,"cpus":"0","state":"applied","threads":[]}',
        '{"version":1,"id":"x","time":"now","pid":1,"start_ticks":1,"cpus":"0","state":"applied","threads":[]}',
        '{"version":1,"id":"x","time":1.0,"pid":1,"start_ticks":1,"cpus":"0","state":"applied","threads":[3]}',
        '{"version":1,"id":"x","time":1.0,"pid":1,"start_ticks":1,"cpus":"0","state":"applied","threads":7}',
        '{"version":1,"id":"x","time":1.0,"pid":1,"start_ticks":1,"cpus":"0","state":"applied",'
        '"threads":[{"pid":1,"tid":1,"start_ticks":null,"old":"0","role":"boss"}]}',
        '{"version":1,"id":"x","time":1.0,"pid":-4,"start_ticks":1,"cpus":"0","state":"applied","threads":[]}',
        # A split's per-process masks: each must be a non-empty part of the entry's CPUs.
        '{"version":1,"id":"x","time":1.0,"pid":1,"start_ticks":1,"cpus":"0-1","state":"applied","threads":[],'
        '"masks":[{"pid":1,"start_ticks":1,"cpus":"2"}]}',
        '{"version":1,"id":"x","time":1.0,"pid":1,"start_ticks":1,"cpus":"0-1","state":"applied","threads":[],'
        '"masks":[{"pid":1,"start_ticks":1,"cpus":""}]}',
        '{"version":1,"id":"x","time":1.0,"pid":1,"start_ticks":1,"cpus":"0-1","state":"applied","threads":[],'
        '"masks":[{"pid":1,"start_ticks":null,"cpus":"0"}]}',
        '{"version":1,"id":"x","time":1.0,"pid":1,"start_ticks":1,"cpus":"0-1","state":"applied","threads":[],'
        '"masks":{"1":"0"}}',
    ],
)
def test_a_corrupt_journal_is_one_line_of_our_own_error_and_is_left_alone(tmp_path: Path, line: str) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    good = entry(10, {0})
    journal.add(good)
    text = journal.path.read_text() + line + "\n"
    journal.path.write_text(text)
    with pytest.raises(JournalError) as caught:
        journal.entries()
    message = str(caught.value)
    assert isinstance(caught.value, AffmonError)
    assert "\n" not in message
    assert message.startswith(f"the affmon journal {journal.path} is corrupt at line 2 (")
    assert message.endswith("); move it aside to continue")
    with pytest.raises(JournalError):
        journal.add(entry(20, {1}))
    with pytest.raises(JournalError):
        journal.remove(good.id)
    assert journal.path.read_text() == text  # never rewritten over the user's data


def test_an_unreadable_journal_is_one_line_in_a_fresh_process_without_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b"\xff\xfe garbage\n")
    code = (
        "import sys\n"
        "from affmon.actions.journal import Journal, expected_masks\n"
        "from affmon.core.errors import AffmonError\n"
        "try:\n"
        "    expected_masks(Journal(sys.argv[1]))\n"
        "except AffmonError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0 and out.stderr == ""
    assert out.stdout.count("\n") == 1 and out.stdout.startswith(f"cannot read the affmon journal {path}: ")


def test_expected_masks_are_the_newest_applied_pin_of_each_process(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    assert expected_masks(journal) == {}
    journal.add(entry(10, {0, 1}))
    journal.add(entry(20, {2}, children=(21,)))
    journal.add(entry(10, {3}))  # re-pinned later: the newer pin counts
    journal.add(entry(30, {4}, state="pending"))  # crashed half way: not a pin in force
    journal.add(entry(40, {5}, state="rolled-back"))
    journal.add(entry(50, {6}, state="undone"))
    # Keyed by (PID, start time): the target's from the entry, a child's from its main thread.
    assert expected_masks(journal) == {(10, 100): {3}, (20, 100): {2}, (21, 200): {2}}


def test_default_path_follows_xdg_state_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert default_journal_path() == tmp_path / "xdg" / "affmon" / "journal.jsonl"
    assert Journal().path == default_journal_path()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for unset in ("", "relative/path"):  # the XDG spec: ignore a relative path
        monkeypatch.setenv("XDG_STATE_HOME", unset)
        assert default_journal_path() == tmp_path / "home" / ".local" / "state" / "affmon" / "journal.jsonl"


WRITER = """
import sys
from affmon.actions.journal import Journal, JournalEntry, new_entry_id
journal = Journal(sys.argv[1])
for i in range(25):
    journal.add(JournalEntry(new_entry_id(), 0.0, int(sys.argv[2]), None, frozenset({i % 2})))
"""


def test_two_writers_at_once_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(pid)], cwd=REPO) for pid in (1000, 2000)]
    assert [w.wait(timeout=30) for w in writers] == [0, 0]
    entries = Journal(path).entries()
    assert sorted(e.pid for e in entries).count(1000) == 25
    assert len(entries) == 50 and len({e.id for e in entries}) == 50


def test_updating_an_entry_that_is_not_there_is_an_error(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    ghost = entry(10, {0})
    with pytest.raises(JournalError, match="no entry"):
        journal.update(ghost)
    journal.add(ghost)
    journal.update(replace(ghost, state="undone"))
    assert journal.get(ghost.id).state == "undone"
    with pytest.raises(JournalError, match="no entry nope"):
        journal.get("nope")


def test_pinned_masks_never_stop_a_view(tmp_path, monkeypatch):
    from affmon.actions.journal import pinned_masks

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert pinned_masks() == {}  # no journal yet
    (tmp_path / "affmon").mkdir()
    (tmp_path / "affmon" / "journal.jsonl").write_text("{not json\n")
    assert pinned_masks() == {}  # damaged: `affmon undo` is where it is reported
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.setattr("pathlib.Path.home", lambda: (_ for _ in ()).throw(RuntimeError("no home")))
    assert pinned_masks() == {}
