"""The ``r`` dialog names the threads isolation leaves where they are.

A busy neighbour of the same user runs on both CPUs; two of its threads pinned themselves,
one to each CPU (a library placing its workers). For either CPU offered to a job, isolation
would move the neighbour off it but not the thread that chose that CPU: the dialog says so,
naming the thread, before Enter (``affmon.actions.isolate`` leaves it, tested in
``test_isolate_undo.py``). Read-only: the processes are sampled, nothing is pinned.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace

from affmon.collect.sampler import Sampler, Selection
from affmon.collect.sysfs_topology import read_topology
from affmon.core import fmt
from affmon.core.model.rates import make_snapshot
from affmon.core.plan.advice import occupants, propose_pin, self_pinned_threads
from affmon.core.plan.planner import Occupant
from affmon.tui.palette import Palette
from affmon.tui.screens import proposal_text
from tests.helpers.live import workload
from tests.helpers.pinning import BOTH, A, B

P = Palette("red", "yellow", "green", "cyan", "grey", "dim", "white", ("blue",))

NEIGHBOUR = """
import os, sys, threading
stop = threading.Event()
said = []

def pinned(cpu):
    os.sched_setaffinity(0, {cpu})
    said.append(threading.get_native_id())
    stop.wait()

def spin():
    while not stop.is_set():
        sum(range(2000))

for cpu in map(int, sys.argv[1:]):
    threading.Thread(target=pinned, args=(cpu,), daemon=True).start()
threading.Thread(target=spin, daemon=True).start()
while len(said) < len(sys.argv) - 1:
    stop.wait(0.01)
print(*said, flush=True)
sys.stdin.read()
"""


def test_the_dialog_names_each_thread_of_a_moved_process_that_pinned_itself() -> None:
    neighbour = subprocess.Popen(
        [sys.executable, "-c", NEIGHBOUR, str(A), str(B)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert neighbour.stdout is not None
        tids = [int(x) for x in neighbour.stdout.readline().split()]
        chose = {tid: frozenset(os.sched_getaffinity(tid)) for tid in tids}
        assert sorted(chose.values(), key=min) == [frozenset({A}), frozenset({B})]
        with workload("--busy", "1", "--sleepers", "2") as w:
            job = w["pid"]
            sampler = Sampler("/", Selection(pids=(job,), others=True))
            mine: list[Occupant] = []
            for _ in range(20):  # the neighbour must be seen busy on both CPUs
                first = sampler.sample()
                time.sleep(0.5)
                snapshot = make_snapshot(first, sampler.sample(), read_topology("/"))
                mine = [o for o in occupants(snapshot, frozenset({job})) if o.pid == neighbour.pid]
                if mine and mine[0].cpus >= BOTH:
                    break
            assert mine and mine[0].cpus >= BOTH, mine
            proposal = propose_pin(snapshot, job)
            assert proposal is not None
        for offered in (frozenset({A}), frozenset({B})):
            # The thread that chose the offered CPU is named; the other one holds none of it.
            (tid,) = {tid for tid, mask in chose.items() if mask == offered}
            found = self_pinned_threads(snapshot, mine, offered)
            assert [(o.pid, th.tid, th.allowed_cpus) for o, th in found] == [(neighbour.pid, tid, offered)]
            shown = replace(
                proposal,
                suggestion=replace(proposal.suggestion, cpus=offered),
                move_off=tuple(mine),
                move_off_starts=(snapshot.process(neighbour.pid).sample.start_ticks,),
                self_pinned=found,
            )
            text = proposal_text(shown, isolate=True, with_children=True, p=P).plain
            (line,) = [line for line in text.splitlines() if f"thread {tid}" in line]
            assert line.split()[0] == str(neighbour.pid)
            assert f"pinned itself to CPUs {fmt.cpus(offered)} (its process runs on {fmt.cpus(BOTH)})" in line
            # Not isolating: nothing is said about the threads isolation would leave.
            text = proposal_text(shown, isolate=False, with_children=True, p=P).plain
            assert f"thread {tid}" not in text
    finally:
        os.killpg(neighbour.pid, 9)
        neighbour.wait()
