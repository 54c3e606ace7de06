"""Who ``--isolate`` may move off a job's CPUs: the rule as a table and as properties, then
the real thing as root, with a busy process of root's, one of nobody's, one pinned on
purpose under ``taskset``, and PID 1 (whose threads the test refuses to let anything set)."""

from __future__ import annotations

import errno
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from affmon.actions.journal import Journal
from affmon.actions.pin import PinResult, pin
from affmon.actions.threads import OsAffinity
from affmon.actions.undo import undo
from affmon.core.model.cpuset import CpuSet, format_cpulist
from affmon.core.plan.isolation import Candidate, Kin, left_alone
from tests.helpers.live import workload
from tests.helpers.pinning import BOTH, REPO, A, B, cpus, masks
from tests.helpers.proc import start_ticks

ME = 1000
OTHERS_RULE = "; --isolate-all moves it"

# -- the rule ------------------------------------------------------------------------------


def candidate(**changes: object) -> Candidate:
    base: dict[str, object] = {
        "pid": 4242,
        "uid": ME,
        "user": "me",
        "kernel": False,
        "mask": frozenset({0, 1, 2, 3}),
        "allowed": frozenset({0, 1, 2, 3}),
    }
    return Candidate(**{**base, **changes})  # type: ignore[arg-type]


TABLE = [
    ("my own process on every CPU it may use", candidate(), False, None),
    ("mask or allowed CPUs unknown", candidate(mask=None, allowed=None), False, None),
    ("my own, mask wider than its cgroup's", candidate(allowed=frozenset({0, 1})), False, None),
    ("my own, mask outside its cgroup's", candidate(mask=frozenset({5}), allowed=frozenset({0, 1})), False, None),
    (
        "another user's",
        candidate(uid=1001, user="alice"),
        False,
        f"another user's process (alice){OTHERS_RULE}",
    ),
    (
        "another user's, no name",
        candidate(uid=1001, user=None),
        False,
        f"another user's process (UID 1001){OTHERS_RULE}",
    ),
    ("owner unknown", candidate(uid=None, user=None), False, f"another user's process (an unknown user){OTHERS_RULE}"),
    (
        "pinned on purpose",
        candidate(mask=frozenset({2, 3})),
        False,
        f"pinned on purpose to CPUs 2-3{OTHERS_RULE}",
    ),
    ("narrowed by an earlier affmon isolate", candidate(mask=frozenset({2, 3}), moved_by_affmon=True), False, None),
    ("a kernel thread", candidate(kernel=True, uid=0, user="root"), False, "a kernel thread"),
    ("PID 1", candidate(pid=1), False, "PID 1 (init)"),
    ("PID 1 of another user", candidate(pid=1, uid=0, user="root"), False, "PID 1 (init)"),
    ("all: another user's", candidate(uid=1001, user="alice"), True, None),
    ("all: pinned on purpose", candidate(mask=frozenset({2})), True, None),
    ("all: a kernel thread", candidate(kernel=True), True, "a kernel thread"),
    ("all: PID 1", candidate(pid=1, uid=0, user="root"), True, "PID 1 (init)"),
]


@pytest.mark.parametrize(("case", "c", "isolate_all", "expected"), TABLE, ids=[row[0] for row in TABLE])
def test_left_alone_table(case: str, c: Candidate, isolate_all: bool, expected: str | None) -> None:
    assert left_alone(c, ME, isolate_all=isolate_all) == expected


cpu_sets = st.one_of(st.none(), st.frozensets(st.integers(0, 7), max_size=8))
candidates = st.builds(
    Candidate,
    pid=st.integers(1, 4),
    uid=st.one_of(st.none(), st.sampled_from([0, ME, 65534])),
    user=st.one_of(st.none(), st.text(max_size=8)),
    kernel=st.booleans(),
    mask=cpu_sets,
    allowed=cpu_sets,
    moved_by_affmon=st.booleans(),
)


@given(candidates, st.booleans())
def test_left_alone_properties(c: Candidate, isolate_all: bool) -> None:
    why = left_alone(c, ME, isolate_all=isolate_all)
    if c.kernel or c.pid == 1:
        assert why in ("a kernel thread", "PID 1 (init)")  # never moved, whatever the flag
    elif isolate_all:
        assert why is None
    else:
        narrowed = c.mask is not None and c.allowed is not None and c.mask < c.allowed and not c.moved_by_affmon
        assert (why is None) == (c.uid == ME and not narrowed)
        if why is not None:
            assert why.endswith(OTHERS_RULE)
    if left_alone(c, ME, isolate_all=False) is None:
        assert left_alone(c, ME, isolate_all=True) is None  # --isolate-all only widens


# -- the real thing ----------------------------------------------------------------------------


@contextmanager
def busy(*prefix: str) -> Iterator[int]:
    """``yes`` (one busy thread, not a python process) started under ``prefix``; its PID
    once the prefix has exec'd it."""
    proc = subprocess.Popen([*prefix, "yes"], stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while Path(f"/proc/{proc.pid}/comm").read_text().strip() != "yes":
            assert time.monotonic() < deadline, f"{prefix} did not start yes"
            time.sleep(0.01)
        yield proc.pid
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


AS_NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")


class GuardedOps(OsAffinity):
    """The real calls, but a set on a thread of PID 1 is recorded and refused (never made)."""

    def __init__(self) -> None:
        self.sets: list[int] = []

    def set(self, tid: int, cpus: CpuSet) -> None:
        self.sets.append(tid)
        if os.path.exists(f"/proc/1/task/{tid}"):
            raise OSError(errno.EPERM, "the test refuses to touch PID 1")
        super().set(tid, cpus)


def results_by_pid(result: PinResult) -> dict[int, set[tuple[str, str]]]:
    found: dict[int, set[tuple[str, str]]] = {}
    for t in result.threads:
        found.setdefault(t.pid, set()).add((t.status, t.message))
    return found


needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")


@needs_root
def test_isolate_moves_only_my_own_undeliberate_processes_and_isolate_all_the_others_too(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    nobody = pwd.getpwuid(65534).pw_name
    init_mask = frozenset(os.sched_getaffinity(1))
    with (
        workload("--cpus", str(A), "--sleepers", "1") as target,
        busy() as mine,
        busy(*AS_NOBODY) as theirs,
        busy("taskset", "-c", str(B)) as deliberate,
    ):
        before = {pid: masks(pid) for pid in (target["pid"], mine, theirs, deliberate)}
        assert set(before[mine].values()) == set(before[theirs].values()) == {BOTH}
        assert set(before[deliberate].values()) == {cpus(B)}
        candidates = tuple((pid, start_ticks(pid)) for pid in (mine, theirs, deliberate, 1))
        try:
            ops = GuardedOps()
            result = pin(target["pid"], cpus(B), journal=journal, ops=ops, isolate=True, isolate_candidates=candidates)
            assert result.ok, result.error
            said = results_by_pid(result)
            assert said[mine] == {("moved", "")} and set(masks(mine).values()) == {cpus(A)}
            assert said[theirs] == {("not-moved", f"left alone: another user's process ({nobody}){OTHERS_RULE}")}
            assert said[deliberate] == {("not-moved", f"left alone: pinned on purpose to CPUs {B}{OTHERS_RULE}")}
            assert said[1] == {("not-moved", "left alone: PID 1 (init)")}
            assert masks(theirs) == before[theirs] and masks(deliberate) == before[deliberate]
            init_tids = {int(tid) for tid in os.listdir("/proc/1/task")}
            assert not (set(before[theirs]) | set(before[deliberate]) | init_tids) & set(ops.sets)
            assert undo(journal).ok
            assert {pid: masks(pid) for pid in before} == before

            ops = GuardedOps()
            result = pin(
                target["pid"],
                cpus(B),
                journal=journal,
                ops=ops,
                isolate=True,
                isolate_candidates=candidates,
                isolate_all=True,
            )
            assert result.ok, result.error
            said = results_by_pid(result)
            assert said[mine] == said[theirs] == said[deliberate] == {("moved", "")}
            assert set(masks(theirs).values()) == {cpus(A)}  # A,B less B
            assert set(masks(deliberate).values()) == {cpus(A)}  # nothing left of B: what it may use, less B
            assert said[1] == {("not-moved", "left alone: PID 1 (init)")}
            assert not {int(tid) for tid in os.listdir("/proc/1/task")} & set(ops.sets)
            assert undo(journal).ok
            assert {pid: masks(pid) for pid in before} == before
        finally:  # a failed check must not leave masks changed
            if any(e.state in ("pending", "applied") for e in journal.entries()):
                undo(journal)
        assert frozenset(os.sched_getaffinity(1)) == init_mask


def test_a_mask_an_earlier_isolate_gave_is_not_taken_for_a_deliberate_one(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    with workload("--cpus", str(A), "--sleepers", "1") as target, busy() as hog:
        candidates = ((hog, start_ticks(hog)),)
        first = pin(target["pid"], cpus(B), journal=journal, isolate=True, isolate_candidates=candidates)
        assert first.ok and results_by_pid(first)[hog] == {("moved", "")}
        assert set(masks(hog).values()) == {cpus(A)}  # narrower than it may use, by affmon's doing
        second = pin(target["pid"], cpus(A), journal=journal, isolate=True, isolate_candidates=candidates)
        assert second.ok and results_by_pid(second)[hog] == {("moved", "")}
        assert set(masks(hog).values()) == {cpus(B)}
        assert undo(journal).ok
        assert set(masks(hog).values()) == {BOTH}
        assert set(masks(target["pid"]).values()) == {cpus(A)}


@needs_root
def test_the_dry_run_says_who_is_left_alone_and_why() -> None:
    nobody = pwd.getpwuid(65534).pw_name
    with (
        workload("--cpus", str(A), "--sleepers", "1") as target,
        busy(*AS_NOBODY) as theirs,
        busy("taskset", "-c", str(B)) as deliberate,
    ):
        before = {pid: masks(pid) for pid in (target["pid"], theirs, deliberate)}
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "affmon",
                "pin",
                str(target["pid"]),
                "--cpus",
                str(B),
                "--isolate",
                "--dry-run",
                "--interval",
                "0.5",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        for pid, why in (
            (theirs, f"another user's process ({nobody}){OTHERS_RULE}"),
            (deliberate, f"pinned on purpose to CPUs {B}{OTHERS_RULE}"),
        ):
            mask = format_cpulist(before[pid][pid])
            line = f"  {pid:>8} {pid:>8} {'not-moved':<10} {mask:>12} -> {mask:<12}  left alone: {why}"
            assert line in lines, out.stdout
        assert any(line.startswith("would set CPUs ") for line in lines)
        assert {pid: masks(pid) for pid in before} == before


# -- root's manners: the job's own neighbours, not the machine's ---------------------------


JOB_KIN = Kin(uid=1000, session=500, cgroup="0::/user.slice/user-1000.slice/session-3.scope\n")


def candidate(uid: int, session: int | None, cgroup: str | None) -> Candidate:
    return Candidate(
        pid=4000,
        uid=uid,
        user={0: "root", 1000: "alice"}.get(uid),
        kernel=False,
        mask=None,
        allowed=None,
        session=session,
        cgroup=cgroup,
    )


@pytest.mark.parametrize(
    ("uid", "session", "cgroup", "moved"),
    [
        (1000, 500, None, True),  # the job owner's, in the job's session
        (1000, 777, JOB_KIN.cgroup, True),  # the job owner's, in the job's cgroup
        (1000, 777, "0::/user.slice/user-1000.slice/session-9.scope\n", False),  # hers, another login
        (0, 500, JOB_KIN.cgroup, False),  # root's, though beside the job: root's is not the job owner's
        (0, 1, "0::/system.slice/libvirtd.service\n", False),  # a daemon, a guest
        (65534, 500, JOB_KIN.cgroup, False),  # another user's
    ],
)
def test_root_moves_only_the_job_owners_processes_in_its_session_or_cgroup(uid, session, cgroup, moved):
    why = left_alone(candidate(uid, session, cgroup), 0, job=JOB_KIN)
    assert (why is None) is moved, why
    assert left_alone(candidate(uid, session, cgroup), 0, job=JOB_KIN, isolate_all=True) is None


def test_a_user_not_root_moves_their_own_processes_whatever_their_session():
    assert left_alone(candidate(1000, 777, None), 1000, job=JOB_KIN) is None
    assert left_alone(candidate(0, 500, None), 1000, job=JOB_KIN) is not None


def test_root_without_the_jobs_session_and_cgroup_goes_by_the_owner_alone():
    """A recording holds no session: the proposal is the owner's processes; the pin judges
    again from /proc with the session and cgroup."""
    assert left_alone(candidate(0, 500, None), 0) is None
    assert left_alone(candidate(1000, None, None), 0, job=Kin(1000, None, None)) is None
    assert left_alone(candidate(0, None, None), 0, job=Kin(1000, None, None)) is not None
