"""Rates from two samples: wait ratio, CPU share, switches, migrations, where threads ran."""

import dataclasses

import pytest

from affmon.core.model.rates import make_snapshot, thread_rates
from affmon.core.model.samples import ProcessSample, Sample, ThreadSample
from affmon.core.model.topology import NumaNode, Topology

TOPO = Topology.build(
    source="sysfs",
    online_cpus=range(8),
    allowed_cpus=range(8),
    numa_nodes=[NumaNode(0, frozenset(range(4))), NumaNode(1, frozenset(range(4, 8)))],
    packages=[],
    cores=[],
    l3_groups=[],
    gpus=[],
)


def thread(tid=10, start=5, psr=0, cpu=0, wait=0, vcs=0, ics=0, mig=0, mask=frozenset({0})):
    return ThreadSample(
        tid=tid,
        start_ticks=start,
        name="t",
        state="R",
        psr=psr,
        flags=0,
        cpu_ns=cpu,
        wait_ns=wait,
        timeslices=1,
        voluntary_switches=vcs,
        involuntary_switches=ics,
        migrations=mig,
        allowed_cpus=mask,
    )


def process(*threads, pid=10, start=5):
    return ProcessSample(pid, start, 1, "python", 0, "root", "python x", None, None, tuple(threads))


def sample(t, *processes):
    return Sample(t, t, 0.01, tuple(processes), ())


def test_thread_rates():
    prev = thread(cpu=1_000_000_000, wait=0, vcs=10, ics=5, mig=2)
    cur = thread(cpu=1_550_000_000, wait=450_000_000, vcs=30, ics=105, mig=6)
    r = thread_rates(cur, prev, 2.0)
    assert r.cpu_percent == pytest.approx(27.5)
    assert r.wait_ratio == pytest.approx(0.45)
    assert r.voluntary_switches_per_s == 10
    assert r.involuntary_switches_per_s == 50
    assert r.migrations_per_s == 2


def test_idle_thread_has_no_wait_ratio_not_zero():
    r = thread_rates(thread(cpu=5, wait=5), thread(cpu=5, wait=5), 1.0)
    assert r.cpu_percent == 0 and r.wait_ratio is None and not r.ran


def test_unknown_counters_stay_unknown():
    prev = thread(mig=None)
    cur = thread(cpu=10, mig=None)
    assert thread_rates(cur, prev, 1.0).migrations_per_s is None


def test_counter_going_backwards_is_unknown_not_negative():
    r = thread_rates(thread(cpu=10, ics=3), thread(cpu=20, ics=9), 1.0)
    assert r.cpu_percent is None and r.involuntary_switches_per_s is None


def test_reused_tid_is_a_new_thread():
    r = thread_rates(thread(start=99, cpu=100), thread(start=5, cpu=10), 1.0)
    assert r.cpu_percent is None and r.wait_ratio is None


def test_process_rates_sum_threads_and_find_nodes():
    a0, a1 = thread(tid=10, psr=1, cpu=0, wait=0), thread(tid=10, psr=2, cpu=600, wait=400)
    b0, b1 = thread(tid=11, psr=5, cpu=0, wait=0), thread(tid=11, psr=6, cpu=1000, wait=0)
    c0, c1 = thread(tid=12, psr=7, cpu=50, wait=0), thread(tid=12, psr=7, cpu=50, wait=0)  # idle
    snap = make_snapshot(sample(1.0, process(a0, b0, c0)), sample(2.0, process(a1, b1, c1)), TOPO)
    (p,) = snap.processes
    assert p.wait_ratio == pytest.approx(400 / 2000)
    assert p.ran_on_cpus == frozenset({2, 6})  # the idle thread's CPU 7 is not "ran on"
    assert p.ran_on_numa_nodes == (0, 1)
    assert p.cpu_percent == pytest.approx(100 * 1600 / 1e9)


def test_new_process_and_pid_reuse_have_no_rates():
    old = process(thread(cpu=0), start=5)
    new = process(thread(start=7, cpu=900), start=7)  # same PID, other start time
    snap = make_snapshot(sample(1.0, old), sample(2.0, new), TOPO)
    (p,) = snap.processes
    assert p.cpu_percent is None and p.wait_ratio is None and p.ran_on_cpus == frozenset()


def test_samples_out_of_order_are_refused():
    with pytest.raises(ValueError):
        make_snapshot(sample(2.0), sample(2.0), TOPO)


@pytest.mark.parametrize("mig", [3, None])
def test_the_same_sample_twice_gives_what_the_general_path_gives(mig):
    import dataclasses

    same = thread(cpu=500, wait=70, vcs=4, ics=2, mig=mig)
    copy = dataclasses.replace(same)  # equal, but not the same object: the general path
    assert copy is not same
    assert thread_rates(same, same, 1.0) == thread_rates(same, copy, 1.0)


def test_a_thread_scheduled_in_neither_interval_keeps_its_rates_object_and_others_get_new_ones():
    idle = thread(tid=10, psr=1, cpu=500, wait=70, vcs=4, ics=2)
    ran0, ran1 = thread(tid=11, psr=2, cpu=100, wait=0), thread(tid=11, psr=3, cpu=900, wait=50)
    slept0, slept1 = thread(tid=12, psr=4, cpu=10, wait=0), thread(tid=12, psr=4, cpu=300, wait=0)
    s0 = sample(1.0, process(idle, ran0, slept0))
    s1 = sample(2.0, process(idle, ran1, slept1))
    s2 = sample(3.0, process(idle, ran1, slept1))  # the sampler hands the same samples back
    first = make_snapshot(s0, s1, TOPO)
    second = make_snapshot(s1, s2, TOPO, before=first)
    (p1,), (p2,) = first.processes, second.processes
    assert p2.threads[0] is p1.threads[0]  # idle in both intervals: handed out again
    # 11 and 12 ran in the first interval, not in the second: new objects, of zero rates
    for i in (1, 2):
        assert p2.threads[i] is not p1.threads[i] and p1.threads[i].cpu_ns_delta
        assert p2.threads[i].cpu_ns_delta == 0 and p2.threads[i].cpu_percent == 0.0
    third = make_snapshot(s2, dataclasses.replace(s2, monotonic_s=4.0), TOPO, before=second)
    (p3,) = third.processes
    assert all(a is b for a, b in zip(p3.threads, p2.threads, strict=True))
    # and every one equals what is built without the snapshot before
    alone = make_snapshot(s2, dataclasses.replace(s2, monotonic_s=4.0), TOPO)
    assert p3.threads == alone.processes[0].threads


def test_a_carried_process_s_unknown_thread_rates_are_made_when_read_not_held():
    """A quiet process's threads are carried, not read: none has a rate. Held as a rates
    object each, 10,000 of them were about 1 MB; they are now made as they are read, and
    read as the same unknown rates (every one None, the thread's sample with it)."""
    import gc
    import tracemalloc

    threads = tuple(thread(tid=100 + i, cpu=50, wait=None, vcs=None, ics=None, mig=None) for i in range(10_000))
    read = dataclasses.replace(process(*threads), watched=False, cpu_ns=0)
    carried = dataclasses.replace(read, threads_read=False, cpu_ns=30_000_000)
    s0, s1 = sample(1.0, read), sample(2.0, carried)
    gc.collect()
    tracemalloc.start()
    try:
        (p,) = make_snapshot(s0, s1, TOPO).processes
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held < 20_000  # a rates object a thread: 960,000 bytes
    assert not p.rated and p.cpu_percent == pytest.approx(3.0) and p.ran_on_cpus == frozenset()
    assert len(p.threads) == 10_000
    for t, made in ((threads[0], p.threads[0]), (threads[-1], p.threads[-1]), *zip(threads, p.threads, strict=True)):
        assert made.sample is t
        assert made.cpu_percent is made.wait_ratio is made.cpu_ns_delta is made.migrations_per_s is None
    unknown = tuple(thread_rates(t, None, 1.0) for t in threads)  # what a thread without a rate gets
    assert p.threads == unknown and unknown == tuple(p.threads) and p.threads[2:4] == unknown[2:4]
    assert hash(p.threads) == hash(unknown)
    assert make_snapshot(s0, s1, TOPO).processes[0] == p  # built again: equal


def test_processes_whose_threads_were_read_are_rated():
    (p,) = make_snapshot(sample(1.0, process(thread(cpu=0))), sample(2.0, process(thread(cpu=10))), TOPO).processes
    assert p.rated and isinstance(p.threads, tuple)
