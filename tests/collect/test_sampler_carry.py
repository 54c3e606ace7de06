"""What the sampler reads of whom: an unwatched process that uses too little CPU to hold
a contender has its threads carried, not read; python processes without a GPU or
deep-learning runtime are other processes unless named by ``--pid`` or below a launcher or
a training process; affmon processes are never watched. All against real processes."""

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from affmon.collect import sampler as sampler_module
from affmon.collect.sampler import Sampler, Selection
from affmon.collect.selection import is_affmon, maps_runtime, scan_maps
from affmon.collect.sysfs_topology import read_topology
from affmon.core.model.rates import make_snapshot
from tests.helpers.live import driven

TOPOLOGY = read_topology("/")
QUIET = Path(__file__).parent.parent / "helpers" / "quiet_other.py"


def process(sample, pid):
    return next(p for p in sample.processes if p.pid == pid)


def test_a_quiet_unwatched_process_is_carried_and_read_again_once_it_uses_cpu():
    with driven(QUIET, argv0="quietother") as other:
        sampler = Sampler("/", Selection(others=True))
        first = sampler.sample()
        assert process(first, other.pid).threads_read  # first seen: read
        time.sleep(1.0)
        second = sampler.sample()
        p = process(second, other.pid)
        assert not p.watched and not p.training
        # 20 threads waking five times a second for microseconds: far below 5% of a CPU
        assert not p.threads_read
        assert {t.tid for t in p.threads} == {t.tid for t in process(first, other.pid).threads}
        rates = make_snapshot(first, second, TOPOLOGY).process(other.pid)
        assert rates is not None and all(t.cpu_percent is None for t in rates.threads)
        assert rates.cpu_percent is not None and rates.cpu_percent < sampler_module.CARRY_BELOW_PERCENT
        assert rates.ran_on_cpus == frozenset()

        spin = other.send("spin")["tid"]
        time.sleep(1.0)
        third = sampler.sample()
        p = process(third, other.pid)
        assert p.threads_read and spin in {t.tid for t in p.threads}
        # the threads' counters span more than this interval: no per-thread rate yet
        rates = make_snapshot(second, third, TOPOLOGY).process(other.pid)
        assert rates is not None and all(t.cpu_percent is None for t in rates.threads)
        time.sleep(1.0)
        fourth = sampler.sample()
        rates = make_snapshot(third, fourth, TOPOLOGY).process(other.pid)
        assert rates is not None and process(fourth, other.pid).threads_read
        (spinner,) = [t for t in rates.threads if t.sample.tid == spin]
        assert spinner.cpu_percent is not None and spinner.cpu_percent >= sampler_module.CARRY_BELOW_PERCENT
        other.send("still")


def test_carried_threads_are_read_again_after_a_bounded_number_of_samples(monkeypatch):
    monkeypatch.setattr(sampler_module, "CARRY_REREAD_EVERY", 3)
    with driven(QUIET, argv0="quietother") as other:
        sampler = Sampler("/", Selection(others=True))
        reads = []
        for _ in range(9):
            reads.append(process(sampler.sample(), other.pid).threads_read)
            # A second apart: CPU time moves by the clock tick (10 ms), and two ticks in a
            # shorter interval (a loaded machine slows each wake) would read as 5% and more.
            time.sleep(1.0)
        # the first run of carried samples is shortened by the PID (3 - PID % 3 of them),
        # every later one is 3 long
        first = 3 - other.pid % 3
        expected = [True] + [False] * first + [True] + [False] * 3 + [True]
        assert reads == (expected + [False] * 9)[:9]


def test_processes_first_seen_together_are_not_all_read_again_on_the_same_tick(monkeypatch):
    monkeypatch.setattr(sampler_module, "CARRY_REREAD_EVERY", 4)
    with contextlib.ExitStack() as stack:
        a = stack.enter_context(driven(QUIET, argv0="quietother"))
        b = stack.enter_context(driven(QUIET, argv0="quietother"))
        for _ in range(8):  # PIDs in another phase: almost always the next one
            if b.pid % 4 != a.pid % 4:
                break
            b = stack.enter_context(driven(QUIET, argv0="quietother"))
        assert b.pid % 4 != a.pid % 4
        sampler = Sampler("/", Selection(others=True))
        reads: dict[int, list[int]] = {a.pid: [], b.pid: []}
        for tick in range(6):
            s = sampler.sample()
            for pid in reads:
                if process(s, pid).threads_read:
                    reads[pid].append(tick)
            time.sleep(1.0)  # a tick of CPU time (10 ms) in a shorter interval reads as busy
        assert reads[a.pid][0] == reads[b.pid][0] == 0  # both read when first seen
        assert reads[a.pid][1] != reads[b.pid][1]  # and again on ticks of their own
        for pid, ticks in reads.items():
            assert ticks[1] == 1 + 4 - pid % 4


def test_watched_processes_are_never_carried():
    with driven(QUIET, argv0="quietother") as other:
        sampler = Sampler("/", Selection(pids=(other.pid,)))
        sampler.sample()
        time.sleep(0.5)
        p = process(sampler.sample(), other.pid)
        assert p.watched and p.threads_read


def test_python_without_a_runtime_is_another_process_and_with_one_it_is_training(tmp_path):
    runtime = tmp_path / "libtorch_cpu.so"
    runtime.write_bytes(b"\0" * 4096)
    with (
        driven(QUIET, "--name", "python3") as plain,
        driven(QUIET, "--name", "python3", "--runtime", str(runtime)) as torch,
    ):
        sampler = Sampler("/", Selection(others=True))
        first = sampler.sample()
        a, b = process(first, plain.pid), process(first, torch.pid)
        assert not a.watched and not a.training  # sampled, as every other process is
        assert b.watched and b.training  # libtorch and no GPU: a CPU-only training job
        time.sleep(1.0)
        a = process(sampler.sample(), plain.pid)
        assert not a.watched and not a.threads_read  # quiet: carried, as any other process
        assert plain.pid not in {p.pid for p in Sampler("/", Selection()).sample().processes}
        # Named by --pid, it is watched whatever it runs.
        named = process(Sampler("/", Selection(pids=(plain.pid,), others=True)).sample(), plain.pid)
        assert named.watched and not named.training


LAUNCHED = """
import os, subprocess, sys
open("/proc/self/comm", "w").write("torchrun")
child = subprocess.Popen(
    [sys.executable, sys.argv[1], "--name", "python3"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
)
print(child.stdout.readline(), end="", flush=True)
child.wait()
"""


def test_a_python_process_below_a_launcher_or_a_training_process_is_watched(tmp_path):
    # A rank that has not imported torch yet, under torchrun; a worker started with spawn,
    # under a training process: both part of a job, watched, not training. (quiet_other
    # runs until its stdin closes: each is given a pipe.)
    runtime = tmp_path / "libtorch_cpu.so"
    runtime.write_bytes(b"\0" * 4096)
    spawner = (
        "import mmap, subprocess, sys\n"
        f"f = open({str(runtime)!r}, 'rb'); m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n"
        f"child = subprocess.Popen([sys.executable, {str(QUIET)!r}, '--name', 'python3'], stdin=subprocess.PIPE,"
        " stdout=subprocess.PIPE)\n"
        "sys.stdout.write(child.stdout.readline().decode()); sys.stdout.flush(); child.wait()\n"
    )
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHED, str(QUIET)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    trainer = subprocess.Popen(
        [sys.executable, "-c", spawner], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        rank = json.loads(launcher.stdout.readline())["pid"]
        worker = json.loads(trainer.stdout.readline())["pid"]
        sample = Sampler("/", Selection(others=True)).sample()
        assert process(sample, launcher.pid).training  # the launcher
        assert process(sample, rank).watched and not process(sample, rank).training
        assert process(sample, trainer.pid).training
        assert process(sample, worker).watched and not process(sample, worker).training
    finally:
        for proc in (launcher, trainer):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_python_process_that_loads_a_runtime_later_becomes_training(tmp_path, monkeypatch):
    monkeypatch.setattr(sampler_module, "RUNTIME_RECHECK_S", 0.0)
    runtime = tmp_path / "libcudart.so.12"
    runtime.write_bytes(b"\0" * 4096)
    code = (
        "import mmap, sys, time\n"
        "open('/proc/self/comm', 'w').write('python3')\n"
        "print('up', flush=True); sys.stdin.readline()\n"
        f"f = open({str(runtime)!r}, 'rb'); m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n"
        "print('mapped', flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "up"
        sampler = Sampler("/", Selection(others=True))
        before = process(sampler.sample(), proc.pid)
        assert not before.training and not before.watched
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "mapped"
        after = process(sampler.sample(), proc.pid)
        assert after.training and after.watched
    finally:
        proc.kill()
        proc.wait()


def test_no_affmon_process_is_watched(tmp_path):
    script = tmp_path / "affmon"
    script.write_text("import time\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, str(script)])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
                if str(script).encode() in f.read():
                    break
            time.sleep(0.05)
        sample = Sampler("/", Selection(others=True)).sample()
        p = process(sample, proc.pid)
        assert not p.watched and not p.training
        assert all(q.pid != proc.pid for q in Sampler("/", Selection()).sample().processes)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    ("comm", "argv", "expected"),
    [
        ("affmon", ["/usr/bin/python3", "/usr/local/bin/affmon"], True),
        ("python3", ["python3", "-m", "affmon", "export"], True),
        ("python3", ["/venv/bin/affmon", "--pid", "1"], True),
        ("python3", ["python3", "train.py", "affmon"], False),
        ("python3", ["python3", "-m", "affmonitor"], False),
    ],
)
def test_is_affmon(comm, argv, expected):
    assert is_affmon(comm, argv) is expected


def test_maps_runtime_reads_this_process_maps():
    with open(f"/proc/{os.getpid()}/maps", "rb") as f:
        mine = f.read()
    assert maps_runtime(mine) is False  # the test runner loads no GPU runtime
    assert maps_runtime(mine + b"7f00-7f10 r-xp 0 08:01 1 /opt/torch/lib/libtorch_cuda.so\n") is True
    assert maps_runtime(None) is None


@pytest.mark.parametrize("at", [10, 65536 - 4, 65536 + 100, 200_000])
def test_scan_maps_finds_a_marker_anywhere_including_across_reads(tmp_path, at):
    data = bytearray(b"x" * 250_000)
    data[at : at + len(b"libnccl")] = b"libnccl"
    path = tmp_path / "maps"
    path.write_bytes(bytes(data))
    assert scan_maps(str(path)) is True
    path.write_bytes(b"x" * 250_000)
    assert scan_maps(str(path)) is False
    assert scan_maps(str(tmp_path / "missing")) is None


def test_a_real_torch_process_maps_shows_a_runtime(tmp_path):
    maps = (Path(__file__).parent.parent / "fixtures" / "proc" / "torch_process.maps").read_bytes()
    assert maps_runtime(maps) is True
    assert scan_maps(str(Path(__file__).parent.parent / "fixtures" / "proc" / "torch_process.maps")) is True
    # the same process before it imported torch: only the interpreter and the C library
    plain = b"".join(line + b"\n" for line in maps.splitlines() if line.endswith((b"/python3.12", b"/libc.so.6")))
    assert plain and maps_runtime(plain) is False


def test_the_unknown_rates_of_threads_still_carried_are_reused_from_the_snapshot_before():
    from dataclasses import replace

    from affmon.core.model.samples import ProcessSample, Sample, ThreadSample

    threads = tuple(ThreadSample(t, 1, "w", "S", 0, 0, 10, 0, 1, 0, 0, 0, frozenset({0})) for t in range(10, 20))
    base = ProcessSample(10, 1, 1, "waker", 0, "root", "waker", None, None, threads, watched=False, cpu_ns=0)

    def at(t: float, read: bool, cpu_ns: int) -> Sample:
        return Sample(t, t, 0.0, (replace(base, threads_read=read, cpu_ns=cpu_ns),), ())

    s0, s1, s2 = at(0.0, True, 0), at(1.0, False, 10_000_000), at(2.0, False, 30_000_000)
    first = make_snapshot(s0, s1, TOPOLOGY)
    second = make_snapshot(s1, s2, TOPOLOGY, before=first)
    (p1,), (p2,) = first.processes, second.processes
    assert p2.threads is p1.threads  # not built again
    assert all(t.cpu_percent is None for t in p2.threads)
    assert p2.cpu_percent == pytest.approx(2.0)  # 20 ms of the process's own counter in 1 s
    assert make_snapshot(s1, s2, TOPOLOGY).processes[0].threads == p1.threads  # the same values either way


def test_a_process_handed_out_again_unmoved_keeps_its_rates_object_and_one_that_moved_gets_new_ones():
    from dataclasses import replace

    from affmon.core.model.samples import ProcessSample, Sample, ThreadSample

    threads = (ThreadSample(10, 1, "w", "S", 0, 0, 10, 0, 1, 0, 0, 0, frozenset({0})),)
    moving = ProcessSample(10, 1, 1, "waker", 0, "root", "waker", None, None, threads, cpu_ns=0, threads_read=False)
    still = replace(moving, cpu_ns=50_000_000)

    def at(t: float, p: ProcessSample) -> Sample:
        return Sample(t, t, 0.0, (p,), ())

    s0, s1, s2, s3 = at(0.0, moving), at(1.0, still), at(2.0, still), at(3.0, still)
    first = make_snapshot(s0, s1, TOPOLOGY)
    second = make_snapshot(s1, s2, TOPOLOGY, before=first)
    third = make_snapshot(s2, s3, TOPOLOGY, before=second)
    (p1,), (p2,), (p3,) = first.processes, second.processes, third.processes
    assert p1.cpu_percent == pytest.approx(5.0)  # it moved over the first interval: built
    assert p2 is not p1 and p2.cpu_percent == 0.0  # the same sample again, but 5% before it: built again
    assert p3 is p2  # unmoved over both intervals: the same rates object
    assert make_snapshot(s2, s3, TOPOLOGY).processes[0] == p3  # the same values when built


def test_an_unchanged_stat_line_hands_out_the_same_process_sample_and_a_changed_one_a_new_one(monkeypatch):
    # A process first seen starts its carried run part way in, by its PID (PID % 30): one of
    # 30 PIDs would be read again at the third sample. No re-read within this test's four:
    monkeypatch.setattr(sampler_module, "CARRY_REREAD_EVERY", 10**9)
    other = subprocess.Popen(["sleep", "60"])
    try:
        sampler = Sampler("/", Selection(others=True))
        samples = []
        for _ in range(3):
            samples.append(sampler.sample())
            time.sleep(0.2)
        first, second, third = (process(s, other.pid) for s in samples)
        assert first.threads_read and not second.threads_read  # read when first seen, then carried
        assert third is second  # its stat line did not change: the same object
        os.kill(other.pid, signal.SIGSTOP)
        for _ in range(50):  # stopped: the state in its stat line changes
            if Path(f"/proc/{other.pid}/stat").read_text().split(") ")[1][0] == "T":
                break
            time.sleep(0.02)
        fourth = process(sampler.sample(), other.pid)
        assert fourth is not third and not fourth.threads_read
        assert (fourth.pid, fourth.start_ticks, fourth.name) == (third.pid, third.start_ticks, third.name)
    finally:
        other.kill()
        other.wait()


def test_a_watched_thread_that_ran_briefly_has_no_sched_read_and_a_busy_one_has():
    with driven(QUIET, argv0="quietother") as job:
        sampler = Sampler("/", Selection(pids=(job.pid,)))
        sampler.sample()
        spin = job.send("spin")["tid"]
        time.sleep(1.0)
        before = {t.tid: t for t in process(sampler.sample(), job.pid).threads}
        time.sleep(1.0)
        by_tid = {t.tid: t for t in process(sampler.sample(), job.pid).threads}
        wakers = [by_tid[tid] for tid in job.info["tids"]]
        # Each woke five times a second for microseconds: it ran, its wait is known, and its
        # switches are not, as long as what it ran (by its own schedstat) was below the bar:
        # on a loaded machine a wake can cost more, and then sched is read as for a busy one.
        assert all(t.wait_ns is not None for t in wakers)
        ran = {t.tid: t.cpu_ns - before[t.tid].cpu_ns for t in wakers}
        assert all(ns > 0 for ns in ran.values()), ran
        assert any(ns < sampler_module.LIGHT_RUN_NS for ns in ran.values()), ran  # the case under test happened
        for t in wakers:
            assert (t.voluntary_switches is None) == (ran[t.tid] < sampler_module.LIGHT_RUN_NS), (t.tid, ran)
        assert by_tid[spin].voluntary_switches is not None and by_tid[spin].involuntary_switches is not None
        job.send("still")


@pytest.mark.parametrize("watched", [False, True])
def test_values_a_process_s_threads_share_are_held_once_and_each_is_what_the_kernel_says(watched):
    """A pool's threads have one name, one set of flags and, started together, one start
    time: each is held once per process (0.9 MB at 10,000 threads), not once a thread.
    The values are still each thread's own, as /proc gives them."""
    with driven(QUIET, argv0="quietother") as other:
        selection = Selection(pids=(other.pid,)) if watched else Selection(others=True)
        p = process(Sampler("/", selection).sample(), other.pid)
        assert p.watched is watched and p.threads_read and len(p.threads) == 21
        for t in p.threads:
            task = Path(f"/proc/{other.pid}/task/{t.tid}")
            assert t.name == (task / "comm").read_text().rstrip("\n") == "quietother"
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            assert (t.flags, t.start_ticks) == (int(fields[6]), int(fields[19]))
        for field in ("name", "flags", "start_ticks"):
            values = [getattr(t, field) for t in p.threads]
            assert len({id(v) for v in values}) == len(set(values))  # one object for each value


WAKING = Path(__file__).resolve().parent.parent.parent / "bench" / "workloads" / "waking.py"


def test_the_sampler_holds_under_200_bytes_for_each_thread_of_a_process_it_does_not_watch():
    """What the sampler keeps of another process's threads between ticks: at 10,000 threads
    it was 3.7 MB (a memo object, a name, flags and start time of its own per thread, a
    TID map beside the samples); a thread's sample and its TID are what is left."""
    import gc
    import json
    import tracemalloc

    proc = subprocess.Popen(
        ["waker", str(WAKING), "--threads", "1000", "--period", "5", "--name", "waker", "--seconds", "120"],
        executable=sys.executable,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        pid = json.loads(proc.stdout.readline())["pid"]
        sampler = Sampler("/", Selection(others=True))
        tracemalloc.start()
        try:
            p = process(sampler.sample(), pid)
            time.sleep(0.5)
            p = process(sampler.sample(), pid)
            assert not p.watched and len(p.threads) == 1000
            del p
            gc.collect()
            with_it = tracemalloc.get_traced_memory()[0]
            del sampler._memo[pid]
            gc.collect()
            held = with_it - tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
    finally:
        proc.kill()
        proc.wait()
    # A sample (136 bytes) and a TID (28) a thread, and the tuple's slot: 174 bytes a thread
    # measured. With the TID map beside the samples it was 211; before that, 368.
    assert 100 * 1000 < held < 200 * 1000


# -- the reuse (``sampler.Reuse``): on, what did not change is the same object; off, a copy --

# A process whose threads all sleep for ten minutes: between two reads nothing in its
# ``/proc`` files moves (state, CPU, where it last ran, mask), so the two samplers must
# read it alike, whenever each reads it.
SLEEPER = "import threading, time\nfor _ in range(3):\n    threading.Thread(target=time.sleep, args=(600,)).start()\n"


def _asleep(pid: int, threads: int) -> bool:
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        return len(tasks) == threads and all((t / "stat").read_text().rsplit(") ", 1)[1][0] == "S" for t in tasks)
    except (FileNotFoundError, ProcessLookupError):
        return False


def _objects(sample):
    """The ids of the process samples, thread tuples and thread samples of ``sample``."""
    found = set()
    for p in sample.processes:
        found |= {id(p), id(p.threads), *(id(t) for t in p.threads)}
    return found


def test_the_reuse_switched_off_reads_the_same_values_and_hands_out_no_object_twice(monkeypatch):
    monkeypatch.setattr(sampler_module, "CARRY_REREAD_EVERY", 10**9)  # carried from the second sample on
    procs = [
        subprocess.Popen(["sleep", "600"]),
        subprocess.Popen([sys.executable, "-c", SLEEPER]),
        subprocess.Popen([sys.executable, "-c", SLEEPER]),
    ]
    try:
        threads = {procs[0].pid: 1, procs[1].pid: 4, procs[2].pid: 4}
        deadline = time.monotonic() + 10
        while not all(_asleep(pid, n) for pid, n in threads.items()):
            assert time.monotonic() < deadline, "the sleepers did not settle"
            time.sleep(0.05)
        watched = procs[2].pid  # its threads read each tick; the other two carried
        selection = Selection(pids=(watched,), others=True)
        on, off = Sampler("/", selection), Sampler("/", selection, reuse=False)
        assert on.reuse.on and not off.reuse.on
        ons, offs = [], []
        for _ in range(4):  # the two alternate, each a third of a second after the other
            ons.append(on.sample())
            offs.append(off.sample())
            time.sleep(0.3)

        # The same values, read at other instants: every field, threads and all.
        for a, b in zip(ons, offs, strict=True):
            for pid in threads:
                assert process(a, pid) == process(b, pid)
                assert process(a, pid).watched is (pid == watched)
        assert [process(s, procs[0].pid).threads_read for s in ons] == [True, False, False, False]

        # On: what did not change is handed out again; off, never.
        for pid in (procs[0].pid, procs[1].pid):  # carried, their stat lines unchanged
            assert process(ons[3], pid) is process(ons[2], pid) is process(ons[1], pid)
        kept = process(ons[3], watched).threads
        assert all(t is u for t, u in zip(kept, process(ons[1], watched).threads, strict=True))
        for earlier, later in itertools.pairwise(offs):
            assert not _objects(earlier) & _objects(later)

        # The rates of the two: the same figures, the reuse's path handing out its rates of
        # the interval before (``rates.handed_back``), the other computing them again.
        def chained(samples):
            snaps = [make_snapshot(samples[0], samples[1], TOPOLOGY)]
            for prev, cur in itertools.pairwise(samples[1:]):
                snaps.append(make_snapshot(prev, cur, TOPOLOGY, before=snaps[-1]))
            return snaps

        snaps_on, snaps_off = chained(ons), chained(offs)
        for a, b in zip(snaps_on, snaps_off, strict=True):
            for pid in threads:
                assert a.process(pid) == b.process(pid)
                assert a.process(pid).cpu_percent == 0.0
        assert snaps_on[2].process(procs[0].pid) is snaps_on[1].process(procs[0].pid)
        assert snaps_off[2].process(procs[0].pid) is not snaps_off[1].process(procs[0].pid)
        w_on, w_off = snaps_on[2].process(watched), snaps_off[2].process(watched)
        assert all(t is u for t, u in zip(w_on.threads, snaps_on[1].process(watched).threads, strict=True))
        assert not any(t is u for t, u in zip(w_off.threads, snaps_off[1].process(watched).threads, strict=True))
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_rates_from_samples_handed_out_again_equal_those_from_deep_copies():
    """Every process on the machine, sampled with the reuse on: the rates made from the
    samples as handed out (the same objects where nothing moved) are those made from deep
    copies of each sample, which no shortcut can take."""
    import copy

    sampler = Sampler("/", Selection(others=True))
    samples = []
    for _ in range(4):
        samples.append(sampler.sample())
        time.sleep(0.3)
    copies = [copy.deepcopy(s) for s in samples]
    before = before_copy = None
    reused = 0
    for i in range(1, len(samples)):
        snap = make_snapshot(samples[i - 1], samples[i], TOPOLOGY, before=before)
        snap_copy = make_snapshot(copies[i - 1], copies[i], TOPOLOGY, before=before_copy)
        assert snap.processes == snap_copy.processes
        if before is not None:
            old = {p.sample.key: p for p in before.processes}
            reused += sum(1 for p in snap.processes if p is old.get(p.sample.key))
            assert not {id(p) for p in snap_copy.processes} & {id(p) for p in before_copy.processes}
        before, before_copy = snap, snap_copy
    assert reused  # the shortcut was taken: some process's rates handed out again
