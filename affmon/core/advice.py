"""From a snapshot to a suggested core set for a job: the bridge between the findings
(``findings.py``) and the planner (``planner.py``). Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from affmon.core.cpuset import format_cpulist
from affmon.core.findings import DEFAULT_THRESHOLDS, Finding, Job, Thresholds, busy_threads, demand, find_jobs
from affmon.core.planner import Occupant, Suggestion, suggest
from affmon.core.rates import ProcessRates, Snapshot

# Findings a different core set can fix; PCIE_DEGRADED cannot, AFFINITY_DRIFT carries its own.
FIXABLE = frozenset({"STARVED", "MASK_TOO_NARROW", "CONTENDED", "CROSS_NUMA", "GPU_STARVED"})
OCCUPANT_MIN_PERCENT = 10.0


def occupants(snapshot: Snapshot, job_pids: frozenset[int], t: Thresholds = DEFAULT_THRESHOLDS) -> list[Occupant]:
    """Every other process that holds CPUs: where its busy threads ran, or its mask when
    it is a pinned training process. Kernel threads cannot move and are left out."""
    found = []
    topo = snapshot.topology
    for p in snapshot.processes:
        s = p.sample
        if s.pid in job_pids or s.kernel:
            continue
        busy = [th for th in p.threads if (th.cpu_percent or 0) >= OCCUPANT_MIN_PERCENT]
        cpus = frozenset(th.sample.psr for th in busy if th.sample.psr is not None)
        main = s.main_thread
        pinned = None
        if main is not None and main.allowed_cpus is not None:
            allowed = (s.cgroup_cpus or topo.allowed_cpus) & topo.online_cpus
            mask = main.allowed_cpus & topo.online_cpus
            pinned = mask if mask and mask < allowed else None
        if not cpus and not (s.training and pinned):
            continue
        gpu_ids = tuple(
            g.sample.pci_bus_id for g in snapshot.gpus if g.sample.index in s.gpu_indices and g.sample.pci_bus_id
        )
        found.append(
            Occupant(
                pid=s.pid,
                name=s.name,
                cpus=cpus,
                cpu_percent=sum(th.cpu_percent or 0 for th in busy),
                training=s.training,
                gpu_bus_ids=gpu_ids,
                pinned_cpus=pinned,
            )
        )
    return found


def suggest_for_job(job: Job, snapshot: Snapshot, t: Thresholds = DEFAULT_THRESHOLDS) -> Suggestion:
    topo = snapshot.topology
    busy = busy_threads(job, snapshot.interval_s, t)
    indices = {i for m in job.members for i in m.sample.gpu_indices}
    gpu_ids = tuple(g.sample.pci_bus_id for g in snapshot.gpus if g.sample.index in indices and g.sample.pci_bus_id)
    root = job.root.sample
    allowed = (root.cgroup_cpus & topo.online_cpus) if root.cgroup_cpus else None
    return suggest(
        topo,
        gpu_bus_ids=gpu_ids,
        allowed_cpus=allowed or None,
        current_cpus=frozenset(th.sample.psr for _, th in busy if th.sample.psr is not None),
        demand_cpus=sum(demand(th, snapshot.interval_s) for _, th in busy),
        others=occupants(snapshot, job.pids, t),
    )


def suggestion_json(s: Suggestion) -> dict[str, object]:
    return {
        "cpus": format_cpulist(s.cpus),
        "move_off": list(s.move_off),
        "numa_node": s.numa_node,
        "reasons": list(s.reasons),
        "warnings": list(s.warnings),
    }


def attach_suggestions(
    findings: Sequence[Finding], snapshot: Snapshot, t: Thresholds = DEFAULT_THRESHOLDS
) -> list[Finding]:
    """Each fixable finding gets its job's suggested core set (computed once per job)."""
    jobs = {job.pid: job for job in find_jobs(snapshot)}
    cache: dict[int, dict[str, object]] = {}
    result = []
    for f in findings:
        job = jobs.get(f.pid) if f.pid is not None else None
        if f.code in FIXABLE and job is not None:
            if job.pid not in cache:
                cache[job.pid] = suggestion_json(suggest_for_job(job, snapshot, t))
            f = replace(f, suggestion=cache[job.pid])
        result.append(f)
    return result


def job_of(snapshot: Snapshot, pid: int) -> Job | None:
    """The job whose root is ``pid``, or a job made of ``pid`` alone when it is watched but
    belongs to another job (``pin --suggest`` on a worker)."""
    for job in find_jobs(snapshot):
        if job.pid == pid:
            return job
    process: ProcessRates | None = snapshot.process(pid)
    return None if process is None else Job(root=process, members=(process,))
