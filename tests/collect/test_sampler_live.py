"""The sampler against real processes spawned with a known affinity: psr, masks and
wait ratios must be what the kernel reports."""

import os
import shutil
import subprocess
import time

import pytest

from affmon.collect.sampler import Sampler, Selection
from affmon.collect.selection import is_training_candidate
from affmon.collect.sysfs_topology import read_topology
from affmon.core.model.rates import make_snapshot
from tests.helpers.live import usable_cpus, workload

TOPOLOGY = read_topology("/")


def snapshot(selection: Selection, interval: float = 1.0):
    sampler = Sampler("/", selection)
    first = sampler.sample()
    time.sleep(interval)
    return make_snapshot(first, sampler.sample(), TOPOLOGY)


def ps_threads(pid: int) -> dict[int, tuple[int, str]]:
    """tid -> (psr, state) as procps reports them."""
    out = subprocess.run(["ps", "-L", "-o", "tid=,psr=,stat=", "-p", str(pid)], capture_output=True, text=True)
    rows = {}
    for line in out.stdout.splitlines():
        tid, psr, stat = line.split()
        rows[int(tid)] = (int(psr), stat)
    return rows


def test_three_busy_threads_on_one_cpu_wait_for_it():
    cpu = usable_cpus()[0]
    with workload("--cpus", str(cpu), "--busy", "3") as w:
        snap = snapshot(Selection(pids=(w["pid"],)))
        (p,) = snap.processes
        assert p.sample.pid == w["pid"]
        by_tid = {t.sample.tid: t for t in p.threads}
        assert set(w["busy"]) <= set(by_tid)
        for tid in w["busy"]:
            t = by_tid[tid]
            assert t.sample.psr == cpu
            assert t.sample.allowed_cpus == frozenset({cpu})
            # three runnable threads share one CPU: each waits about two thirds of the time
            assert t.wait_ratio is not None and t.wait_ratio > 0.4, t
        assert p.wait_ratio is not None and p.wait_ratio > 0.4
        # One CPU, shared: at most one CPU's worth, whatever else runs on it (a shared CI
        # machine may leave the three much less than a whole CPU).
        assert p.cpu_percent is not None and 0 < p.cpu_percent <= 110
        assert p.ran_on_cpus == frozenset({cpu})
        assert p.ran_on_numa_nodes == TOPOLOGY.nodes_of({cpu})
        # psr agrees with procps for every thread (they are all pinned, so it is stable)
        for tid, (psr, _stat) in ps_threads(w["pid"]).items():
            assert by_tid[tid].sample.psr == psr


def steal_ticks(cpu: int) -> int:
    """The time the hypervisor ran someone else while ``cpu`` had work (/proc/stat's steal),
    in clock ticks."""
    with open("/proc/stat") as f:
        line = next(x for x in f if x.startswith(f"cpu{cpu} "))
    return int(line.split()[8])


def test_a_spinning_threads_run_and_wait_fill_the_interval():
    """A thread that never sleeps is always running or runnable: its run and run-queue
    wait together cover the interval, however busy the machine is (a loaded CI machine
    only moves the split between the two), less the time the hypervisor gave its CPU to
    another guest (steal), which is neither."""
    cpus = usable_cpus()
    with workload("--cpus", str(cpus[-1]), "--busy", "1") as w:
        stolen = steal_ticks(cpus[-1])
        snap = snapshot(Selection(pids=(w["pid"],)))
        stolen = (steal_ticks(cpus[-1]) - stolen) / os.sysconf("SC_CLK_TCK") / snap.interval_s
        (busy,) = [t for t in snap.processes[0].threads if t.sample.tid in w["busy"]]
        assert busy.cpu_ns_delta is not None and busy.wait_ns_delta is not None
        covered = (busy.cpu_ns_delta + busy.wait_ns_delta) / (snap.interval_s * 1e9)
        assert covered + stolen > 0.85 and covered < 1.1, (covered, stolen)
        assert busy.cpu_percent is not None and busy.cpu_percent > 0
        assert busy.wait_ratio == busy.wait_ns_delta / (busy.cpu_ns_delta + busy.wait_ns_delta)


def test_per_thread_masks_are_per_thread():
    cpus = usable_cpus()
    if len(cpus) < 2:
        pytest.fail("this test needs two CPUs (CI has two)")
    with workload("--cpus", f"{cpus[0]},{cpus[1]}", "--sleepers", "2", "--sleeper-cpus", str(cpus[1])) as w:
        sampler = Sampler("/", Selection(pids=(w["pid"],)))
        (p,) = sampler.sample().processes
        masks = {t.tid: t.allowed_cpus for t in p.threads}
        assert masks[w["pid"]] == frozenset(cpus[:2])
        for tid in w["sleepers"]:
            assert masks[tid] == frozenset({cpus[1]})
            assert masks[tid] == frozenset(os.sched_getaffinity(tid))


def test_threads_with_the_same_mask_share_one_mask_and_each_keeps_its_own():
    cpus = usable_cpus()
    if len(cpus) < 2:
        pytest.fail("this test needs two CPUs (CI has two)")
    with workload("--cpus", f"{cpus[0]},{cpus[1]}", "--sleepers", "3", "--sleeper-cpus", str(cpus[1])) as w:
        sampler = Sampler("/", Selection(pids=(w["pid"],)))
        first = {t.tid: t.allowed_cpus for t in sampler.sample().processes[0].threads}
        second = {t.tid: t.allowed_cpus for t in sampler.sample().processes[0].threads}
        sleepers = [first[tid] for tid in w["sleepers"]] + [second[tid] for tid in w["sleepers"]]
        assert all(m == frozenset({cpus[1]}) for m in sleepers)
        assert len({id(m) for m in sleepers}) == 1  # one object, not one a thread a sample
        assert first[w["pid"]] == second[w["pid"]] == frozenset(cpus[:2])
        assert first[w["pid"]] is second[w["pid"]]


def test_pid_selection_takes_descendants_and_nothing_else():
    with workload("--child", "--sleepers", "1") as w, workload("--sleepers", "1") as other:
        pids = {p.pid for p in Sampler("/", Selection(pids=(w["pid"],))).sample().processes}
        assert pids == {w["pid"], w["child"]}
        assert other["pid"] not in pids


def test_default_selection_leaves_plain_python_to_all_and_skips_itself():
    # A python process with no GPU or deep-learning runtime mapped is not watched by
    # default; --all watches it. affmon (this process) is in neither.
    with workload("--sleepers", "1") as w:
        default = {p.pid for p in Sampler("/").sample().processes}
        every = {p.pid for p in Sampler("/", Selection(all=True)).sample().processes}
        assert w["pid"] not in default and w["pid"] in every
        assert os.getpid() not in default | every


def test_process_that_exits_between_samples_disappears():
    sampler = Sampler("/", Selection(all=True))
    with workload("--sleepers", "1") as w:
        first = sampler.sample()
        assert w["pid"] in {p.pid for p in first.processes}
    second = sampler.sample()
    assert w["pid"] not in {p.pid for p in second.processes}
    make_snapshot(first, second, TOPOLOGY)  # no error on the vanished process


def test_process_fields():
    with workload("--sleepers", "1") as w:
        (p,) = Sampler("/", Selection(pids=(w["pid"],))).sample().processes
        assert p.ppid == os.getpid()
        assert p.uid == os.getuid()
        assert p.cmdline is not None and "workload.py" in p.cmdline
        assert p.mems_allowed is not None and min(p.mems_allowed) >= 0
        main = p.main_thread
        assert main is not None and main.migrations is not None  # this kernel has sched


@pytest.mark.parametrize(
    ("comm", "argv", "expected"),
    [
        ("python3", ["/usr/bin/python3", "train.py"], True),
        ("pt_main_thread", ["/usr/bin/python3", "train.py"], True),
        ("torchrun", ["/usr/bin/python3", "/usr/local/bin/torchrun", "--nproc-per-node=8", "t.py"], True),
        ("deepspeed", ["/opt/venv/bin/python3.11", "/opt/venv/bin/deepspeed"], True),
        ("bash", ["bash", "-c", "python train.py"], False),
        ("pythonista", ["pythonista"], False),
        ("sshd", ["sshd: root"], False),
    ],
)
def test_training_candidates(comm, argv, expected):
    assert is_training_candidate(comm, argv) is expected


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to start a process as nobody"
)
def test_an_unwatched_process_still_says_whose_it_is():
    """Others are sampled lightly (no status each tick), but isolation must know their
    owner: it is read once per process."""
    sleeper = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "30"])
    try:
        with workload("--sleepers", "1") as w:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                sampler = Sampler("/", Selection(pids=(w["pid"],), others=True))
                found = {p.pid: p for p in sampler.sample().processes}
                if sleeper.pid in found and found[sleeper.pid].name == "sleep":
                    break
                time.sleep(0.05)
            other = found[sleeper.pid]
            assert not other.watched and other.uid == 65534 and other.user == "nobody"
            assert found[w["pid"]].watched and found[w["pid"]].uid == os.getuid()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_process_not_watched_costs_one_file_a_thread_and_still_shows_where_it_ran():
    """Others are evidence only (CPU taken, where, mask): ``stat`` and the mask, never
    ``schedstat`` or ``sched``; their wait and switches are unknown, not made up."""
    cpu = usable_cpus()[0]
    with workload("--sleepers", "1") as watched, workload("--cpus", str(cpu), "--busy", "2") as other:
        sampler = Sampler("/", Selection(pids=(watched["pid"],), others=True))
        read: list[tuple[int, str]] = []
        real = sampler.proc.read_task

        def counted(pid: int, tid: int, name: str) -> bytes | None:
            read.append((pid, name))
            return real(pid, tid, name)

        sampler.proc.read_task = counted  # type: ignore[method-assign]
        first = sampler.sample()
        time.sleep(0.5)
        snap = make_snapshot(first, sampler.sample(), TOPOLOGY)
        assert {name for pid, name in read if pid == other["pid"]} == {"stat"}
        assert {"schedstat", "stat"} <= {name for pid, name in read if pid == watched["pid"]}
        p = snap.process(other["pid"])
        assert p is not None and not p.sample.watched
        busy = [t for t in p.threads if t.sample.tid in other["busy"]]
        assert len(busy) == 2 and all(t.sample.psr == cpu and t.sample.allowed_cpus == {cpu} for t in busy)
        assert all(t.cpu_percent is not None and t.cpu_percent > 0 for t in busy)  # the kernel's ticks
        assert all(t.sample.wait_ns is None and t.sample.migrations is None for t in busy)
