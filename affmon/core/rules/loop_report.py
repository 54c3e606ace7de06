"""The training loop's breakdown per process, for every front end: which processes the loop
probe watches, the breakdown of each over an interval beside its GPUs' busy share, and the
findings it raises. Pure: takes samples and snapshots, returns values.

The probe's raw window rides on the sample (``ProcessSample.loop``), so a replay computes
all of this again from a recording; ``affmon.core.rules.tick`` calls ``loop_reports`` once
per interval and keeps the reports on the ``Tick``; ``evaluate`` raises their
``loop_findings`` with every other rule's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from affmon.core.model.loop import SHARES, LoopBreakdown, LoopWindow, breakdown, describe, merge_windows
from affmon.core.model.rates import Snapshot
from affmon.core.model.samples import ProcessSample, Sample
from affmon.core.rules.base import Finding
from affmon.core.rules.loop import DEFAULT_LOOP_THRESHOLDS, LoopThresholds, evaluate_loop, top_places, verdict

MAX_LOOPS = 16  # loops probed at once: a node's ranks (8 GPUs), with room for --pid ones


def loop_targets(sample: Sample, pids: Iterable[int] = (), most: int = MAX_LOOPS) -> list[int]:
    """The processes whose loop thread to probe, ``--pid`` ones first: each of ``pids``
    that is in the sample, then every watched process on a GPU (a rank); where no watched
    process is on a GPU, each watched training process whose parent is not one (a rank
    seen without NVML, not its DataLoader workers). Kernel threads never."""
    asked = set(pids)
    procs = {p.pid: p for p in sample.processes if p.watched and not p.kernel}
    chosen = [pid for pid in sorted(asked) if pid in procs]
    ranks = [pid for pid, p in sorted(procs.items()) if p.gpu_indices]
    if not ranks:
        training = {pid for pid, p in procs.items() if p.training}
        ranks = [pid for pid in sorted(training) if procs[pid].ppid not in training]
    chosen += [pid for pid in ranks if pid not in asked]
    return chosen[:most]


def gpu_busy(process: ProcessSample, snapshot: Snapshot) -> float | None:
    """The busy share (0..1) of the process's GPUs over the interval: the mean of their
    NVML utilisation (each already the mean of NVML's samples since the last tick); None
    when the process is on no GPU or none of its GPUs reported one."""
    wanted = set(process.gpu_indices)
    utils = [
        g.sample.util_percent
        for g in snapshot.gpus
        if g.sample.index in wanted and not g.sample.lost and g.sample.util_percent is not None
    ]
    return None if not utils else sum(utils) / len(utils) / 100.0


@dataclass(frozen=True)
class LoopReport:
    """One process's loop over an interval: the raw ``window``, its ``breakdown`` (None when
    the thread's schedstat could not be read: it exited, or the window was empty), what the
    rules make of it and why it is incomplete (``unavailable``)."""

    pid: int
    name: str
    window: LoopWindow
    breakdown: LoopBreakdown | None
    verdict: str | None
    line: str
    unavailable: str | None
    # A training process (on a GPU, or seen as training): a script waiting on a child's
    # pipe is not a stalled input pipeline, so STALLED is judged for training loops only.
    training: bool = True

    @property
    def available(self) -> bool:
        return self.breakdown is not None and self.unavailable is None

    def to_json(self) -> dict[str, Any]:
        """``LoopBreakdown.to_json`` (shares null when there is none) with the probing rate,
        the probes taken, the verdict, the line and the workers."""
        w = self.window
        b = self.breakdown
        shares: dict[str, Any] = (
            b.to_json()
            if b is not None
            else {
                "pid": w.pid,
                "tid": w.tid,
                "seconds": round(w.seconds, 3),
                **dict.fromkeys(SHARES),
                "gpu_busy": None,
                "spin_inferred": None,
                "blocked_split": False,
                "blocked_probes": 0,
            }
        )
        workers = w.workers
        return {
            **shares,
            "available": self.available,
            "unavailable": self.unavailable,
            "rate_hz": w.rate_hz,
            "samples": w.probes_taken,
            "verdict": self.verdict,
            "line": self.line,
            "where": top_places(w),
            "frames_unavailable": w.frames_unavailable,
            "workers": None
            if workers is None
            else {
                "count": workers.count,
                "cpus_used": round(workers.cpus_used(w.seconds), 3),
                "wait_ratio": None if workers.wait_ratio is None else round(workers.wait_ratio, 3),
                "domain_cpus": workers.domain_cpus,
                "free_cpus": None if workers.free_cpus is None else round(workers.free_cpus, 2),
            },
        }


NO_SCHEDSTAT = "the loop thread's schedstat could not be read over the interval (it exited, or was just found)"


def report(
    pid: int,
    name: str,
    window: LoopWindow,
    busy: float | None,
    t: LoopThresholds = DEFAULT_LOOP_THRESHOLDS,
) -> LoopReport:
    b = breakdown(window, busy)
    if b is None:
        return LoopReport(pid, name, window, None, None, f"loop: unavailable: {NO_SCHEDSTAT}", NO_SCHEDSTAT)
    line = describe(b)
    if b.unavailable is not None:
        line += f" (blocked time not split: {b.unavailable})"
    said = verdict(b, t)
    if window.frames_unavailable is not None and said in ("loop_bound", "input_bound"):
        # Whether the loop's CPU time is its step or its data, and where, come from its frames.
        line += f" (Python frames not read: {window.frames_unavailable})"
    return LoopReport(pid, name, window, b, said, line, b.unavailable)


def loop_reports(snapshot: Snapshot, t: LoopThresholds = DEFAULT_LOOP_THRESHOLDS) -> dict[int, LoopReport]:
    """The report of every process the probe covered over this interval, by PID."""
    found = {}
    for p in snapshot.processes:
        s = p.sample
        if s.loop is not None:
            found[s.pid] = replace(
                report(s.pid, s.name, s.loop, gpu_busy(s, snapshot), t), training=s.training or bool(s.gpu_indices)
            )
    return found


def combined_reports(
    intervals: Sequence[Mapping[int, LoopReport]], t: LoopThresholds = DEFAULT_LOOP_THRESHOLDS
) -> dict[int, LoopReport]:
    """Each process's reports over consecutive intervals as one (``diagnose`` over its
    run): the windows merged, the GPU's busy share the mean over the intervals weighted by
    their length (unknown when unknown in any)."""
    by_pid: dict[int, list[LoopReport]] = {}
    for reports in intervals:
        for pid, r in reports.items():
            by_pid.setdefault(pid, []).append(r)
    combined = {}
    for pid, seen in by_pid.items():
        last = seen[-1]
        same = [r for r in seen if r.window.tid == last.window.tid]
        busy_each = [r.breakdown.gpu_busy if r.breakdown is not None else None for r in same]
        seconds = sum(r.window.seconds for r in same)
        busy = None
        if None not in busy_each and seconds > 0:
            busy = sum(r.window.seconds * (b or 0.0) for r, b in zip(same, busy_each, strict=True)) / seconds
        merged = report(pid, last.name, merge_windows([r.window for r in same]), busy, t)
        combined[pid] = replace(merged, training=last.training)
    return combined


def loop_findings(reports: Mapping[int, LoopReport], t: LoopThresholds = DEFAULT_LOOP_THRESHOLDS) -> list[Finding]:
    """The loop rules on every report with a breakdown: INPUT_BOUND and LOOP_BOUND where the
    GPU's busy share is known (``judged``), STALLED also without a GPU."""
    found: list[Finding] = []
    for r in reports.values():
        if r.breakdown is not None:
            found += evaluate_loop(r.breakdown, r.window.workers, t, stalls=r.training, window=r.window)
    return found
