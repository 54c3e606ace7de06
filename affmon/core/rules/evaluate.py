"""Every rule on one interval, in one place: ``evaluate`` runs the CPU, GPU, thread, memory
and loop rules, reconciles them and sorts them worst first, once; ``FindingTracker``
debounces them over intervals (a finding is raised after it holds for ``raise_after``
consecutive intervals and cleared after ``clear_after`` clean ones); ``exit_status`` is
``affmon diagnose``'s. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from affmon.core.model.jobs import Job, find_jobs
from affmon.core.model.rates import ProcessRates, Snapshot
from affmon.core.model.samples import NodeMemory
from affmon.core.rules.base import (
    DEFAULT_THRESHOLDS,
    Finding,
    RuleInputs,
    Severity,
    Thresholds,
    merge_same_code,
    worst_first,
)
from affmon.core.rules.cpu import (
    Neighbours,
    rule_affinity_drift,
    rule_contended,
    rule_cross_numa,
    rule_mask_too_narrow,
    rule_starved,
)
from affmon.core.rules.gpu import rule_gpu_starved, rule_pcie_degraded
from affmon.core.rules.loop_report import LoopReport, loop_findings, loop_reports
from affmon.core.rules.memory import rule_remote_memory
from affmon.core.rules.threads import rule_confined_thread, rule_gil_bound, rule_oversubscribed


def evaluate(
    snapshot: Snapshot,
    ctx: RuleInputs,
    loops: Mapping[int, LoopReport] | None = None,
    jobs: Sequence[Job] | None = None,
) -> list[Finding]:
    """Every rule on one interval, before debouncing, worst first: the CPU, thread, GPU and
    memory rules on each job, ``PCIE_DEGRADED`` on each GPU, and the loop rules on ``loops``
    (the interval's loop reports by PID). ``loops`` and ``jobs`` (``find_jobs``) are made
    from the snapshot when not given."""
    if jobs is None:
        jobs = find_jobs(snapshot)
    findings: list[Finding] = []
    everyone = Neighbours(snapshot, ctx.thresholds)
    for job in jobs:
        findings += rule_starved(job, snapshot, ctx)
        findings += rule_mask_too_narrow(job, snapshot, ctx)
        findings += rule_oversubscribed(job, snapshot, ctx)
        findings += rule_confined_thread(job, snapshot, ctx)
        findings += rule_gil_bound(job, snapshot, ctx)
        findings += rule_contended(job, snapshot, ctx, jobs, everyone)
        findings += rule_cross_numa(job, snapshot, ctx)
        findings += rule_gpu_starved(job, snapshot, ctx)
        findings += rule_affinity_drift(job, ctx)
        findings += rule_remote_memory(job, snapshot.topology, _memory_of)
    users = {i: job.pid for job in jobs for m in job.members for i in m.sample.gpu_indices}
    for gpu in snapshot.gpus:
        found = rule_pcie_degraded(gpu, ctx.thresholds)
        if found is not None:
            findings.append(replace(found, pid=users.get(gpu.sample.index)))
    if loops is None:
        loops = loop_reports(snapshot)
    return worst_first(reconciled(_merge_by_key(findings) + loop_findings(loops)))


# A job's own threads named as the cause: the loop's wait for data is their effect, and the
# INPUT_BOUND advice about workers and CPUs would send the person the wrong way.
_CAUSES = {
    "OVERSUBSCRIBED": (
        "thread_budget",
        "the workers queue behind the job's own threads (OVERSUBSCRIBED): cut the threads, not the workers",
    ),
    "CONFINED_THREAD": (
        "restore_threads",
        "a thread the loop depends on is confined to fewer CPUs than its job (CONFINED_THREAD): give it the "
        "job's CPUs back",
    ),
}


def reconciled(findings: list[Finding]) -> list[Finding]:
    """INPUT_BOUND of a job whose own threads are named as the cause (``_CAUSES``) says so
    instead of asking for more workers or CPUs."""
    causes = {(f.pid, f.code) for f in findings if f.code in _CAUSES}
    out = []
    for f in findings:
        cause = next((c for c in _CAUSES if (f.pid, c) in causes), None)
        if f.code == "INPUT_BOUND" and cause is not None:
            action, why = _CAUSES[cause]
            head = f.message.split("; ", 1)[0]
            f = replace(
                f,
                message=f"{head}; {why}",
                evidence={**f.evidence, "advice": {"action": action}},
                remedy=None,
            )
        out.append(f)
    return out


def _merge_by_key(findings: list[Finding]) -> list[Finding]:
    groups: dict[tuple[str, int | None], list[Finding]] = {}
    for f in findings:
        groups.setdefault(f.key, []).append(f)
    merged = []
    for group in groups.values():
        merged += merge_same_code(group)
    return merged


# -- debouncing ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Track:
    hits: int
    clean: int
    active: bool
    last: Finding


@dataclass(frozen=True)
class FindingTracker:
    """Raise a finding after ``raise_after`` consecutive intervals, clear it after
    ``clear_after`` clean ones. Immutable: ``update`` returns the next tracker."""

    thresholds: Thresholds = DEFAULT_THRESHOLDS
    tracks: Mapping[tuple[str, int | None], _Track] = field(default_factory=dict)

    def update(self, findings: Sequence[Finding]) -> FindingTracker:
        t = self.thresholds
        now = {f.key: f for f in findings}
        tracks: dict[tuple[str, int | None], _Track] = {}
        for key, f in now.items():
            old = self.tracks.get(key)
            hits = (old.hits if old else 0) + 1
            active = (old.active if old else False) or hits >= t.raise_after
            tracks[key] = _Track(hits, 0, active, f)
        for key, old in self.tracks.items():
            if key in now:
                continue
            clean = old.clean + 1
            if old.active and clean < t.clear_after:
                tracks[key] = _Track(0, clean, True, old.last)
        return FindingTracker(t, tracks)

    @property
    def active(self) -> list[Finding]:
        """Raised findings, worst first; a clearing one shows its last evidence."""
        found = [tr.last for tr in self.tracks.values() if tr.active]
        return worst_first(found)


def exit_status(findings: Iterable[Finding]) -> int:
    """``affmon diagnose``'s exit status: 1 when any finding is warn or bad."""
    return 1 if any(f.severity >= Severity.WARN for f in findings) else 0


def _memory_of(p: ProcessRates) -> NodeMemory | None:
    return p.sample.memory
