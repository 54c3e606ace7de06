"""Recorded H200 jobs as snapshots, and synthetic samples built from schedstat-like counters
(each thread's run and run-queue wait per interval): what the tests of sizing a suggestion,
of affmon's own threads and of GIL-bound jobs are fed."""

from __future__ import annotations

import gzip
import itertools
from pathlib import Path

from affmon.core.model.rates import Snapshot, make_snapshot
from affmon.core.model.samples import GpuSample, PcieLink, ProcessSample, Sample, ThreadSample
from affmon.core.model.topology import CacheGroup, Core, Gpu, NumaNode, Package, Topology
from affmon.core.recording.format import read_recording

RECORDINGS = Path(__file__).parent.parent / "fixtures" / "recordings"
MS = 1_000_000  # ns


def recording(name: str) -> tuple[Topology, list[Snapshot]]:
    with gzip.open(RECORDINGS / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        header, samples = read_recording(f, name)
        pairs = list(itertools.pairwise(samples))
    return header.topology, [make_snapshot(a, b, header.topology) for a, b in pairs]


def machine(n: int, *, gpu: bool = False) -> Topology:
    cpus = frozenset(range(n))
    return Topology.build(
        source="sysfs",
        online_cpus=cpus,
        allowed_cpus=cpus,
        numa_nodes=[NumaNode(0, cpus)],
        packages=[Package(0, cpus)],
        cores=[Core(0, frozenset({c})) for c in range(n)],
        l3_groups=[CacheGroup(3, cpus)],
        gpus=[Gpu("0000:3b:00.0", "nvidia", 0, cpus)] if gpu else [],
    )


# -- synthetic samples: each thread's run and wait per interval, in ms of a 1000-ms interval


def thread(tid: int, run_ms: int, wait_ms: int | None, psr: int, mask: frozenset[int], name: str) -> ThreadSample:
    return ThreadSample(
        tid=tid,
        start_ticks=1,
        name=name,
        state="R",
        psr=psr,
        flags=0,
        cpu_ns=run_ms * MS,
        wait_ns=None if wait_ms is None else wait_ms * MS,
        timeslices=1,
        voluntary_switches=0,
        involuntary_switches=0,
        migrations=0,
        allowed_cpus=mask,
    )


# (pid, ppid, name, watched, training, on_gpu, [(tid, psr, mask, [(run_ms, wait_ms) per interval])])
Spec = tuple[int, int, str, bool, bool, bool, list[tuple[int, int, frozenset[int], list[tuple[int, int | None]]]]]


def samples_of(specs: list[Spec]) -> list[Sample]:
    """Cumulative counters for each interval's run and wait: one sample per interval, plus the first."""
    intervals = len(specs[0][6][0][3])
    out = []
    for i in range(intervals + 1):
        processes = []
        for pid, ppid, name, watched, training, on_gpu, threads in specs:
            made = []
            for tid, psr, mask, per in threads:
                run = sum(r for r, _ in per[:i])
                waits = [w for _, w in per[:i]]
                wait = None if any(w is None for w in waits) else sum(w or 0 for w in waits)
                made.append(thread(tid, run, wait, psr, mask, name))
            processes.append(
                ProcessSample(
                    pid=pid,
                    start_ticks=1,
                    ppid=ppid,
                    name=name,
                    uid=0,
                    user="root",
                    cmdline=name,
                    mems_allowed=None,
                    cgroup_cpus=None,
                    threads=tuple(made),
                    gpu_indices=(0,) if on_gpu else (),
                    watched=watched,
                    training=training,
                )
            )
        gpus = (
            GpuSample(0, "H200", "0000:3b:00.0", None, 10, 0, 0, 0, None, None, None, None,
                      PcieLink(5, 16, 5, 16), None, None, None, ()),
        ) if any(s[5] for s in specs) else ()  # fmt: skip
        out.append(Sample(float(i), float(i), 0.001, tuple(processes), gpus))
    return out


def snaps(topology: Topology, specs: list[Spec]) -> list[Snapshot]:
    return [make_snapshot(a, b, topology) for a, b in itertools.pairwise(samples_of(specs))]
