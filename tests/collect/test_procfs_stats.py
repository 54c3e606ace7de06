"""``ProcFs.stats``: each process's stat line through a file kept open between ticks,
read again from its start; a file whose process ended is opened again by PID (a reused PID
reads as the new process), files of PIDs no longer listed are closed, and at most
``STAT_FDS_KEPT`` stay open."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import time
from pathlib import Path

from affmon.collect import procfs
from affmon.collect.procfs import ProcFs, parse_stat_bytes


def open_fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


def state_of(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]


def test_a_kept_file_reads_the_line_anew_and_is_closed_once_its_pid_is_not_listed():
    child = subprocess.Popen(["sleep", "60"])
    proc = ProcFs("/")
    try:
        before = open_fds()
        first = dict(proc.stats([child.pid]))
        assert parse_stat_bytes(first[child.pid]).pid == child.pid
        kept = open_fds() - before
        assert len(kept) == 1  # its file stays open
        os.kill(child.pid, signal.SIGSTOP)
        for _ in range(100):
            if state_of(child.pid) == "T":
                break
            time.sleep(0.02)
        again = dict(proc.stats([child.pid]))
        assert parse_stat_bytes(again[child.pid]).state == "T"  # the same file, read anew
        assert open_fds() - before == kept  # and no other opened
        assert dict(proc.stats([])) == {}
        assert open_fds() - before == set()  # not listed any more: closed
    finally:
        child.kill()
        child.wait()
        proc.close()


def test_a_file_whose_process_ended_is_opened_again_for_the_pid_and_a_gone_pid_gives_nothing():
    ended = subprocess.Popen(["sleep", "60"])
    ended_fd = os.open(f"/proc/{ended.pid}/stat", os.O_RDONLY)
    ended.kill()
    ended.wait()  # reaped: its file now reads as ESRCH
    live = subprocess.Popen(["sleep", "60"])
    proc = ProcFs("/")
    try:
        # The PID's kept file is that of a process that has ended (what a reused PID leaves).
        proc._stat_fds[live.pid] = ended_fd
        lines = dict(proc.stats([live.pid, ended.pid]))
        assert list(lines) == [live.pid]  # the ended PID: nothing, no error
        assert parse_stat_bytes(lines[live.pid]).pid == live.pid  # the process the PID names now
        # the file kept now is the live process's own (a closed number may be given out again)
        assert parse_stat_bytes(os.pread(proc._stat_fds[live.pid], 4096, 0)).pid == live.pid
    finally:
        live.kill()
        live.wait()
        proc.close()


def test_no_more_than_the_cap_stay_open_and_close_closes_them(monkeypatch):
    monkeypatch.setattr(procfs, "STAT_FDS_KEPT", 2)
    children = [subprocess.Popen(["sleep", "60"]) for _ in range(4)]
    proc = ProcFs("/")
    try:
        before = open_fds()
        pids = [c.pid for c in children]
        for _ in range(2):
            lines = dict(proc.stats(pids))
            assert sorted(lines) == sorted(pids)  # every one read
            assert len(open_fds() - before) == 2  # two kept
        proc.close()
        assert open_fds() - before == set()
    finally:
        for c in children:
            c.kill()
            c.wait()


def test_a_recorded_tree_is_read_file_by_file(tmp_path):
    (tmp_path / "proc" / "7").mkdir(parents=True)
    (tmp_path / "proc" / "7" / "stat").write_bytes(b"7 (x) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0\n")
    proc = ProcFs(str(tmp_path))
    before = open_fds()
    assert [pid for pid, _ in proc.stats([7, 8])] == [7]
    assert open_fds() == before


def test_an_eighth_of_the_open_file_limit_at_most_stays_open(monkeypatch):
    monkeypatch.setattr(procfs, "_descriptor_limit", lambda: 24)  # the exporter runs with limits this low
    children = [subprocess.Popen(["sleep", "60"]) for _ in range(5)]
    proc = ProcFs("/")
    try:
        before = open_fds()
        assert len(dict(proc.stats([c.pid for c in children]))) == 5
        assert len(open_fds() - before) == 3
    finally:
        proc.close()
        for c in children:
            c.kill()
            c.wait()


def test_out_of_descriptors_the_kept_files_are_given_back_and_the_line_still_read(monkeypatch):
    first, second = subprocess.Popen(["sleep", "60"]), subprocess.Popen(["sleep", "60"])
    proc = ProcFs("/")
    try:
        before = open_fds()
        assert list(dict(proc.stats([first.pid]))) == [first.pid]
        assert len(open_fds() - before) == 1
        real_open, refused = os.open, []

        def short_of_descriptors(path, *args, **kwargs):
            if path == f"/proc/{second.pid}/stat" and not refused:
                refused.append(path)
                raise OSError(errno.EMFILE, "Too many open files")
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr(os, "open", short_of_descriptors)
        lines = dict(proc.stats([first.pid, second.pid]))
        assert refused and sorted(lines) == sorted([first.pid, second.pid])  # read all the same
        assert parse_stat_bytes(lines[second.pid]).pid == second.pid
        assert open_fds() - before == set()  # the kept one was closed to make room
    finally:
        proc.close()
        for c in (first, second):
            c.kill()
            c.wait()


def test_a_process_started_after_a_listing_is_in_the_next_and_one_that_ended_is_not():
    """``listed_pids`` keeps its listing only while the kernel has given out no PID since:
    a process started in between is listed at once; one that ended is listed no more once
    ``stats`` has found it gone."""
    proc = ProcFs("/")
    try:
        assert proc._last_pid() is not None  # /proc is this process's namespace's: the listing is kept
        before = proc.listed_pids(time.monotonic())
        child = subprocess.Popen(["sleep", "60"])
        try:
            listed = proc.listed_pids(time.monotonic())
            assert child.pid in listed and child.pid not in before
            assert dict(proc.stats(listed))[child.pid]
        finally:
            child.kill()
            child.wait()
        assert child.pid in proc.listed_pids(time.monotonic())  # kept: nothing new, nothing found gone
        assert child.pid not in dict(proc.stats(proc.listed_pids(time.monotonic())))
        assert child.pid not in proc.listed_pids(time.monotonic())
    finally:
        proc.close()


def test_the_listing_is_kept_while_no_pid_was_given_out_and_read_again_when_one_was_or_when_old(monkeypatch):
    last = [b"100"]
    listings = []
    monkeypatch.setattr(ProcFs, "_last_pid", lambda self: last[0])
    monkeypatch.setattr(ProcFs, "pids", lambda self: listings.append(1) or [1, 2, 3])
    proc = ProcFs("/")
    assert proc.listed_pids(10.0) == [1, 2, 3] and len(listings) == 1
    assert proc.listed_pids(11.0) == [1, 2, 3] and len(listings) == 1  # kept
    last[0] = b"101"
    assert proc.listed_pids(12.0) == [1, 2, 3] and len(listings) == 2  # a PID was given out since
    assert proc.listed_pids(12.0 + procfs.RELIST_PIDS_S) == [1, 2, 3] and len(listings) == 3  # old
    proc._relist = True  # what stats sets when a listed process is gone
    proc.listed_pids(18.0)
    assert len(listings) == 4
    last[0] = None  # /proc/self is not this process: no kept listing
    proc.listed_pids(18.0)
    proc.listed_pids(18.0)
    assert len(listings) == 6
