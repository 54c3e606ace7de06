"""Churn and long runs. First, for 20 s, ``tests/helpers/churn.py`` starts and ends hundreds of
processes and threads a second while the sampler (every process, ``others=True``, with a
fake NVML that puts a workload on a GPU) and the diagnosis (``evaluate`` and the
``FindingTracker``, suggestions, the JSON report) run every 0.2 s, as the monitor does.

No exception; no file descriptor left open; the sampler's caches hold only processes
that still exist (they would otherwise grow by the ~10,000 PIDs the churn uses up), and
the Python heap does not grow after the first seconds. Then a long recording replayed
through the reader and the diagnosis as fast as it parses: the heap stays flat. Both are
marked ``soak`` (``tests/run`` runs them; ``-m 'not soak'`` leaves them out of a quick run).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from affmon.collect.sampler import Sampler, Selection
from affmon.collect.sysfs_topology import read_topology
from affmon.commands.report import snapshot_json
from affmon.core.model.rates import make_snapshot
from affmon.core.plan.advice import attach_suggestions
from affmon.core.recording.format import read_recording
from affmon.core.rules.base import RuleInputs
from affmon.core.rules.evaluate import FindingTracker, evaluate
from affmon.nvml import NvmlGateway
from tests.helpers.fake_pynvml import FakeGpu, FakeNvml
from tests.helpers.live import workload

CHURN = Path(__file__).parent.parent / "helpers" / "churn.py"
SECONDS = 20.0
MIN_TICKS = 20
TICK_S = 0.2


def open_fds() -> Counter[str]:
    """What this process holds open, by what each descriptor names, besides the ``stat``
    files the sampler keeps open (checked on their own: only listed PIDs') and the
    listing's own directory (closed by the time its entry is read)."""
    held: Counter[str] = Counter()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if not re.fullmatch(r"/proc/\d+/stat", target):
            held[target] += 1
    return held


@pytest.mark.soak
def test_sampler_and_diagnosis_under_churn() -> None:
    topology = read_topology("/")
    with workload("--busy", "1", "--sleepers", "2") as job:
        gpu = FakeGpu(pids=[(job["pid"], 4 << 30)])
        gateway = NvmlGateway(module=FakeNvml([gpu]), pcie_window_s=0.0)
        assert gateway.open()
        sampler = Sampler("/", Selection(others=True), gpu_source=gateway)
        listed: list[int] = []  # the PIDs the sampler's last /proc listing found
        list_pids = sampler.proc.pids

        def recording_pids() -> list[int]:
            listed[:] = list_pids()
            return list(listed)

        sampler.proc.pids = recording_pids  # type: ignore[method-assign]
        previous = sampler.sample()
        churn = subprocess.Popen(
            [sys.executable, str(CHURN), str(SECONDS), "4"], stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        try:
            assert churn.stdout is not None
            json.loads(churn.stdout.readline())
            fds_before = open_fds()
            tracker = FindingTracker()
            ticks = 0
            heap_at_5s = None
            started = time.monotonic()
            tracemalloc.start()
            try:
                # At least SECONDS and at least MIN_TICKS ticks (a loaded machine gives fewer
                # ticks in SECONDS: the loop then runs on, up to three times as long).
                while (time.monotonic() - started < SECONDS or ticks < MIN_TICKS) and (
                    time.monotonic() - started < 3 * SECONDS
                ):
                    time.sleep(TICK_S)
                    current = sampler.sample()
                    snap = make_snapshot(previous, current, topology)
                    findings = evaluate(snap, RuleInputs(topology))
                    tracker = tracker.update(findings)
                    attach_suggestions(tracker.active, snap)
                    json.dumps(snapshot_json(snap, gateway.status))
                    previous = current
                    ticks += 1
                    # The caches hold what exists, never the dead: every PID in them was
                    # listed by this very sample.
                    assert set(sampler._memo) <= set(listed)
                    assert set(sampler.proc._stat_fds) <= set(listed)  # stat files kept open: the listed only
                    sampled = {(p.pid, t.tid) for p in current.processes for t in p.threads}
                    memo_threads = {(pid, t.tid) for pid, m in sampler._memo.items() for t in m.samples}
                    assert memo_threads <= sampled  # threads too: only what this sample read
                    assert any(p.pid == job["pid"] and p.gpu_indices == (0,) for p in current.processes)
                    if heap_at_5s is None and time.monotonic() - started >= 5:
                        heap_at_5s = tracemalloc.get_traced_memory()[0]
                heap_at_end = tracemalloc.get_traced_memory()[0]
            finally:
                tracemalloc.stop()
            fds_after = open_fds()
            summary = json.loads(churn.stdout.readline())
        finally:
            if churn.poll() is None:
                os.killpg(churn.pid, 9)
            churn.wait()
            if churn.stdout is not None:
                churn.stdout.close()
            gateway.close()
    made = summary["processes"] + summary["threads"]
    # What the kernel did, not what an idle machine would give: on a shared 2-core machine
    # under hogs the churn and the loop get what the scheduler leaves them, so the test
    # asks only that enough churn and enough ticks happened for the checks above to mean
    # something (an idle machine gives thousands of tasks and every tick).
    assert made >= 1_000, summary
    assert ticks >= MIN_TICKS, ticks
    assert fds_after == fds_before
    assert heap_at_5s is not None
    assert heap_at_end - heap_at_5s < 2 << 20, (heap_at_5s, heap_at_end)  # < 2 MiB in 15 s


RECORDING = Path(__file__).parent.parent / "fixtures" / "recordings" / "hogs.jsonl.gz"
_STAMP = re.compile(r'^\{"sample":\{"monotonic_s":([0-9.eE+-]+),')


def long_recording(samples: int) -> Iterator[str]:
    """The hogs recording's samples over and over, re-stamped one interval apart: a
    recording of ``samples`` ticks, made line by line (never all in memory)."""
    with gzip.open(RECORDING, "rt", encoding="utf-8") as f:
        header, *lines = f.read().splitlines()
    yield header
    for n in range(samples):
        line = lines[n % len(lines)]
        yield _STAMP.sub(f'{{"sample":{{"monotonic_s":{1000.0 + n:.1f},', line, count=1)


@pytest.mark.soak
def test_a_long_recording_replayed_at_full_speed_keeps_memory_flat() -> None:
    """The reader is lazy and the diagnosis keeps nothing per tick: replaying 300 ticks of
    a 300-thread machine as fast as they parse, the number of live Python objects at the
    end is what it was after the first 100 (keeping one tick's sample would add ~2,000).
    (The monitor's own history buffers are the TUI's tests' business.)"""
    header, samples = read_recording(long_recording(300), "long.jsonl")
    tracker = FindingTracker()
    previous = next(samples)
    for n, current in enumerate(samples, start=1):
        snap = make_snapshot(previous, current, header.topology)
        tracker = tracker.update(evaluate(snap, RuleInputs(header.topology)))
        previous = current
        if n == 100:
            blocks_at_100 = sys.getallocatedblocks()
    assert n == 299 and tracker.active  # the hogs are found, tick after tick
    assert sys.getallocatedblocks() - blocks_at_100 < 5_000
