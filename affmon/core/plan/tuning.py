"""The judging half of ``affmon tune``: what a measured window says of a placement, whether
a placement keeps the planner's rules, and which placement to keep. Pure.

Two scores, one per run, said in every table:

* ``gpu``: the mean of NVML's utilisation samples of the job's GPUs over the window (the
  gateway reports, at each tick, the mean of the samples NVML took since the last one; the
  window's score weights each tick by its length). On the H200 this mean over 8 s tracked a
  ResNet-50 job's throughput across ten masks of 2 to 16 CPUs with Spearman rank
  correlation 0.95 (samples/s about 47 x util%), with no change to the job.
* ``cpu`` (no GPU of the job known to NVML): the CPU time the job's threads got per second
  of the window, in CPUs. For threads that are always runnable, run + run-queue wait is
  fixed, so this is their demand x (1 - wait share): a placement that makes them wait less
  scores higher. The wait share (``schedstat``) is shown beside it.

Noise: every placement is measured at least twice, in two passes alternated with the
starting placement (start, every candidate, start, every candidate in reverse, start), so
a drift of the machine's other load shows as a difference between a placement's own
windows. The run-to-run ``spread`` is the largest difference between two windows of one
placement (no less than ``MIN_SPREAD_SHARE`` of their mean, ``spread_of_rows``); a
candidate replaces the starting placement only when its mean beats the start's by more
than the spread. A single 2-s window beside a guest swinging 50-125% of a 2-CPU machine
kept a "winner" by 0.01 before; now such a lead is noise.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from affmon.core.model import tree
from affmon.core.model.cpuset import CpuSet
from affmon.core.model.domains import core_units, fmt_cpus
from affmon.core.model.rates import Snapshot
from affmon.core.model.topology import Topology
from affmon.core.plan.placements import Placement

ScoreKind = Literal["gpu", "cpu"]
SCORE_UNITS: dict[ScoreKind, str] = {"gpu": "GPU util %", "cpu": "CPUs of run time"}


@dataclass(frozen=True, slots=True)
class Measure:
    """One measured window of one placement."""

    seconds: float
    gpu_util_percent: float | None  # mean of NVML's samples of the job's GPUs over the window
    cpu_cpus: float | None  # CPU time of the job's threads per second of the window (1.0 = one CPU)
    wait_share: float | None  # run-queue wait / (run + wait) of the job's threads

    def score(self, kind: ScoreKind) -> float | None:
        return self.gpu_util_percent if kind == "gpu" else self.cpu_cpus


def job_pids(snapshot: Snapshot, root: int, with_children: bool) -> frozenset[int]:
    """``root`` and, with ``with_children``, its descendants in ``snapshot``."""
    if not with_children:
        return frozenset({root})
    return frozenset(tree.descendants({root}, {p.sample.pid: p.sample.ppid for p in snapshot.processes}))


def window_measure(window: Sequence[Snapshot], root: int, with_children: bool, gpu_indices: Iterable[int]) -> Measure:
    """The window made of consecutive snapshots ``window``: the GPU utilisation of ``gpu_indices``
    weighted by interval length, and the CPU time and wait of the job's threads summed over
    the intervals (a thread counts from its second sample on)."""
    indices = frozenset(gpu_indices)
    seconds = sum(t.interval_s for t in window)
    util_sum = util_s = 0.0
    run_ns = wait_ns = 0
    for snapshot in window:
        values = [g.sample.util_percent for g in snapshot.gpus if g.sample.index in indices]
        known = [v for v in values if v is not None]
        if known:
            util_sum += sum(known) / len(known) * snapshot.interval_s
            util_s += snapshot.interval_s
        pids = job_pids(snapshot, root, with_children)
        for p in snapshot.processes:
            if p.sample.pid in pids:
                for th in p.threads:
                    run_ns += th.cpu_ns_delta or 0
                    wait_ns += th.wait_ns_delta or 0
    return Measure(
        seconds=seconds,
        gpu_util_percent=util_sum / util_s if util_s else None,
        cpu_cpus=run_ns / (seconds * 1e9) if seconds > 0 else None,
        wait_share=wait_ns / (run_ns + wait_ns) if run_ns + wait_ns else None,
    )


def placement_problem(topology: Topology, placement: Placement, pool: CpuSet) -> str | None:
    """Why ``placement`` breaks a rule of the planner (one clause), or None when it keeps
    them: its CPUs (and the split's halves) lie inside ``pool`` (the job's allowed, online
    CPUs), are made of whole cores, and a split's halves are disjoint and cover it."""
    if not placement.cpus:
        return "it has no CPU"
    outside = placement.cpus - pool
    if outside:
        return f"CPUs {fmt_cpus(outside)} are outside the CPUs the job may use ({fmt_cpus(pool)})"
    units = core_units(topology, pool).units
    parts = [("it", placement.cpus)]
    if placement.main_cpus is not None or placement.worker_cpus is not None:
        main, workers = placement.main_cpus or frozenset(), placement.worker_cpus or frozenset()
        if not main or not workers or main & workers or main | workers != placement.cpus:
            return "its main loop and worker CPUs do not split its CPUs in two"
        parts += [("its main loop's CPUs", main), ("its workers' CPUs", workers)]
    for name, cpus in parts:
        split = [u for u in units if u & cpus and not u <= cpus]
        if split:
            return f"{name} split core {fmt_cpus(split[0])} (a physical core goes whole to one side)"
    return None


@dataclass(frozen=True, slots=True)
class Choice:
    """The row to keep (0: the starting placement) and why, in one sentence."""

    row: int
    why: str


# Two windows of one placement may agree by chance: no less than this share of its score
# counts as noise.
MIN_SPREAD_SHARE = 0.02


def spread_of(first: float, second: float) -> float:
    """The run-to-run spread from two scores of the same placement."""
    return max(abs(first - second), MIN_SPREAD_SHARE * abs(first + second) / 2)


def spread_of_rows(rows: Sequence[Sequence[float]]) -> float | None:
    """The spread from the repeated scores of each placement: the largest difference
    between two scores of one placement (``spread_of`` each pair); None when no placement
    was measured twice."""
    found = [spread_of(a, b) for scores in rows for i, a in enumerate(scores) for b in scores[i + 1 :]]
    return max(found) if found else None


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def choose(scores: Sequence[float | None], spread: float, unit: str) -> Choice:
    """``scores``: the mean score of each row, the starting placement's first. The best
    candidate is kept when it beats the start by more than ``spread``; otherwise the
    start stays, since what it gains is within the noise."""
    start = scores[0]
    candidates = [(s, -i) for i, s in enumerate(scores) if i and s is not None]
    if not candidates:
        return Choice(0, "no candidate was measured, so the starting placement stays")
    best, minus = max(candidates)
    row = -minus
    if start is None:
        return Choice(row, f"the starting placement has no score; row {row} scored best ({best:.2f} {unit})")
    if best > start + spread:
        return Choice(
            row,
            f"row {row} scored {best:.2f} {unit} against {start:.2f} for the starting placement, more than the "
            f"run-to-run spread of {spread:.2f}",
        )
    return Choice(
        0,
        f"no placement is better than the starting one beyond the noise: the best, row {row}, scored {best:.2f} "
        f"{unit} against {start:.2f}, within the run-to-run spread of {spread:.2f}; the starting placement stays",
    )
