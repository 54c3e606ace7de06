"""From a snapshot to a suggested core set for a job: the bridge between the findings
(``affmon.core.rules``) and the planner (``planner.py``). Pure.

The job is sized by what it needs over the window that raised the finding (``need.py``):
diagnose's samples, the monitor's recent history, ``pin --suggest``'s own samples; never
fewer CPUs than it has busy threads where its domain allows."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, replace

from affmon.core.model.cpuset import CpuSet, format_cpulist
from affmon.core.model.domains import allowed_pool, gpu_domain
from affmon.core.model.jobs import Job, find_jobs
from affmon.core.model.rates import ProcessRates, Snapshot
from affmon.core.model.samples import ThreadSample
from affmon.core.model.topology import Topology
from affmon.core.model.tree import descendants
from affmon.core.plan.isolation import Candidate, left_alone
from affmon.core.plan.need import JobNeed, job_need, window_for
from affmon.core.plan.placements import Placement, placements
from affmon.core.plan.planner import Occupant, Suggestion, suggest
from affmon.core.rules.base import DEFAULT_THRESHOLDS, Finding, RuleInputs, Thresholds, busy_threads
from affmon.core.rules.cpu import Neighbours
from affmon.core.rules.evaluate import evaluate
from affmon.core.rules.threads import Confined, job_cpus, restores_only

# Findings a core set may cure (where the suggestion changes nothing, it says so: "no_change").
# GPU_STARVED is a symptom: where its CPU side waits, STARVED or CONTENDED carry the core set;
# where it is only saturated (a loop at 100% that does not queue), no core set runs it faster.
# OVERSUBSCRIBED, INPUT_BOUND, LOOP_BOUND and STALLED name a remedy of their own; PCIE_DEGRADED
# has none affmon can apply; AFFINITY_DRIFT carries its own mask.
FIXABLE = frozenset({"STARVED", "MASK_TOO_NARROW", "CONTENDED", "CROSS_NUMA", "CONFINED_THREAD"})

INIT_IS_NO_JOB = "PID 1 is the machine's init, not a job: affmon offers no pin of its tree (name the job's own PID)"

NOTHING_TO_PLACE = (
    "none of its findings is one a core set cures (its threads do not queue for a CPU, nothing else "
    "runs on its CPUs, no thread is confined), so no placement change can help"
)


def placement_cures(findings: Iterable[Finding], pid: int) -> bool:
    """Whether any of job ``pid``'s findings is one a core set may cure (``FIXABLE``)."""
    return any(f.pid == pid and f.code in FIXABLE for f in findings)


def occupants(snapshot: Snapshot, job_pids: frozenset[int], t: Thresholds = DEFAULT_THRESHOLDS) -> list[Occupant]:
    """Every other process that holds CPUs: a training process where its contending threads
    ran (and its mask when pinned); any other contending process every CPU its contending
    threads may run on. A thread contends by its fair share of the CPU it ran on, not only
    from 20% (``findings.Neighbours``). Kernel threads cannot move and are left out."""
    found = []
    topo = snapshot.topology
    training = training_pids(snapshot)
    neighbours = Neighbours(snapshot, t)
    roots = {m.sample.pid: job.pid for job in find_jobs(snapshot) for m in job.members}
    for p in snapshot.processes:
        s = p.sample
        if s.pid in job_pids or s.kernel:
            continue
        s = replace(s, training=s.pid in training)
        busy = neighbours.of(s.pid)
        cpus = frozenset(th.sample.psr for th in busy if th.sample.psr is not None)
        if not s.training:
            # A busy tenant can come back to any CPU its mask allows, not just where it ran
            # in the last second: on the H200, moving only the hogs seen on the job's CPUs
            # left the others free to return (914 samples/s against 1186 before).
            for th in busy:
                cpus |= (th.sample.allowed_cpus or frozenset()) & topo.online_cpus
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
                root=roots.get(s.pid),
                user=s.user,
                mask=None if main is None or main.allowed_cpus is None else main.allowed_cpus & topo.online_cpus,
            )
        )
    return found


def training_pids(snapshot: Snapshot) -> frozenset[int]:
    """Processes that are part of a training job. Where any process is on a GPU: GPU
    processes and their descendants (DataLoader workers); a python process elsewhere is
    another tenant, like any CPU hog (on the H200, 16 ``python -c 'while True: pass'`` hogs
    counted as training would not have been moved off). Without GPU processes: every
    process that looks like training (``ProcessSample.training``; a python monitor or
    script without torch is not)."""
    on_gpu = {p.sample.pid for p in snapshot.processes if p.sample.gpu_indices}
    if not on_gpu:
        return frozenset(p.sample.pid for p in snapshot.processes if p.sample.training)
    return frozenset(descendants(on_gpu, {p.sample.pid: p.sample.ppid for p in snapshot.processes}))


def suggest_for_job(
    job: Job, snapshot: Snapshot, t: Thresholds = DEFAULT_THRESHOLDS, *, window: Sequence[Snapshot] = ()
) -> Suggestion:
    """The planner's core set for ``job``, sized by its need over ``window`` (snapshots
    oldest first, ending with ``snapshot``; empty: ``snapshot`` alone)."""
    return _suggest(job, snapshot, job_need(job, window_for(snapshot, window), t), t)


def _suggest(job: Job, snapshot: Snapshot, need: JobNeed, t: Thresholds) -> Suggestion:
    topo = snapshot.topology
    confined = restores_only(job, snapshot, t, topo)
    if confined:
        return restore_confined(job, topo, confined)
    busy = busy_threads(job, snapshot.interval_s, t)
    indices = {i for m in job.members for i in m.sample.gpu_indices}
    gpu_ids = tuple(g.sample.pci_bus_id for g in snapshot.gpus if g.sample.index in indices and g.sample.pci_bus_id)
    allowed = _allowed(job, snapshot)
    found = suggest(
        topo,
        gpu_bus_ids=gpu_ids,
        allowed_cpus=allowed,
        current_cpus=frozenset(th.sample.psr for _, th in busy if th.sample.psr is not None),
        demand_cpus=need.demand_cpus,
        others=occupants(snapshot, job.pids, t),
        need_cpus=need.cpus,
    )
    return _worded(found, need)


def restore_confined(job: Job, topology: Topology, confined: Sequence[Confined]) -> Suggestion:
    """The job's own CPUs for its confined threads: a pin of the whole job to the CPUs its
    threads already share changes only the threads narrower than that."""
    cpus = job_cpus(job, topology)
    named = ", ".join(f"{c.thread.sample.tid} ({c.role}, on {format_cpulist(c.mask)})" for c in confined[:4]) + (
        f" and {len(confined) - 4} more" if len(confined) > 4 else ""
    )
    nodes = topology.nodes_of(cpus)
    return Suggestion(
        cpus=cpus,
        numa_node=nodes[0] if len(nodes) == 1 else None,
        reasons=(
            f"Threads {named} may run on fewer CPUs than the rest of the job and wait for one there, while the "
            "rest of the job does not queue.",
            f"Suggested: the job's own CPUs {format_cpulist(cpus)}, which gives those threads back the CPUs "
            "their job runs on and leaves every other thread's mask as it is.",
        ),
        warnings=(),
        move_off=(),
    )


def unchanged_by(job: Job, cpus: CpuSet, move_off: Collection[int], topology: Topology) -> str | None:
    """Why pinning ``job`` (every thread of every member) to ``cpus`` and moving ``move_off``
    would change nothing; None when it would change something. A pin that sets 0-15 on
    threads that have 0-15 is no remedy, and saying it is one hides the real one."""
    if move_off:
        return None
    wanted = cpus & topology.online_cpus
    for _, th in job.threads():
        mask = th.sample.allowed_cpus
        if mask is None or (mask & topology.online_cpus) != wanted:
            return None
    return (
        f"every thread of the job already has CPUs {format_cpulist(wanted)} and nothing else busy can move off "
        "them, so no placement change can help"
    )


def _allowed(job: Job, snapshot: Snapshot) -> CpuSet | None:
    root = job.root.sample
    topo = snapshot.topology
    return ((root.cgroup_cpus & topo.online_cpus) if root.cgroup_cpus else None) or None


def _worded(s: Suggestion, need: JobNeed) -> Suggestion:
    """The planner's suggestion with advice's measured sentence: how the job was sized."""
    reasons = list(s.reasons)
    at = next((i for i, r in enumerate(reasons) if r.startswith("Suggested: ")), len(reasons))
    reasons.insert(at, need.sentence)
    return replace(s, reasons=tuple(reasons))


def suggestion_json(s: Suggestion, no_change: str | None = None) -> dict[str, object]:
    """The suggestion as a finding carries it; ``no_change``: why pinning to it would change
    nothing (the front ends then offer no pin and say so)."""
    return {
        "cpus": format_cpulist(s.cpus),
        "move_off": list(s.move_off),
        "numa_node": s.numa_node,
        "reasons": list(s.reasons),
        "warnings": list(s.warnings),
        "no_change": no_change,
    }


def attach_suggestions(
    findings: Sequence[Finding],
    snapshot: Snapshot,
    t: Thresholds = DEFAULT_THRESHOLDS,
    *,
    window: Sequence[Snapshot] = (),
) -> list[Finding]:
    """Each fixable finding gets its job's suggested core set (computed once per job),
    sized over ``window``: the intervals that raised the findings."""
    jobs = {job.pid: job for job in find_jobs(snapshot)}
    cache: dict[int, dict[str, object]] = {}
    result = []
    for f in findings:
        job = jobs.get(f.pid) if f.pid is not None else None
        if f.code in FIXABLE and job is not None:
            if job.pid not in cache:
                found = suggest_for_job(job, snapshot, t, window=window)
                why = (
                    INIT_IS_NO_JOB if job.pid == 1 else unchanged_by(job, found.cpus, found.move_off, snapshot.topology)
                )
                cache[job.pid] = suggestion_json(found, why)
            f = replace(f, suggestion=cache[job.pid])
        result.append(f)
    return result


def movable_occupants(snapshot: Snapshot, job: Job, cpus: CpuSet, t: Thresholds = DEFAULT_THRESHOLDS) -> list[Occupant]:
    """The occupants ``--isolate`` would move off ``cpus``: those that hold any of them, when
    the job's allowed CPUs leave somewhere else to go (none when ``cpus`` is all of them)."""
    pool, _ = allowed_pool(snapshot.topology, _allowed(job, snapshot))
    if pool <= cpus:
        return []
    return [o for o in occupants(snapshot, job.pids, t) if o.cpus & cpus]


def job_of(snapshot: Snapshot, pid: int) -> Job | None:
    """The job whose root is ``pid``, or a job made of ``pid`` alone when it is watched but
    belongs to another job (``pin --suggest`` on a worker)."""
    for job in find_jobs(snapshot):
        if job.pid == pid:
            return job
    process: ProcessRates | None = snapshot.process(pid)
    return None if process is None else Job(root=process, members=(process,))


@dataclass(frozen=True)
class PinProposal:
    """What ``r`` in the TUI offers: pin ``pid`` (the job's root, so its DataLoader
    workers can come along) to ``suggestion.cpus``. ``move_off``: the other processes
    on those CPUs that ``isolate`` would move off (``pin --isolate``)."""

    pid: int
    name: str
    current_mask: CpuSet | None
    children: tuple[int, ...]  # the job's other members (with_children pins them too)
    suggestion: Suggestion
    move_off: tuple[Occupant, ...]
    # The start time of the process shown, and of each one isolate would move: the pin
    # acts on these processes only, not on whatever holds their PIDs when Enter is pressed.
    start_ticks: int
    move_off_starts: tuple[int, ...]
    # Busy on those CPUs but not to be moved by ``isolate`` (another user's, PID 1, pinned
    # on purpose), each with why: the dialog lists them, the pin reports them again.
    left_alone: tuple[tuple[Occupant, str], ...] = ()
    # Threads of the processes in ``move_off`` that pinned themselves (a mask other than
    # their process's) onto the suggested CPUs: isolation leaves them where they chose, and
    # the dialog names each (the process, the thread, its mask) before Enter.
    self_pinned: tuple[tuple[Occupant, ThreadSample], ...] = ()
    # Why the pin would change nothing (every thread already has the suggested CPUs and
    # nothing can move off them): ``r`` then offers no pin and names the findings' remedies.
    no_change: str | None = None
    training: bool = True  # ``Job.training``: a training job, else a watched process

    def moved_to(self, o: Occupant, allowed: CpuSet) -> CpuSet:
        """The CPUs isolation leaves ``o``: its mask without the suggestion's CPUs, or, when
        nothing is left, what its cgroup (``allowed``) allows without them."""
        return ((o.mask or allowed) - self.suggestion.cpus) or (allowed - self.suggestion.cpus)

    @property
    def isolate_candidates(self) -> tuple[tuple[int, int], ...]:
        return tuple(zip((o.pid for o in self.move_off), self.move_off_starts, strict=True))


def self_pinned_threads(
    snapshot: Snapshot, movers: Sequence[Occupant], cpus: CpuSet
) -> tuple[tuple[Occupant, ThreadSample], ...]:
    """The threads of ``movers`` that isolation off ``cpus`` leaves where they are: a mask
    of their own (not their process's main thread's) that holds any of ``cpus``, as
    ``affmon.actions.isolate`` judges them when it moves the rest."""
    found = []
    for o in movers:
        process = snapshot.process(o.pid)
        main = process.sample.main_thread if process is not None else None
        if process is None or main is None or main.allowed_cpus is None:
            continue
        for th in process.sample.threads:
            mask = th.allowed_cpus
            if th.tid != o.pid and mask is not None and mask != main.allowed_cpus and mask & cpus:
                found.append((o, th))
    return tuple(found)


def propose_pin(
    snapshot: Snapshot,
    pid: int,
    t: Thresholds = DEFAULT_THRESHOLDS,
    *,
    my_uid: int | None = None,
    moved_by_affmon: Collection[tuple[int, int]] = (),
    window: Sequence[Snapshot] = (),
    judge: Callable[[int, int, int], str | None] | None = None,
) -> PinProposal | None:
    """The pin ``affmon pin ROOT --suggest --with-children`` would make for the job that
    ``pid`` belongs to (or for ``pid`` alone when it is in no job); None when it is gone.
    With ``my_uid`` (the user who would pin), the busy processes ``isolate`` must leave
    alone (``affmon.core.plan.isolation``) are set apart from those it would move;
    ``moved_by_affmon``: (PID, start) of processes an earlier affmon isolate narrowed,
    whose narrow mask is therefore no one's decision; ``window``: the recent snapshots
    (oldest first) the job is sized over. ``judge`` (job PID, PID, start) says why a process
    is left alone where the caller can read more than the snapshot holds (its session and
    cgroup, which root's manners need: ``affmon.actions.isolate.judge``)."""
    root = pid
    for candidate in find_jobs(snapshot):
        if pid in candidate.pids:
            root = candidate.pid
            break
    job = job_of(snapshot, root)
    if job is None:
        return None
    suggestion = suggest_for_job(job, snapshot, t, window=window)
    main = job.root.sample.main_thread
    on_cpus = sorted(movable_occupants(snapshot, job, suggestion.cpus, t), key=lambda o: o.pid)
    kept: list[tuple[Occupant, str]] = []
    starts = {p.sample.pid: p.sample.start_ticks for p in snapshot.processes}
    for o in on_cpus:
        if judge is not None:
            why = judge(job.pid, o.pid, starts[o.pid])
        elif my_uid is not None:
            why = left_alone(_candidate(snapshot, o.pid, moved_by_affmon), my_uid)
        else:
            why = None
        if why is not None:
            kept.append((o, why))
    move_off = tuple(o for o in on_cpus if o.pid not in {k.pid for k, _ in kept})
    return PinProposal(
        pid=job.pid,
        name=job.root.sample.name,
        current_mask=main.allowed_cpus if main else None,
        children=tuple(m.sample.pid for m in job.members if m is not job.root),
        training=job.training,
        suggestion=suggestion,
        move_off=move_off,
        start_ticks=job.root.sample.start_ticks,
        move_off_starts=tuple(starts[o.pid] for o in move_off),
        left_alone=tuple(kept),
        self_pinned=self_pinned_threads(snapshot, move_off, suggestion.cpus),
        no_change=(INIT_IS_NO_JOB if job.pid == 1 else None)
        or unchanged_by(job, suggestion.cpus, [o.pid for o in on_cpus], snapshot.topology)
        or (
            None if placement_cures(evaluate(snapshot, RuleInputs(snapshot.topology, t)), job.pid) else NOTHING_TO_PLACE
        ),
    )


def _candidate(snapshot: Snapshot, pid: int, moved_by_affmon: Collection[tuple[int, int]]) -> Candidate:
    process = snapshot.process(pid)
    assert process is not None  # an occupant comes from the snapshot
    s = process.sample
    main = s.main_thread
    topo = snapshot.topology
    allowed = (s.cgroup_cpus or topo.allowed_cpus) & topo.online_cpus
    return Candidate(
        pid=s.pid,
        uid=s.uid,
        user=s.user,
        kernel=s.kernel,
        mask=None if main is None or main.allowed_cpus is None else main.allowed_cpus & topo.online_cpus,
        allowed=allowed or None,
        moved_by_affmon=s.key in moved_by_affmon,
    )


def candidate_placements(
    job: Job, snapshot: Snapshot, t: Thresholds = DEFAULT_THRESHOLDS, *, window: Sequence[Snapshot] = ()
) -> list[Placement]:
    """Placements a closed loop can measure for ``job``, the suggestion first: wider,
    narrower, with and without isolating the others, its main loop and DataLoader workers
    on separate cores, its whole domain (``placements.py``). Each lies within the job's
    domain (its GPUs' CPUs inside its allowed CPUs, or the allowed CPUs) in whole cores."""
    need = job_need(job, window_for(snapshot, window), t)
    suggestion = _suggest(job, snapshot, need, t)
    topo = snapshot.topology
    pool, _ = allowed_pool(topo, _allowed(job, snapshot))
    indices = {i for m in job.members for i in m.sample.gpu_indices}
    bus_ids = [g.sample.pci_bus_id for g in snapshot.gpus if g.sample.index in indices and g.sample.pci_bus_id]
    domain = frozenset().union(*(gpu_domain(topo, b, pool).cpus for b in bus_ids)) if bus_ids else pool
    others_busy = any(not o.training and o.cpus & domain for o in occupants(snapshot, job.pids, t))
    main_threads = sum(1 for th in need.threads if th.role != "DataLoader worker")
    return placements(topo, domain, suggestion.cpus, main_threads=main_threads, others_busy=others_busy)
