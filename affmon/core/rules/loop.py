"""Is the GPU idle because of its input or its loop? Rules on a loop breakdown.

Pure functions of a ``LoopBreakdown`` (``affmon.core.model.loop``) and what was seen of the
rank's DataLoader workers; they return ``affmon.core.rules.base.Finding`` values, so the
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

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from affmon.core.model.domains import plural
from affmon.core.model.loop import (
    CPU_WAIT,
    DATA_WAIT,
    GPU_WAIT,
    ON_CPU,
    OTHER,
    SPIN_GPU_BUSY,
    STALL_CPUS,
    LoopBreakdown,
    LoopWindow,
    TaskWait,
    WorkerStats,
    describe,
)
from affmon.core.rules.base import Finding, Severity
from affmon.core.text import term_safe


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
    stall_data         0.80     the loop waits for data this much of the interval ...
    stall_cpus         0.05     ... while all its workers together use less than this
                                many CPUs ...
    stall_loop_cpu     0.02     ... and the loop itself runs less than this share of it
                                (it gets no batch to work on): the pipeline is stalled
                                (STALLED), not slow
    =================  =======  =====================================================
    """

    gpu_idle: float = 0.50
    gpu_idle_bad: float = 0.25
    bound_share: float = 0.40
    worker_busy: float = 0.80
    worker_starved: float = 0.25
    free_cpu: float = 1.0
    stall_data: float = 0.80
    stall_cpus: float = STALL_CPUS
    stall_loop_cpu: float = 0.02


DEFAULT_LOOP_THRESHOLDS = LoopThresholds()


def _states(b: LoopBreakdown) -> dict[str, float]:
    """The loop's time by what limits it: the input (waiting for data, or loading it on the
    loop's own thread where its frames were read), the step's CPU work, the GPU, the CPU
    queue, the rest."""
    return {
        DATA_WAIT: b.input_share,
        ON_CPU: b.step_share,
        GPU_WAIT: b.shares[GPU_WAIT],
        CPU_WAIT: b.shares[CPU_WAIT],
        OTHER: b.shares[OTHER],
    }


def verdict(b: LoopBreakdown, t: LoopThresholds = DEFAULT_LOOP_THRESHOLDS) -> str:
    """``gpu_bound``, ``input_bound``, ``loop_bound``, ``cpu_starved`` or ``mixed``. A GPU whose
    use is unknown (no NVML) is judged by the loop alone. Time the loop spends on the CPU in a
    data loader's frames (``LoopBreakdown.loading``: ``num_workers=0``) counts as input, not
    as the step's own work."""
    states = _states(b)
    largest = max(states, key=lambda n: states[n])
    if largest == GPU_WAIT or (b.gpu_busy is not None and b.gpu_busy >= SPIN_GPU_BUSY):
        return "gpu_bound"
    if (b.gpu_busy is not None and b.gpu_busy >= t.gpu_idle) or states[largest] < t.bound_share:
        return "mixed"
    return {DATA_WAIT: "input_bound", ON_CPU: "loop_bound", CPU_WAIT: "cpu_starved"}.get(largest, "mixed")


def suggested_workers(loading: float, domain_cpus: int) -> int:
    """DataLoader workers for a loop that loads its own data ``loading`` of its time: with
    the step taking the rest, ``loading / (1 - loading)`` workers keep up if each loads as
    fast as the loop did; half as many again for the pickling, pinning and a worker's slower
    start, at least 2, and leaving the loop and its pin-memory thread a CPU each."""
    step = max(0.05, 1.0 - loading)
    wanted = max(2, math.ceil(1.5 * loading / step))
    room = max(1, domain_cpus - 2) if domain_cpus else wanted
    return min(wanted, room)


def _severity(b: LoopBreakdown, t: LoopThresholds) -> Severity:
    return Severity.BAD if b.gpu_busy is not None and b.gpu_busy < t.gpu_idle_bad else Severity.WARN


def _evidence(b: LoopBreakdown) -> dict[str, Any]:
    return {"loop": b.to_json(), "line": describe(b)}


def input_advice(
    workers: WorkerStats | None,
    seconds: float,
    data_wait: float,
    t: LoopThresholds,
    loading: float | None = None,
) -> dict[str, Any]:
    """What to do about a loop waiting for data, from what its workers did: ``action`` is one
    of ``add_workers``, ``more_cpus``, ``move_neighbours``, ``use_workers`` or
    ``check_pipeline``, with ``why`` in words and the numbers it rests on. ``loading``: the
    share of the interval the loop spent loading data itself (its frames), None unknown;
    ``data_wait`` is the whole input share (waiting for data plus that loading)."""
    domain = workers.domain_cpus if workers is not None else 0
    if loading and (workers is None or workers.count == 0 or loading >= data_wait - loading):
        # The loop's own loading is most of its input time: whatever workers it has (none,
        # or ones that deliver little), the cure is to move that work into workers.
        count = max(suggested_workers(data_wait, domain), (workers.count + 1) if workers else 0)
        why = (
            f"the loop loads its own data on the main thread ({loading:.0%} of its time in a data loader's "
            f"frames{', no worker processes' if workers is None or workers.count == 0 else ''}): use "
            f"DataLoader(num_workers={count})"
        )
        return {"action": "use_workers", "why": why, "suggested_workers": count, "domain_cpus": domain}
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
            f"{plural(workers.domain_cpus, 'CPU')} are full: give the job more CPUs or move the neighbours off"
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
                f"{plural(workers.count, 'worker')} each use {per_worker:.1f} CPUs and the loop still waits for data "
                f"{data_wait:.0%} of the time: use about {workers.count + extra} workers"
            )
            return {"action": "add_workers", "why": why, "suggested_workers": workers.count + extra, **facts}
        why = (
            f"{plural(workers.count, 'worker')} each use {per_worker:.1f} CPUs and the job's "
            f"{plural(workers.domain_cpus, 'CPU')} have "
            "no idle capacity: give the job more CPUs for more workers"
        )
        return {"action": "more_cpus", "why": why, **facts}
    why = (
        f"the {plural(workers.count, 'worker')} use only {per_worker:.1f} CPUs each and do not queue for CPUs: "
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
    advice = input_advice(workers, b.seconds, b.input_share, t, b.loading)
    gpu = f"the GPU is busy only {b.gpu_busy:.0%}"
    action = {
        "action": advice["action"],
        **({"workers": advice["suggested_workers"]} if "suggested_workers" in advice else {}),
    }
    if advice["why"].startswith("the loop loads its own data"):
        said = f"{gpu}: {advice['why']}"
    else:
        said = f"{gpu} while the training loop waits for data {b.shares[DATA_WAIT]:.0%} of the time; {advice['why']}"
    return [
        Finding(
            "INPUT_BOUND",
            _severity(b, t),
            b.pid,
            (b.tid,),
            said,
            {
                **_evidence(b),
                "workers": {k: v for k, v in advice.items() if k not in ("action", "why")},
                "advice": action,
            },
            remedy=_REMEDY[advice["action"]](advice),
        )
    ]


_REMEDY: dict[str, Callable[[dict[str, Any]], str | None]] = {
    "use_workers": lambda a: (
        f"load the data in DataLoader workers: DataLoader(num_workers={a['suggested_workers']})"
        if "suggested_workers" in a
        else "load the data in DataLoader workers (DataLoader(num_workers=N))"
    ),
    "add_workers": lambda a: f"more DataLoader workers: DataLoader(num_workers={a['suggested_workers']})",
    "more_cpus": lambda a: None,  # a core set is the cure: the placement findings carry it
    "move_neighbours": lambda a: None,
    "check_pipeline": lambda a: "look at what the workers wait on (storage, a lock, a remote source)",
}


def rule_loop_bound(
    b: LoopBreakdown,
    t: LoopThresholds = DEFAULT_LOOP_THRESHOLDS,
    workers: WorkerStats | None = None,
    window: LoopWindow | None = None,
) -> list[Finding]:
    if b.gpu_busy is None or not judged(b) or verdict(b, t) != "loop_bound":
        return []
    gpu = f"the GPU is busy only {b.gpu_busy:.0%}"
    return [
        Finding(
            "LOOP_BOUND",
            _severity(b, t),
            b.pid,
            (b.tid,),
            f"{gpu} while the training loop runs its step on the CPU {b.step_share:.0%} of the time: the step's "
            "own Python and kernel launches are the limit" + _unsure(b, workers),
            {**_evidence(b), **({"where": where} if (where := top_places(window)) else {})},
            remedy="cut the step's CPU work: larger batches, fewer small ops, CUDA graphs or torch.compile",
        )
    ]


def top_places(window: LoopWindow | None) -> list[dict[str, Any]]:
    """Where the loop's running probes found its Python stack, each with its share of the
    probes whose stack was read: the "which line" of a loop-bound job."""
    if window is None or not window.frame_probes:
        return []
    return [{"place": label, "share": round(n / window.frame_probes, 3)} for label, n in window.top_frames]


def _unsure(b: LoopBreakdown, workers: WorkerStats | None) -> str:
    """Where the loop's frames could not be read and it has no workers, its CPU time may be
    data loading as well: say so rather than blame the step alone."""
    if b.loading is not None or (workers is not None and workers.count > 0):
        return ""
    return (
        " (its Python frames could not be read and it has no DataLoader workers: if the loop also loads "
        "its data, DataLoader(num_workers=N) moves that off it)"
    )


def _where(waits: tuple[TaskWait, ...]) -> list[dict[str, Any]]:
    """The workers' threads by where they sleep, most first: ``futex_wait_queue (futex)``."""
    places: dict[str, int] = {}
    for w in waits:
        call = f" ({w.syscall})" if w.syscall and w.syscall != "-" else ""
        place = f"{w.wchan or 'an unknown place'}{call}"
        if w.state == "D":
            place += ", uninterruptible"
        places[place] = places.get(place, 0) + 1
    return [{"where": k, "threads": n} for k, n in sorted(places.items(), key=lambda kv: (-kv[1], kv[0]))]


def rule_stalled(
    b: LoopBreakdown, workers: WorkerStats | None, t: LoopThresholds = DEFAULT_LOOP_THRESHOLDS
) -> list[Finding]:
    """STALLED: the loop waits for data nearly all the time while none of its workers runs.
    The GPU need not be known: a loop blocked on workers that all sleep makes no progress
    whatever the GPU does; where the GPU is known, it must be mostly idle."""
    if b.unavailable is not None or workers is None or workers.count == 0 or not workers.waits:
        return []
    if b.gpu_busy is not None and b.gpu_busy >= t.gpu_idle:
        return []
    used = workers.cpus_used(b.seconds)
    if b.shares[DATA_WAIT] < t.stall_data or used >= t.stall_cpus or b.shares[ON_CPU] >= t.stall_loop_cpu:
        return []
    where = _where(workers.waits)
    said = ", ".join(f"{w['threads']} in {w['where']}" for w in where[:3])
    gpu = "" if b.gpu_busy is None else f"the GPU is busy only {b.gpu_busy:.0%} and "
    return [
        Finding(
            "STALLED",
            Severity.BAD,
            b.pid,
            (b.tid,),
            f"{gpu}the training loop has waited for data {b.shares[DATA_WAIT]:.0%} of the interval while its "
            f"{plural(workers.count, 'DataLoader worker')} used {used:.2f} CPUs in all and did not queue for one: "
            "their "
            f"threads sleep ({term_safe(said)}). The input pipeline is stalled; no CPU placement can help",
            {
                **_evidence(b),
                "workers": {"count": workers.count, "worker_cpus_used": round(used, 3)},
                "stalled": where[:8],
            },
            remedy=(
                "find what the workers wait on (py-spy dump --pid WORKER). Workers forked after the main process "
                "started OpenMP or other thread pools can deadlock in them: start the workers with "
                "DataLoader(multiprocessing_context='spawn') or keep the pools out of the parent before the fork "
                "(OMP_NUM_THREADS=1 in the workers); a worker in D state waits on storage"
            ),
        )
    ]


def evaluate_loop(
    b: LoopBreakdown,
    workers: WorkerStats | None,
    t: LoopThresholds = DEFAULT_LOOP_THRESHOLDS,
    *,
    stalls: bool = True,
    window: LoopWindow | None = None,
) -> list[Finding]:
    """Both rules on one rank's interval; empty for a GPU-bound (healthy) loop."""
    stalled = rule_stalled(b, workers, t) if stalls else []
    if stalled:  # the input's cause is named: no INPUT_BOUND advice about workers that sleep
        return stalled
    return rule_input_bound(b, workers, t) + rule_loop_bound(b, t, workers, window)
