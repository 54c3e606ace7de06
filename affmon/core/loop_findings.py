"""Is the GPU idle because of its input or its loop? Rules on a loop breakdown.

Pure functions of a ``LoopBreakdown`` (``affmon.core.loop``) and what was seen of the
rank's DataLoader workers; they return ``affmon.core.findings.Finding`` values, so the
same debouncing (``FindingTracker``) applies.

* ``INPUT_BOUND``: the GPU is mostly idle while the loop waits for data. The advice comes
  from the workers: none busy enough to be the limit means they wait on something else;
  busy and queued for CPUs means neighbours starve them; busy and not queued means there are
  too few of them (add workers while the job's CPUs have idle capacity, else give it CPUs).
* ``LOOP_BOUND``: the GPU is mostly idle while the loop runs on the CPU: the step's own
  Python and launch work is the limit.
* A GPU-bound loop (the GPU busy, the loop waiting for it) is healthy: no finding.

Both findings say why the *GPU* is idle, so neither is raised when the GPU's busy share is
unknown (no NVML, or a process on no GPU: a CPU-only loop), nor when the probe could not
read what the loop blocks on (``LoopBreakdown.unavailable``): ``verdict`` still describes the
loop. The advice (what to do about the input) is in the evidence, under ``advice``:
``Finding.suggestion`` is a core set, which these findings do not make.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from affmon.core.findings import Finding, Severity
from affmon.core.loop import (
    CPU_WAIT,
    DATA_WAIT,
    GPU_WAIT,
    ON_CPU,
    SPIN_GPU_BUSY,
    LoopBreakdown,
    WorkerStats,
    describe,
)


@dataclass(frozen=True)
class LoopThresholds:
    """=================  =======  =====================================================
    field              default  meaning
    =================  =======  =====================================================
    gpu_idle           0.50     the GPU counts as mostly idle below this busy share
                                (``Thresholds.gpu_util_low``, as a share)
    gpu_idle_bad       0.25     below this the finding is bad, not warn
    bound_share        0.40     the loop's share in one state, and its largest, to
                                call the loop bound by it
    worker_busy        0.80     a worker using this many CPUs is CPU-bound
    worker_starved     0.25     workers' run-queue wait ratio called starved
                                (``Thresholds.starved_bad``)
    free_cpu           1.0      idle CPUs in the job's domain worth using
    =================  =======  =====================================================
    """

    gpu_idle: float = 0.50
    gpu_idle_bad: float = 0.25
    bound_share: float = 0.40
    worker_busy: float = 0.80
    worker_starved: float = 0.25
    free_cpu: float = 1.0


DEFAULT_LOOP_THRESHOLDS = LoopThresholds()


def verdict(b: LoopBreakdown, t: LoopThresholds = DEFAULT_LOOP_THRESHOLDS) -> str:
    """``gpu_bound``, ``input_bound``, ``loop_bound``, ``cpu_starved`` or ``mixed``. A GPU whose
    use is unknown (no NVML) is judged by the loop alone."""
    largest = b.largest
    if largest == GPU_WAIT or (b.gpu_busy is not None and b.gpu_busy >= SPIN_GPU_BUSY):
        return "gpu_bound"
    if (b.gpu_busy is not None and b.gpu_busy >= t.gpu_idle) or b.shares[largest] < t.bound_share:
        return "mixed"
    return {DATA_WAIT: "input_bound", ON_CPU: "loop_bound", CPU_WAIT: "cpu_starved"}.get(largest, "mixed")


def _severity(b: LoopBreakdown, t: LoopThresholds) -> Severity:
    return Severity.BAD if b.gpu_busy is not None and b.gpu_busy < t.gpu_idle_bad else Severity.WARN


def _evidence(b: LoopBreakdown) -> dict[str, Any]:
    return {"loop": b.to_json(), "line": describe(b)}


def input_advice(workers: WorkerStats | None, seconds: float, data_wait: float, t: LoopThresholds) -> dict[str, Any]:
    """What to do about a loop waiting for data, from what its workers did: ``action`` is one
    of ``add_workers``, ``more_cpus``, ``move_neighbours``, ``use_workers`` or
    ``check_pipeline``, with ``why`` in words and the numbers it rests on."""
    if workers is None or workers.count == 0:
        return {"action": "use_workers", "why": "no worker processes were seen: load data in DataLoader workers"}
    used = workers.cpus_used(seconds)
    per_worker = used / workers.count
    wait = workers.wait_ratio or 0.0
    free = workers.free_cpus
    facts = {
        "workers": workers.count,
        "worker_cpus_used": round(used, 2),
        "cpus_per_worker": round(per_worker, 2),
        "worker_wait_ratio": round(wait, 3),
        "domain_cpus": workers.domain_cpus,
        "free_cpus": None if free is None else round(free, 2),
    }
    if wait >= t.worker_starved:
        if free is not None and free >= t.free_cpu:
            why = (
                f"the workers queue for a CPU {wait:.0%} of the time they want one while {free:.1f} of the job's "
                "CPUs are idle: pin them onto the idle CPUs, away from the neighbours"
            )
            return {"action": "move_neighbours", "why": why, **facts}
        why = (
            f"the workers queue for a CPU {wait:.0%} of the time they want one and the job's "
            f"{workers.domain_cpus} CPUs are full: give the job more CPUs or move the neighbours off"
        )
        return {"action": "more_cpus", "why": why, **facts}
    if per_worker >= t.worker_busy:
        # The loop would go 1 / (1 - data_wait) times as fast with the data ready: as many times the workers.
        wanted = max(workers.count + 1, round(workers.count / max(0.05, 1.0 - data_wait)))
        if free is None or free >= t.free_cpu:
            extra = wanted - workers.count
            if free is not None:
                extra = min(extra, max(1, int(free)))
            why = (
                f"{workers.count} workers each use {per_worker:.1f} CPUs and the loop still waits for data "
                f"{data_wait:.0%} of the time: use about {workers.count + extra} workers"
            )
            return {"action": "add_workers", "why": why, "suggested_workers": workers.count + extra, **facts}
        why = (
            f"{workers.count} workers each use {per_worker:.1f} CPUs and the job's {workers.domain_cpus} CPUs have "
            "no idle capacity: give the job more CPUs for more workers"
        )
        return {"action": "more_cpus", "why": why, **facts}
    why = (
        f"the {workers.count} workers use only {per_worker:.1f} CPUs each and do not queue for CPUs: "
        "they wait on something else (storage, a lock, a remote source)"
    )
    return {"action": "check_pipeline", "why": why, **facts}


def judged(b: LoopBreakdown) -> bool:
    """Whether the rules may raise a finding on ``b``: the GPU's busy share is known and
    the blocked time could be looked into."""
    return b.gpu_busy is not None and b.unavailable is None


def rule_input_bound(
    b: LoopBreakdown, workers: WorkerStats | None, t: LoopThresholds = DEFAULT_LOOP_THRESHOLDS
) -> list[Finding]:
    if b.gpu_busy is None or not judged(b) or verdict(b, t) != "input_bound":
        return []
    advice = input_advice(workers, b.seconds, b.shares[DATA_WAIT], t)
    gpu = f"the GPU is busy only {b.gpu_busy:.0%}"
    action = {
        "action": advice["action"],
        **({"workers": advice["suggested_workers"]} if "suggested_workers" in advice else {}),
    }
    return [
        Finding(
            "INPUT_BOUND",
            _severity(b, t),
            b.pid,
            (b.tid,),
            f"{gpu} while the training loop waits for data {b.shares[DATA_WAIT]:.0%} of the time; {advice['why']}",
            {
                **_evidence(b),
                "workers": {k: v for k, v in advice.items() if k not in ("action", "why")},
                "advice": action,
            },
        )
    ]


def rule_loop_bound(b: LoopBreakdown, t: LoopThresholds = DEFAULT_LOOP_THRESHOLDS) -> list[Finding]:
    if b.gpu_busy is None or not judged(b) or verdict(b, t) != "loop_bound":
        return []
    gpu = f"the GPU is busy only {b.gpu_busy:.0%}"
    return [
        Finding(
            "LOOP_BOUND",
            _severity(b, t),
            b.pid,
            (b.tid,),
            f"{gpu} while the training loop runs on the CPU {b.shares[ON_CPU]:.0%} of the time: the step's own "
            "Python and kernel launches are the limit (larger batches, fewer small ops, CUDA graphs or "
            "torch.compile cut them)",
            _evidence(b),
        )
    ]


def evaluate_loop(
    b: LoopBreakdown, workers: WorkerStats | None, t: LoopThresholds = DEFAULT_LOOP_THRESHOLDS
) -> list[Finding]:
    """Both rules on one rank's interval; empty for a GPU-bound (healthy) loop."""
    return rule_input_bound(b, workers, t) + rule_loop_bound(b, t)
