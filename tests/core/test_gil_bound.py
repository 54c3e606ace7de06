"""Threads that take turns on the GIL: pure-Python threads spinning in one process use
about one CPU together however many they may have, and queue only as the lock changes
hands. They are GIL_BOUND, not starved, not held by too narrow a mask, and the job is sized
by the CPU they can use, not a CPU per thread. On real processes (two CPUs: the process may
use more than it can) and on a constructed sixteen-CPU machine. Bounds are on what the
kernel measured, so a loaded machine passes."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from affmon.collect.sampler import Sampler, Selection
from affmon.core.model.jobs import demand
from affmon.core.model.rates import Snapshot, make_snapshot
from affmon.core.model.samples import Sample
from affmon.core.plan.advice import job_of, suggest_for_job
from affmon.core.plan.need import job_need
from affmon.core.rules.base import DEFAULT_THRESHOLDS, RuleInputs
from affmon.core.rules.evaluate import evaluate
from affmon.sources.live import load_topology
from tests.helpers.sizing import Spec, machine, samples_of

SPINNING = """
import json, os, sys, threading, time
def spin():
    x = 0
    while True:
        x += 1
for _ in range(int(sys.argv[1])):
    threading.Thread(target=spin, daemon=True).start()
print(json.dumps({"pid": os.getpid()}), flush=True)
while True:
    time.sleep(1)  # the main thread wakes once a second: not a busy main loop
"""

# The same threads in C code that drops the GIL (zlib on 1 MB): they run in parallel.
RELEASING = """
import json, os, sys, threading, time, zlib
data = os.urandom(1 << 20)
def work():
    while True:
        zlib.compress(data, 1)
for _ in range(int(sys.argv[1])):
    threading.Thread(target=work, daemon=True).start()
print(json.dumps({"pid": os.getpid()}), flush=True)
while True:
    time.sleep(1)
"""


@contextmanager
def started(code: str, threads: int, cpus: set[int] | None = None) -> Iterator[int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(threads)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
    )
    try:
        assert proc.stdout is not None
        yield int(json.loads(proc.stdout.readline())["pid"])
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def measured(pid: int, seconds: float = 2.0) -> Snapshot:
    topology = load_topology()
    sampler = Sampler("/", Selection(pids=(pid,)))
    time.sleep(0.5)  # past the interpreter's start
    first = sampler.sample()
    time.sleep(seconds)
    return make_snapshot(first, sampler.sample(), topology)


def test_pure_python_threads_are_gil_bound_and_sized_by_the_cpu_they_use() -> None:
    with started(SPINNING, 4) as pid:
        snap = measured(pid)
    findings = {f.code: f for f in evaluate(snap, RuleInputs(snap.topology)) if f.pid == pid}
    assert "GIL_BOUND" in findings, findings
    gil = findings["GIL_BOUND"]
    turning = gil.evidence["threads"]
    assert turning >= 3 and gil.evidence["run_cpus"] <= 1.25
    assert "take turns on the GIL" in gil.message and "more CPUs will not help" in gil.message
    assert gil.remedy is not None and "processes" in gil.remedy
    # their run-queue wait is the lock's hand-over: no other rule calls it a want of CPUs
    assert "MASK_TOO_NARROW" not in findings and "OVERSUBSCRIBED" not in findings
    # The threads taking turns are never called starved or contended; a thread the kernel
    # kept queued all interval on a loaded machine (the sleeping main thread once woken,
    # a spinner that never got the CPU) may be, and is said to be.
    for code in ("STARVED", "CONTENDED"):
        if code in findings:
            assert not set(findings[code].tids) & set(gil.tids), findings[code].message
    job = job_of(snap, pid)
    assert job is not None
    need = job_need(job, [snap])
    # the CPU they can use (at most 1.25, with a quarter more), not a CPU per turning thread;
    # plus one per other thread that needed a CPU (none on a quiet machine)
    assert need.cpus <= math.ceil((len(need.threads) + 1.25) * 1.25), need
    (main,) = [th for th in snap.process(pid).threads if th.sample.tid == pid]
    if demand(main, snap.interval_s) < DEFAULT_THRESHOLDS.busy_demand:  # asleep, as on a quiet machine
        assert not any(th.role == "main loop" for th in need.threads)
    assert need.turns and need.turns[0][:2] == (pid, turning)
    sized = next(r for r in suggest_for_job(job, snap).reasons if r.startswith("Sized for"))
    assert f"{turning} threads of PID {pid} take turns on the GIL" in sized


def test_pure_python_threads_on_one_cpu_are_gil_bound_not_a_mask_too_narrow() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    with started(SPINNING, 4, {cpus[0]}) as pid:
        snap = measured(pid)
    found = {f.code: f for f in evaluate(snap, RuleInputs(snap.topology)) if f.pid == pid}
    assert "GIL_BOUND" in found, found
    assert "MASK_TOO_NARROW" not in found and "OVERSUBSCRIBED" not in found, found
    if "STARVED" in found:  # only a thread the kernel kept queued, never one taking turns
        assert not set(found["STARVED"].tids) & set(found["GIL_BOUND"].tids), found["STARVED"].message


def test_threads_that_release_the_gil_are_not_gil_bound() -> None:
    with started(RELEASING, 6) as pid:
        snap = measured(pid)
    process = snap.process(pid)
    assert process is not None
    ran = [th for th in process.threads if (th.cpu_percent or 0) >= 1 and th.sample.tid != pid]
    assert ran
    # They meet the lock as they leave zlib: 3-20 times a second here, idle or loaded, once
    # 82 on a loaded CI machine, where six of them may run one CPU in all as turning
    # threads do. But none waited for it asleep: each was runnable (running or queued)
    # nearly all the interval, where a thread waiting its turn sleeps.
    awake = 1.0 - DEFAULT_THRESHOLDS.turn_asleep
    assert all(demand(th, snap.interval_s) > awake for th in ran), ran
    codes = {f.code for f in evaluate(snap, RuleInputs(snap.topology)) if f.pid == pid}
    assert "GIL_BOUND" not in codes


# -- a constructed sixteen-CPU machine ------------------------------------------------------


def with_switches(samples: list[Sample], per_interval: int) -> list[Sample]:
    """Each thread's voluntary switches grown by ``per_interval`` each interval."""
    out = []
    for i, s in enumerate(samples):
        processes = tuple(
            dataclasses.replace(
                p,
                threads=tuple(dataclasses.replace(t, voluntary_switches=i * per_interval) for t in p.threads),
            )
            for p in s.processes
        )
        out.append(dataclasses.replace(s, processes=processes))
    return out


def snaps_of(specs: list[Spec], cpus: int, switches: int) -> list[Snapshot]:
    topology = machine(cpus)
    samples = with_switches(samples_of(specs), switches)
    return [make_snapshot(a, b, topology) for a, b in itertools.pairwise(samples)]


def eight(run_ms: int, wait_ms: int) -> list[tuple[int, int, frozenset[int], list[tuple[int, int | None]]]]:
    mask = frozenset(range(16))
    main = [(100, 0, mask, [(0, 0)] * 3)]
    return main + [(101 + i, i, mask, [(run_ms, wait_ms)] * 3) for i in range(8)]


def test_on_sixteen_cpus_eight_threads_taking_turns_need_one_and_many_parallel_ones_need_eight() -> None:
    turns: list[Spec] = [(100, 1, "python3", True, True, False, eight(125, 300))]
    window = snaps_of(turns, 16, 200)  # 200 voluntary switches a second each: the GIL's pace
    found = {f.code: f for f in evaluate(window[-1], RuleInputs(window[-1].topology))}
    assert "GIL_BOUND" in found and "STARVED" not in found
    job = job_of(window[-1], 100)
    assert job is not None
    assert job_need(job, window).cpus == 2  # 1.0 CPU used, with a quarter more
    # The same counters without the switches: threads that run in parallel and queue.
    window = snaps_of(turns, 16, 0)
    found = {f.code: f for f in evaluate(window[-1], RuleInputs(window[-1].topology))}
    assert "GIL_BOUND" not in found and "STARVED" in found
    job = job_of(window[-1], 100)
    assert job is not None
    assert job_need(job, window).cpus == 8
    # Switches at the GIL's pace, one CPU in all, but each thread runnable all along (125
    # ms run, 850 queued): threads in C code meeting the lock on a loaded machine, not
    # threads asleep while another holds it.
    window = snaps_of([(100, 1, "python3", True, True, False, eight(125, 850))], 16, 200)
    found = {f.code: f for f in evaluate(window[-1], RuleInputs(window[-1].topology))}
    assert "GIL_BOUND" not in found and "STARVED" in found
