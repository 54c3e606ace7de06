"""What ``rank()`` and ``worker_init_fn`` change: the masks of the calling process's
threads (through ``affmon.actions.pin``, which reads each one back and puts every thread
back when one fails), the thread-count variables, and torch's intra-op pool where torch is
already imported. torch is never imported here: it is the program's, found in
``sys.modules``, so affmon neither loads it nor depends on it.

The planning modules, the topology reader, NVML and the pin are imported when first
needed, not with ``affmon.place``: a training script pays for them once, in ``rank()``.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import TYPE_CHECKING

from affmon.core.errors import AffmonError
from affmon.core.model.cpuset import CpuSet, format_cpulist
from affmon.core.text import cut, term_safe
from affmon.place.placement import Placement
from affmon.place.remembered import Remembered, recall, remember
from affmon.place.shares import split_for_workers, too_few_cores, worker_share

if TYPE_CHECKING:
    from affmon.actions.pin import PinResult
    from affmon.core.model.topology import Topology

# The thread-count variables of the pools a training process starts: PyTorch's (OpenMP),
# MKL's. ``affmon exec`` sets the same ones (its BUDGET_VARIABLES).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")

# The values rank() set in this process, by variable: a variable holding another value
# is the person's (or a launcher's) and stays.
_set_here: dict[str, str] = {}


def place_rank(*, gpu: int | None, ranks_per_gpu: int, workers: int | None, root: str | None) -> Placement:
    """Plan this process as ``affmon exec`` would, pin every thread of it, set its thread
    budget, and remember the plan for its DataLoader workers. Any reason to place nothing
    comes back as ``Placement.left_alone`` with nothing changed."""
    placement = _plan_and_pin(gpu, ranks_per_gpu, workers, root)
    if not placement.placed:
        remember(Remembered(os.getpid(), left_alone=placement.left_alone))
    return placement


def _plan_and_pin(gpu: int | None, ranks_per_gpu: int, workers: int | None, root: str | None) -> Placement:
    if not hasattr(os, "sched_setaffinity"):
        return Placement(left_alone="this system has no sched_setaffinity (affmon places processes on Linux only)")
    from affmon.place.planning import CannotPlan, LocalRank, local_rank_from, plan_rank
    from affmon.sources.job_gpus import nvml_gpu_refs
    from affmon.sources.live import load_topology

    try:
        topology = load_topology(root)
    except AffmonError as exc:
        return Placement(left_alone=str(exc))
    local: LocalRank | None
    try:
        local = local_rank_from(os.environ)
    except CannotPlan as exc:
        if gpu is None:
            return Placement(left_alone=str(exc))
        local = None  # gpu= names the GPU: the local rank is only shown
    try:
        refs = nvml_gpu_refs() if root is None else None  # NVML describes this machine, not a recorded tree
        mine, said = plan_rank(
            topology,
            visible=os.environ.get("CUDA_VISIBLE_DEVICES"),
            refs=refs,
            gpu=gpu,
            local_rank=local,
            ranks_per_gpu=ranks_per_gpu,
        )
    except CannotPlan as exc:
        return Placement(left_alone=str(exc), warnings=exc.warnings)
    if gpu is not None or local is None:
        chosen = f"GPU {gpu} as asked (gpu={gpu}), slot 0 of its {ranks_per_gpu}."
    elif local.variable is None:
        chosen = "LOCAL_RANK and SLURM_LOCALID are unset: this process is taken as local rank 0, the node's only one."
    else:
        chosen = f"{local.variable}={local.rank}: CUDA device {local.rank} of the job's GPUs."
    too_narrow = too_few_cores(topology, mine.cpus, workers)
    if too_narrow is not None:
        return Placement(left_alone=too_narrow, warnings=said)
    pinned, got, problem = _pin_self(topology, mine.cpus, workers)
    if problem is not None:
        return Placement(left_alone=problem, warnings=said)
    assert pinned is not None
    warnings = list(said)
    if got != mine.cpus:
        # The kernel keeps the plan's CPUs that this process's cpuset allows (exec's words).
        warnings.append(
            f"pinned to CPUs {format_cpulist(got)}, the part of the plan's {format_cpulist(mine.cpus)} "
            "that this process's cpuset allows"
        )
    elif pinned.warning:
        warnings.append(pinned.warning)
    split = split_for_workers(topology, got, workers)
    settings, kept = _set_main_budget(split.main_threads)
    remember(Remembered(os.getpid(), None, got, workers, split.worker_cores))
    return Placement(
        local_rank=None if local is None else local.rank,
        pci_bus_id=mine.pci_bus_id,
        gpu_index=mine.gpu_index,
        slot=mine.rank,
        numa_node=topology.home_node_of(got),
        cpus=got,
        planned_cpus=mine.cpus,
        main_threads=split.main_threads,
        workers=workers,
        worker_cpus=split.worker_cpus,
        worker_shares=_shares(split.worker_cores, workers or 0),
        settings=settings,
        kept=kept,
        reasons=(chosen, *mine.reasons),
        warnings=tuple(dict.fromkeys(warnings)),
    )


def _shares(cores: tuple[CpuSet, ...], workers: int) -> tuple[CpuSet, ...]:
    return tuple(worker_share(cores, i, workers) for i in range(workers))


def _pin_self(topology: Topology, cpus: CpuSet, workers: int | None) -> tuple[PinResult | None, CpuSet, str | None]:
    """Every thread of this process on ``cpus``: the pin's result, the mask the kernel
    kept, or why nothing was changed (the pin failed and was put back, or the kernel kept
    too few of ``cpus`` for the workers)."""
    from affmon.actions.pin import pin

    if os.getpid() == 1:
        # pin() refuses PID 1, the machine's init, as a job to pin: here it is a container's
        # first process pinning itself, which pin() cannot tell apart.
        return (
            None,
            cpus,
            (
                "this process is PID 1 (a container's first process), which affmon.actions.pin refuses: "
                "start it under an init (docker run --init) or a launcher (torchrun)"
            ),
        )
    ops = _CheckedAffinity(topology, workers)
    result = pin(os.getpid(), cpus, ops=ops)
    if ops.too_narrow is not None:
        return None, cpus, ops.too_narrow
    if not result.ok:
        return None, cpus, f"cannot pin to CPUs {format_cpulist(cpus)}: {result.error}"
    return result, ops.kept if ops.kept is not None else cpus, None


class _CheckedAffinity:
    """The real system calls (``OsAffinity``), with one check after the first set: the
    mask the kernel kept (the plan within this process's cpuset) must hold a core per
    worker. If it does not, that thread is put back and the set fails, so the pin changes
    nothing else."""

    def __init__(self, topology: Topology, workers: int | None) -> None:
        from affmon.actions.threads import OsAffinity

        self.real = OsAffinity()
        self.topology = topology
        self.workers = workers
        self.kept: CpuSet | None = None
        self.too_narrow: str | None = None

    def get(self, tid: int) -> CpuSet:
        return self.real.get(tid)

    def set(self, tid: int, cpus: CpuSet) -> None:
        if self.kept is not None or self.too_narrow is not None:
            self.real.set(tid, cpus)
            return
        before = self.real.get(tid)
        self.real.set(tid, cpus)
        kept = self.real.get(tid)
        why = too_few_cores(self.topology, kept, self.workers)
        if why is None:
            self.kept = kept
            return
        self.real.set(tid, before)
        self.too_narrow = f"this process's cpuset keeps CPUs {format_cpulist(kept)} of the plan's: {why}"
        raise OSError(errno.EINVAL, self.too_narrow)


def _set_main_budget(threads: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The main process's intra-op threads: each thread variable the person has not set,
    and torch's pool where torch is imported and ``OMP_NUM_THREADS`` is not the person's.
    Returns what was set and the variables kept as the person set them."""
    settings: list[str] = []
    kept: list[str] = []
    for name in THREAD_VARIABLES:
        value = os.environ.get(name)
        if value is not None and _set_here.get(name) != value:
            kept.append(f"{name}={term_safe(cut(value, 20))}")
            continue
        os.environ[name] = _set_here[name] = str(threads)
        settings.append(f"{name}={threads}")
    torch = sys.modules.get("torch")
    if torch is not None and not any(k.startswith("OMP_NUM_THREADS=") for k in kept):
        torch.set_num_threads(threads)
        settings.append(f"torch.set_num_threads({threads})")
    return tuple(settings), tuple(kept)


# -- in a DataLoader worker -------------------------------------------------------------


def place_worker(worker_id: int) -> str | None:
    """One intra-op thread for this worker, and its share of the rank's worker CPUs.
    Returns what to say when its CPUs were left alone (None: placed, or its rank was left
    alone, which the rank has said). Outside a DataLoader worker (torch says it is none,
    or this is the process that called ``rank()``) it changes nothing."""
    data = sys.modules.get("torch.utils.data")
    info = getattr(data, "get_worker_info", lambda: None)()
    try:
        state = recall()
        problem = None
    except ValueError as exc:
        state, problem = None, f"{exc}: DataLoader worker CPUs left alone"
    if (data is not None and info is None) or (state is not None and state.pid == os.getpid()):
        return "worker_init_fn ran outside a DataLoader worker: left alone"
    _one_thread()
    if problem is not None:
        return problem
    if state is None:
        return "affmon.place.rank() was not called before the DataLoader started: worker CPUs left alone"
    if state.left_alone is not None:
        return None
    count = getattr(info, "num_workers", None)
    workers = count if isinstance(count, int) and count > 0 else state.workers or 1
    share = worker_share(state.worker_cores, worker_id, workers)
    from affmon.actions.pin import pin

    result = pin(os.getpid(), share)
    if not result.ok:
        return f"DataLoader worker {worker_id} left on its rank's CPUs: {result.error}"
    return result.warning


def _one_thread() -> None:
    """What DataLoader sets for torch in a worker, and the same for the libraries (OpenMP,
    MKL, OpenCV's pools that read ``OMP_NUM_THREADS``) that the worker loads later."""
    for name in THREAD_VARIABLES:
        os.environ[name] = "1"
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)
