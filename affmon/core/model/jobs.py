"""Jobs: a training process with its watched descendants that are not jobs of their own
(a rank and its DataLoader workers, ``find_jobs``). A watched process that is not training
(a monitor, a script: ``ProcessSample.training`` False) is a job of its own too, judged by the
CPU rules only (``Job.training``). With what a thread wanted of a CPU (``demand``), the
share of its time it waited (``wait_ratio``) and the GPUs a job uses. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from affmon.core.model.rates import GpuRates, ProcessRates, Snapshot, ThreadRates
from affmon.core.model.tree import descendants, root_of

# -- jobs and busy threads ------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    root: ProcessRates
    members: tuple[ProcessRates, ...]  # root first, then workers

    @property
    def training(self) -> bool:
        """A training job (a rank and its workers): on a GPU, or a process the sampler saw as
        training. False for a watched process that is neither (a monitor, a script): the CPU
        rules judge it, the GPU rules and the planner's share among ranks do not count it."""
        return any(m.sample.gpu_indices for m in self.members) or self.root.sample.training

    @property
    def pid(self) -> int:
        return self.root.sample.pid

    @property
    def pids(self) -> frozenset[int]:
        return frozenset(m.sample.pid for m in self.members)

    def threads(self) -> Iterable[tuple[ProcessRates, ThreadRates]]:
        for member in self.members:
            for thread in member.threads:
                yield member, thread


def find_jobs(snapshot: Snapshot) -> list[Job]:
    """Group watched processes into jobs. Where any watched process is on a GPU, the jobs
    are rooted at GPU processes (a rank), with their watched descendants that are not on
    a GPU (DataLoader workers); other python processes that look like training are then
    just other tenants, while a watched process that is not training (a monitor) outside
    those jobs roots a job of its own, so its CPU findings show. With no GPU process in
    sight (no NVML), every watched process whose parent is not watched roots a job. A
    process belongs to the nearest root above it through watched processes (``root_of``)."""
    watched = {p.sample.pid: p for p in snapshot.processes if p.sample.watched and not p.sample.kernel}
    parents = {pid: p.sample.ppid for pid, p in watched.items()}
    roots = {pid for pid, p in watched.items() if p.sample.gpu_indices}
    if roots:
        ranked = descendants(roots, parents)
        rest = {pid: p for pid, p in watched.items() if pid not in ranked and not p.sample.training}
        roots |= {pid for pid, p in rest.items() if (p.sample.ppid or -1) not in rest}
    else:
        roots = {pid for pid, p in watched.items() if (p.sample.ppid or -1) not in watched}
    groups: dict[int, list[ProcessRates]] = {}
    for pid, p in watched.items():
        root = root_of(pid, roots, parents)
        if root is not None:
            groups.setdefault(root, []).append(p)
    jobs = []
    for root_pid, members in sorted(groups.items()):
        members.sort(key=lambda m: (m.sample.pid != root_pid, m.sample.pid))
        jobs.append(Job(root=watched[root_pid], members=tuple(members)))
    return jobs


def demand(thread: ThreadRates, seconds: float) -> float:
    """CPUs this thread wanted over the interval: (run + run-queue wait) / wall time."""
    if thread.cpu_ns_delta is None:
        return 0.0
    return (thread.cpu_ns_delta + (thread.wait_ns_delta or 0)) / (seconds * 1e9)


PYTHON_NAMES = ("python", "pt_main_thread")  # torch renames a process's main thread


def is_python(p: ProcessRates) -> bool:
    """Whether the process runs CPython, by its name or its command's first word."""
    first = (p.sample.cmdline or "").split(" ", 1)[0].rsplit("/", 1)[-1]
    return p.sample.name.startswith(PYTHON_NAMES) or first.startswith("python")


def wait_ratio(threads: Iterable[ThreadRates]) -> float | None:
    run = wait = 0
    for th in threads:
        if th.cpu_ns_delta is not None and th.wait_ns_delta is not None:
            run += th.cpu_ns_delta
            wait += th.wait_ns_delta
    return wait / (run + wait) if run + wait > 0 else None


def job_gpus(job: Job, snapshot: Snapshot) -> list[GpuRates]:
    indices = {i for m in job.members for i in m.sample.gpu_indices}
    return [g for g in snapshot.gpus if g.sample.index in indices]
