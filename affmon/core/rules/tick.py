"""One tick for every front end: a sample in, the interval it closes out (rates, findings
debounced over the intervals so far, jobs). The monitor, the exporter and ``diagnose`` loop
over ``advance``; what each shows of a tick is its own business. Pure.

The training loop's breakdown (``affmon.core.rules.loop_report``) is part of the tick: each
process the loop probe covered gets a ``LoopReport`` of the interval (``Tick.loops``), and
its INPUT_BOUND and LOOP_BOUND findings are debounced with the others.

A sample that is not newer than the last one closes no interval (rates need time between
two samples). Findings of a process that exited go with it: no front end shows a process's
finding after the process is gone, and its debounce track is not kept growing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from affmon.core.model.jobs import Job, find_jobs
from affmon.core.model.rates import Snapshot, make_snapshot
from affmon.core.model.samples import Sample
from affmon.core.model.topology import Topology
from affmon.core.rules.base import DEFAULT_THRESHOLDS, ExpectedMasks, Finding, RuleInputs, Thresholds
from affmon.core.rules.evaluate import FindingTracker, evaluate
from affmon.core.rules.loop_report import LoopReport, loop_reports


@dataclass(frozen=True)
class Tick:
    """Where the loop stands after a sample. ``snapshot`` and ``jobs`` are those of the
    interval the last sample closed (None and empty when it closed none); ``loops``, the
    loop breakdown of each process the loop probe covered in that interval, by PID (the
    monitor's LOOP column and detail line, the exporter's loop gauges); ``findings`` are
    the debounced findings in force, worst first."""

    topology: Topology
    thresholds: Thresholds = DEFAULT_THRESHOLDS
    last_sample: Sample | None = None
    tracker: FindingTracker = field(default_factory=FindingTracker)
    snapshot: Snapshot | None = None
    jobs: tuple[Job, ...] = ()
    loops: Mapping[int, LoopReport] = field(default_factory=dict)
    findings: tuple[Finding, ...] = ()
    samples: int = 0  # samples taken in
    intervals: int = 0  # intervals closed

    @property
    def closed(self) -> bool:
        """Whether the last sample closed an interval (there is a snapshot of it)."""
        return self.snapshot is not None


def start(topology: Topology, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> Tick:
    return Tick(topology, thresholds, tracker=FindingTracker(thresholds))


def advance(state: Tick, sample: Sample, expected_masks: ExpectedMasks | None = None) -> Tick:
    """The state after one more sample."""
    previous = state.last_sample
    taken = replace(state, last_sample=sample, samples=state.samples + 1, snapshot=None, jobs=(), loops={})
    if previous is None or sample.monotonic_s <= previous.monotonic_s:
        return taken
    snapshot = make_snapshot(previous, sample, state.topology, before=state.snapshot)
    loops = loop_reports(snapshot)
    jobs = tuple(find_jobs(snapshot))
    inputs = RuleInputs(state.topology, state.thresholds, {} if expected_masks is None else expected_masks)
    found = evaluate(snapshot, inputs, loops, jobs)
    tracker = _prune(state.tracker.update(found), {p.pid for p in sample.processes})
    return replace(
        taken,
        tracker=tracker,
        snapshot=snapshot,
        jobs=jobs,
        loops=loops,
        findings=tuple(tracker.active),
        intervals=state.intervals + 1,
    )


def _prune(tracker: FindingTracker, live: set[int]) -> FindingTracker:
    """Forget findings of processes that exited (a machine-wide finding has no PID)."""
    tracks = {key: track for key, track in tracker.tracks.items() if key[1] is None or key[1] in live}
    return tracker if len(tracks) == len(tracker.tracks) else FindingTracker(tracker.thresholds, tracks)
