"""A tune owns its job for the length of the tune. The scenarios run in a private PID
namespace with their own journal and lease directory (``tests/helpers/tune_lease.py``); the
lease's own rules (whose files count, links, a dying holder) on files the test makes."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from affmon.actions.lease import Lease, LeaseHeld, lease_dir, leases_of

SCENARIOS = Path(__file__).parent.parent / "helpers" / "tune_lease.py"


def scenario(mode: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, str(SCENARIOS), mode], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    found: dict[str, Any] = json.loads(out.stdout)
    return found


def one_line(stderr: str) -> bool:
    return len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr


def test_a_pin_during_a_tune_refuses_and_with_force_ends_the_tune_first():
    got = scenario("pin_during_tune")
    assert got["during"] != got["before"]  # a trial was in force
    pin = got["pin"]
    assert pin["status"] != 0 and one_line(pin["stderr"]) and "is being tuned by affmon PID" in pin["stderr"]
    assert got["after_refused_pin"] == got["during"]  # the refused pin changed nothing
    forced = got["pin_force"]
    assert forced["status"] == 0 and "ending that tune first" in forced["stderr"]
    assert got["tune"]["status"] == 130 and "masks from before tune started are back" in got["tune"]["stderr"]
    main = str(got["info"]["pid"])
    assert got["after_force"][main] == [got["cpus"][0]]  # the forced pin, on top of the restored masks
    assert got["undo"]["status"] == 0
    assert got["after"] == got["before"]  # undo of that pin: every mask from before tune
    assert got["leases_after"] == []


def test_a_second_tune_of_the_job_refuses_naming_the_first():
    got = scenario("two_tunes")
    second = got["second"]
    assert second["status"] != 0 and one_line(second["stderr"])
    holder = got["leases_during"][0].rsplit(".", 1)[1]
    assert f"is being tuned by affmon PID {holder}" in second["stderr"]
    assert got["after_second"] == got["during"]
    assert got["after"] == got["before"] and got["leases_after"] == []


def test_sighup_restores_like_sigterm():
    got = scenario("sighup")
    assert got["during"] != got["before"]
    assert got["tune"]["status"] == 130 and "Traceback" not in got["tune"]["stderr"]
    assert got["after"] == got["before"] and got["leases_after"] == []


def test_a_killed_tune_is_named_by_the_next_affmon_and_undo_clears_it():
    got = scenario("sigkill")
    assert got["after_kill"] == got["during"]  # SIGKILL: nothing could put the trial back
    assert got["leases_after_kill"] == got["leases_during"]  # its lease file stays, unlocked
    pin = got["pin"]
    assert (
        "ended without putting the masks back" in pin["stderr"] and f"affmon undo {got['info']['pid']}" in pin["stderr"]
    )
    assert got["undo"]["status"] == 0
    assert got["after"] == got["before"] and got["leases_after"] == []


# -- the lease's rules ---------------------------------------------------------------------


@pytest.fixture
def leases(tmp_path, monkeypatch):
    where = tmp_path / "leases"
    where.mkdir()
    where.chmod(0o1777)
    monkeypatch.setenv("AFFMON_LEASE_DIR", str(where))
    return where


JOB = (4242, 777)


def test_a_lease_is_taken_given_back_and_refused_while_held(leases):
    first = Lease(JOB, os.geteuid())
    first.acquire()
    assert first.path is not None and first.path.exists()
    with pytest.raises(LeaseHeld) as held:
        Lease(JOB, os.geteuid()).acquire()
    assert f"affmon PID {os.getpid()}" in str(held.value)
    first.release()
    assert not list(leases.iterdir())
    with Lease(JOB, os.geteuid()) as again:
        assert again.held


def test_a_dead_holder_leaves_a_stale_lease_not_a_held_one(leases):
    path = leases / f"affmon-tune.{JOB[0]}.{JOB[1]}.99999"
    path.write_text(json.dumps({"pid": 99999, "start": 1, "since": 1.0}))
    seen = leases_of(JOB, os.geteuid())
    assert seen.held == () and [h.pid for h in seen.stale] == [99999]
    lease = Lease(JOB, os.geteuid())
    lease.acquire()  # a stale lease holds no one off, and is named
    assert [h.pid for h in lease.stale] == [99999]
    lease.release()


def test_a_file_held_by_a_process_that_is_not_ours_counts_only_when_root_or_the_job_owner_made_it(leases):
    """A lease file made by a user who cannot change the job's masks holds no one off, even
    while that user holds its lock."""
    path = leases / f"affmon-tune.{JOB[0]}.{JOB[1]}.12345"
    path.write_text(json.dumps({"pid": 12345, "start": 1, "since": 1.0}))
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        me = os.geteuid()
        assert [h.pid for h in leases_of(JOB, me).held] == [12345]  # made by root (or the owner): it counts
        os.chown(path, 65534, 65534)  # made by "nobody", who owns neither the job nor root
        stranger = 65533 if me == 0 else me
        assert leases_of(JOB, stranger).held == ()
        Lease(JOB, stranger).acquire()  # not held off
    finally:
        os.close(fd)


def test_a_link_in_the_lease_directory_is_not_followed(leases, tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text(json.dumps({"pid": 1, "start": 1, "since": 1.0}))
    (leases / f"affmon-tune.{JOB[0]}.{JOB[1]}.1").symlink_to(target)
    assert leases_of(JOB, os.geteuid()) == leases_of(JOB, None)
    assert leases_of(JOB, os.geteuid()).held == () and leases_of(JOB, os.geteuid()).stale == ()


def test_a_directory_others_may_write_without_the_sticky_bit_is_not_used(tmp_path, monkeypatch):
    where = tmp_path / "open"
    where.mkdir()
    where.chmod(0o777)
    monkeypatch.setenv("AFFMON_LEASE_DIR", str(where))
    assert lease_dir() is None
    where.chmod(0o1777)
    assert lease_dir() == where
