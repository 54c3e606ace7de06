"""Undo of an isolating pin, in a private PID namespace with its own journal
(``unshare --pid --fork --mount-proc``: the pins touch only the namespace's processes).

A job is pinned to one CPU with ``--isolate``; a neighbour of the same user is moved off
that CPU. The neighbour has a thread that pinned itself to the job's CPU on purpose;
isolation leaves it and says so. After the pin the neighbour starts threads and forks a
child that starts threads of its own (a data loader, a service): they inherit the mask
isolation gave. Someone else changes one of the moved threads, and one new thread sets
its own mask. Undo puts every task still on isolation's mask back, the child's too, and
names the two it leaves.

Run alone: ``python tests/actions/test_isolate_undo.py SCENARIO`` prints the scenario's JSON.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO))  # run as a script inside the namespace too

from tests.helpers.live import needs_namespace, run_in_namespace, scenario_main  # noqa: E402
from tests.helpers.proc import start_ticks, thread_masks  # noqa: E402


@needs_namespace
def test_undo_of_an_isolating_pin_restores_what_the_moved_process_started_since() -> None:
    got = run_in_namespace(__file__, "isolate_then_grow")
    assert got["pin_ok"], got["pin_error"]
    # The thread that chose the job's CPU is not isolation's to move: left, and said.
    assert got["self_pinned_after_pin"] == got["B"]
    assert any("pinned itself" in m for m in got["self_pinned_notes"])
    assert got["moved_after_pin"] == [got["A"]]
    assert got["born_after_pin"] >= 7  # 5 threads of the neighbour, its child and the child's 2
    assert got["undo_ok"], got["undo_error"]
    # Every task still on isolation's mask is back on its old one, the child's too.
    assert got["left_on_isolation_mask"] == []
    assert got["child_masks"] == [got["BOTH"]]
    # The two it leaves are named: one changed by someone else, one that set its own mask.
    assert got["changed_named"] and got["changed_mask"] == got["B"]
    assert got["own_named"] and got["own_mask"] == got["B"]
    assert got["self_pinned_after_undo"] == got["B"]


# -- the scenario, inside the namespace ----------------------------------------------------

NEIGHBOUR = """
import os, sys, threading
b = int(sys.argv[1])
stop = threading.Event()

def wait(cpus=None, said=None):
    if cpus is not None:
        os.sched_setaffinity(0, cpus)
    if said is not None:
        said.append(threading.get_native_id())
    stop.wait()

def start(n, cpus=None):
    said = []
    threads = [threading.Thread(target=wait, args=(cpus, said), daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    while len(said) < n:
        threading.Event().wait(0.01)
    return said

for _ in range(3):
    start(1)
print(start(1, {b})[0], flush=True)  # the thread that pinned itself
for line in sys.stdin:
    command = line.split()
    if command[0] == "threads":
        print(" ".join(map(str, start(int(command[1])))), flush=True)
    elif command[0] == "own":
        print(start(1, {int(command[1])})[0], flush=True)
    elif command[0] == "fork":
        child = os.fork()
        if child == 0:
            start(2)
            stop.wait()
        print(child, flush=True)
"""


def _ask(proc: subprocess.Popen[str], command: str) -> list[int]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(command + "\n")
    proc.stdin.flush()
    return [int(x) for x in proc.stdout.readline().split()]


def isolate_then_grow(state: Path) -> dict[str, Any]:
    from affmon.actions.journal import Journal
    from affmon.actions.pin import pin
    from affmon.actions.undo import undo

    both = frozenset(os.sched_getaffinity(0))
    a, b = sorted(both)[:2]
    journal = Journal(state / "journal.jsonl")
    job = subprocess.Popen(
        [sys.executable, "-c", "import sys; print(flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    neighbour = subprocess.Popen(
        [sys.executable, "-c", NEIGHBOUR, str(b)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert job.stdout is not None and neighbour.stdout is not None
        job.stdout.readline()
        self_pinned = int(neighbour.stdout.readline())
        before = thread_masks(neighbour.pid, skip_exited=True)
        result = pin(
            job.pid,
            {b},
            journal=journal,
            isolate=True,
            isolate_candidates=[(neighbour.pid, start_ticks(neighbour.pid))],
        )
        after_pin = thread_masks(neighbour.pid, skip_exited=True)
        moved = sorted({tuple(sorted(m)) for t, m in after_pin.items() if t != self_pinned})
        born = _ask(neighbour, "threads 5")
        child = _ask(neighbour, "fork")[0]
        deadline = time.monotonic() + 10
        while len(thread_masks(child, skip_exited=True)) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        changed = next(t for t in sorted(before) if t not in (neighbour.pid, self_pinned))
        os.sched_setaffinity(changed, {b})  # someone else changes a moved thread since
        own = _ask(neighbour, f"own {b}")[0]
        born_count = len(born) + len(thread_masks(child, skip_exited=True))
        undone = undo(journal, job.pid)
        now = {**thread_masks(neighbour.pid, skip_exited=True), **thread_masks(child, skip_exited=True)}
        by_tid = {t.tid: t for t in undone.threads}
        return {
            "A": [a],
            "B": [b],
            "BOTH": sorted(both),
            "pin_ok": result.ok,
            "pin_error": result.error,
            "self_pinned_after_pin": sorted(after_pin[self_pinned]),
            "self_pinned_notes": [t.message for t in result.threads if t.tid == self_pinned],
            "moved_after_pin": [list(m) for m in moved],
            "born_after_pin": born_count,
            "undo_ok": undone.ok,
            "undo_error": undone.error,
            "left_on_isolation_mask": sorted(t for t, m in now.items() if m == {a}),
            "child_masks": sorted({tuple(sorted(m)) for m in thread_masks(child, skip_exited=True).values()}),
            "changed_named": changed in by_tid and "changed since the pin" in by_tid[changed].message,
            "changed_mask": sorted(now[changed]),
            "own_named": own in by_tid and "its own mask" in by_tid[own].message,
            "own_mask": sorted(now[own]),
            "self_pinned_after_undo": sorted(now[self_pinned]),
        }
    finally:
        neighbour.kill()
        job.kill()


if __name__ == "__main__":
    sys.exit(scenario_main([isolate_then_grow]))
