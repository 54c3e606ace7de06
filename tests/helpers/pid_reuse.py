"""Attack: the kernel gives a pinned process's PID, or a pinned thread's TID, to a newcomer;
affmon must never take the newcomer for the task it pinned. Run as root:
``python tests/helpers/pid_reuse.py [--only pid|tid]``.

The script runs itself again inside ``unshare --pid --fork --mount-proc``: in a new PID
namespace, writing N-1 to ``/proc/sys/kernel/ns_last_pid`` makes the next task created
(process or thread) get the number N, so the reuse is certain rather than a matter of
waiting for ``pid_max`` to wrap. Two scenarios, with a journal in a temporary
``XDG_STATE_HOME``:

``pid``: a process is pinned with ``affmon pin PID --cpus B``; as a control, its masks are
changed behind affmon's back and ``affmon diagnose --pid PID`` must raise AFFINITY_DRIFT.
It is killed, and a new process gets its PID: main thread on CPU A (neither the pinned
mask nor the old one), a second thread on B (the pinned mask). ``affmon undo PID`` must
change none of the newcomer's masks and say that the pin's processes have exited;
``affmon diagnose --pid PID`` must raise no AFFINITY_DRIFT for it.

``tid``: a process whose second thread set its own mask (CPU A) is pinned to B; that thread
exits, and the pinned main thread starts a new one that gets its TID (and so the pinned
mask). ``affmon undo PID`` must give the newcomer the main thread's old mask (A,B), what it
would have inherited without the pin, not the exited thread's (A), and say that the
journaled thread's TID now belongs to a newer thread.

Prints each step and each check (PASS or FAIL); exits 1 when a check fails, 2 when the
scenario could not be set up (not root, fewer than two CPUs, no reuse after retries).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO))  # run as a script: the repository's tests package

from tests.helpers.proc import start_ticks, thread_masks  # noqa: E402

WORKLOAD = Path(__file__).resolve().parent.parent / "helpers" / "workload.py"
NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"
T = TypeVar("T")
TRY_S = 10.0  # how long to keep trying to have a number reused


class SetupError(Exception):
    """The scenario could not be set up: nothing was checked."""


class Checks:
    def __init__(self) -> None:
        self.failed = 0

    def check(self, ok: bool, what: str, detail: object = "") -> None:
        print(f"check: {'PASS' if ok else 'FAIL'} {what}" + (f" ({detail})" if detail != "" else ""), flush=True)
        self.failed += not ok


def step(text: str) -> None:
    print(f"step: {text}", flush=True)


def masks(pid: int) -> dict[int, frozenset[int]]:
    """tid -> the mask of every thread of ``pid`` still alive."""
    return thread_masks(pid, skip_exited=True)


def uptime_ticks() -> int:
    with open("/proc/uptime") as f:
        return int(float(f.read().split()[0]) * os.sysconf("SC_CLK_TCK"))


def wait_past(ticks: int, timeout_s: float = 10.0) -> None:
    """Until the clock-tick count of the boot clock is past ``ticks``: a task started from now
    on has a later start time than one started at ``ticks``."""
    deadline = time.monotonic() + timeout_s
    while uptime_ticks() <= ticks:
        if time.monotonic() > deadline:
            raise SetupError("the boot clock did not advance")
        time.sleep(0.005)


def next_number_is(number: int) -> None:
    with open(NS_LAST_PID, "w") as f:
        f.write(str(number - 1))


def reuse(number: int, make: Callable[[], T], number_of: Callable[[T], int], drop: Callable[[T], None]) -> T:
    """``make`` a task that gets ``number``: set ``ns_last_pid`` and try, a little later each
    time. The number of a task that has just ended is not always free at once: on a busy
    2-core machine, a thread started right after another's join returned got the next number
    in about half the runs, and the old one 10 ms later."""
    deadline = time.monotonic() + TRY_S
    attempt = 0
    while time.monotonic() < deadline:
        attempt += 1
        next_number_is(number)
        task = make()
        if number_of(task) == number:
            return task
        step(f"attempt {attempt}: the new task got {number_of(task)}, not {number}; again")
        drop(task)
        time.sleep(min(0.01 * attempt, 0.2))
    raise SetupError(f"no new task got {number} in {attempt} attempts")


def affmon(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    step(f"affmon {' '.join(args)}")
    out = subprocess.run(
        [sys.executable, "-m", "affmon", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    for line in out.stderr.splitlines():
        print(f"    stderr: {line}", flush=True)
    return out


def drift_codes(out: subprocess.CompletedProcess[str], pid: int) -> list[str] | None:
    """The codes of the findings about ``pid`` in ``affmon diagnose --json``'s output; None
    when it did not run."""
    if out.returncode not in (0, 1):
        return None
    findings = json.loads(out.stdout)["findings"]
    return [f["code"] for f in findings if f["pid"] == pid or f["evidence"].get("pid") == pid]


class Process:
    """A child process that prints one JSON line when ready; answers commands if asked."""

    def __init__(self, args: list[str]) -> None:
        self.popen = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.popen.stdout is not None
        line = self.popen.stdout.readline()
        if not line:
            raise SetupError(f"{args} did not start (exit {self.popen.wait()})")
        self.info: dict[str, Any] = json.loads(line)
        self.pid = self.popen.pid

    def send(self, command: str) -> Any:
        assert self.popen.stdin is not None and self.popen.stdout is not None
        self.popen.stdin.write(command + "\n")
        self.popen.stdin.flush()
        return json.loads(self.popen.stdout.readline())

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()
        for pipe in (self.popen.stdin, self.popen.stdout):
            if pipe is not None:
                pipe.close()


# -- pid -------------------------------------------------------------------------------


def pid_scenario(checks: Checks, env: dict[str, str], a: int, b: int) -> None:
    everything = frozenset(os.sched_getaffinity(0))
    victim = Process([sys.executable, str(WORKLOAD), "--sleepers", "1"])
    pid = victim.pid
    step(f"started PID {pid} (start {start_ticks(pid)}), threads {sorted(masks(pid))}, on CPUs {sorted(everything)}")
    pinned = affmon(env, "pin", str(pid), "--cpus", str(b))
    if pinned.returncode != 0 or set(masks(pid).values()) != {frozenset({b})}:
        raise SetupError(f"the pin of {pid} did not take: exit {pinned.returncode}, masks {masks(pid)}")
    for tid in masks(pid):
        os.sched_setaffinity(tid, everything)
    step(f"set every thread of {pid} back to {sorted(everything)} behind affmon's back")
    control = affmon(env, "diagnose", "--pid", str(pid), "--samples", "3", "--interval", "0.2", "--json")
    codes = drift_codes(control, pid)
    checks.check(
        codes is not None and "AFFINITY_DRIFT" in codes, "control: diagnose sees the pinned process drift", codes
    )
    old_start = start_ticks(pid)
    victim.kill()
    step(f"killed PID {pid}")
    wait_past(old_start)
    newcomer = reuse(
        pid,
        lambda: Process([sys.executable, str(WORKLOAD), "--cpus", str(a), "--sleepers", "1", "--sleeper-cpus", str(b)]),
        lambda p: p.pid,
        lambda p: p.kill(),
    )
    try:
        new_start = start_ticks(pid)
        before = masks(pid)
        step(f"a new process has PID {pid} (start {new_start}, the pinned one {old_start}); masks {fmt(before)}")
        if new_start == old_start:
            raise SetupError("the new process has the old one's start time")
        diagnosed = affmon(env, "diagnose", "--pid", str(pid), "--samples", "3", "--interval", "0.2", "--json")
        codes = drift_codes(diagnosed, pid)
        checks.check(codes is not None and "AFFINITY_DRIFT" not in codes, "diagnose raises no AFFINITY_DRIFT", codes)
        undone = affmon(env, "undo", str(pid))
        after = masks(pid)
        checks.check(after == before, "undo leaves every mask of the new process as it was", fmt(after))
        checks.check(
            undone.returncode == 1
            and f"nothing to undo for PID {pid} (every process its pin touched has exited)" in undone.stderr
            and len(undone.stderr.splitlines()) == 1,
            "undo says the pinned process has exited, in one line",
            f"exit {undone.returncode}",
        )
    finally:
        newcomer.kill()


# -- tid -------------------------------------------------------------------------------


def start_thread(cpus: set[int] | None) -> tuple[int, threading.Event, threading.Thread]:
    """A thread that waits until its event is set, after setting ``cpus`` on itself when
    given; returns once it runs, with its TID."""
    stop = threading.Event()
    started = threading.Event()
    tids: list[int] = []

    def run() -> None:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        tids.append(threading.get_native_id())
        started.set()
        stop.wait()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait()
    return tids[0], stop, thread


def serve_threads() -> None:
    """The ``tid`` scenario's target: ``start [CPUS]`` starts a thread from the main thread
    (setting CPUS on itself first, when given) and answers its TID; ``end TID`` ends it."""
    threads: dict[int, tuple[threading.Event, threading.Thread]] = {}
    print(json.dumps({"pid": os.getpid()}), flush=True)
    for line in sys.stdin:
        command, _, arg = line.strip().partition(" ")
        answer: object
        if command == "start":
            tid, stop, thread = start_thread({int(c) for c in arg.split(",")} if arg else None)
            threads[tid] = (stop, thread)
            answer = tid
        elif command == "end":
            stop, thread = threads.pop(int(arg))
            stop.set()
            thread.join()
            answer = int(arg)
        else:
            answer = f"unknown command {command!r}"
        print(json.dumps(answer), flush=True)


def tid_scenario(checks: Checks, env: dict[str, str], a: int, b: int) -> None:
    everything = frozenset(os.sched_getaffinity(0))
    target = Process([sys.executable, __file__, "--serve-threads"])
    pid = target.pid
    try:
        old = target.send(f"start {a}")
        old_start = start_ticks(pid, old)
        step(f"PID {pid}: thread {old} set its own mask {a} (start {old_start}); masks {fmt(masks(pid))}")
        pinned = affmon(env, "pin", str(pid), "--cpus", str(b))
        if pinned.returncode != 0 or set(masks(pid).values()) != {frozenset({b})}:
            raise SetupError(f"the pin of {pid} did not take: exit {pinned.returncode}, masks {masks(pid)}")
        target.send(f"end {old}")
        step(f"thread {old} exited")
        wait_past(old_start)
        new = reuse(old, lambda: int(target.send("start")), lambda tid: tid, lambda tid: target.send(f"end {tid}"))
        new_start = start_ticks(pid, new)
        step(f"the main thread started thread {new} (start {new_start}); masks {fmt(masks(pid))}")
        if new_start == old_start or masks(pid)[new] != {b}:
            raise SetupError("the new thread has the old one's start time, or not the pinned mask")
        undone = affmon(env, "undo", str(pid), "--json")
        checks.check(undone.returncode == 0, "undo succeeds", f"exit {undone.returncode}")
        now = masks(pid)
        checks.check(now[pid] == everything, "the main thread is back on its old mask", fmt(now))
        checks.check(
            now[new] == everything,
            f"the new thread {new} gets the main thread's old mask {fmt_cpus(everything)}, not the exited thread's {a}",
            fmt_cpus(now[new]),
        )
        said = [
            (t["status"], t["message"]) for t in json.loads(undone.stdout or "{}").get("threads", []) if t["tid"] == old
        ]
        checks.check(
            said
            == [
                ("exited", "its TID now belongs to a newer thread"),
                ("restored", "created after the pin: its pinned process's old mask"),
            ],
            "undo says the journaled thread's TID belongs to a newer thread, which it restored",
            said,
        )
    finally:
        target.kill()


# -- running ---------------------------------------------------------------------------


def fmt_cpus(cpus: frozenset[int]) -> str:
    return ",".join(map(str, sorted(cpus)))


def fmt(by_tid: dict[int, frozenset[int]]) -> str:
    return " ".join(f"{tid}:{fmt_cpus(cpus)}" for tid, cpus in sorted(by_tid.items()))


def inside(only: str | None) -> int:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("setup: needs two CPUs", flush=True)
        return 2
    a, b = cpus[:2]
    state = tempfile.mkdtemp(prefix="affmon-pid-reuse-")
    env = {**os.environ, "XDG_STATE_HOME": state, "PYTHONPATH": str(REPO)}
    checks = Checks()
    try:
        for name, scenario in (("pid", pid_scenario), ("tid", tid_scenario)):
            if only in (None, name):
                print(f"== {name} reuse", flush=True)
                scenario(checks, env, a, b)
    except SetupError as exc:
        print(f"setup: {exc}", flush=True)
        return 2
    finally:
        shutil.rmtree(state, ignore_errors=True)
    print(f"result: {checks.failed} check(s) failed", flush=True)
    return 1 if checks.failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--only", choices=("pid", "tid"), default=None, help="run one scenario")
    ap.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)  # already in the namespace
    ap.add_argument("--serve-threads", action="store_true", help=argparse.SUPPRESS)  # the tid scenario's target
    a = ap.parse_args()
    if a.serve_threads:
        serve_threads()
        return 0
    if a.inside:
        return inside(a.only)
    if os.geteuid() != 0:
        print("setup: needs root (a PID namespace, and ns_last_pid)", file=sys.stderr)
        return 2
    unshare = shutil.which("unshare")
    if unshare is None:
        print("setup: needs unshare (util-linux)", file=sys.stderr)
        return 2
    only = ["--only", a.only] if a.only else []
    argv = [unshare, "--pid", "--fork", "--mount-proc", sys.executable, __file__, "--inside", *only]
    return subprocess.run(argv, cwd=REPO).returncode


if __name__ == "__main__":
    sys.exit(main())
