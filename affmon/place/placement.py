"""What ``affmon.place.rank()`` did, as a value, and the one warning per reason it says.
Imports only the standard library and the CPU-set spelling: a DataLoader worker loads it."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from affmon.core.model.cpuset import EMPTY, CpuSet, format_cpulist


class PlacementWarning(UserWarning):
    """affmon.place left a placement alone, or placed it with a caveat (a plan the
    planner warned about, a cpuset that kept only part of the plan)."""


@dataclass(frozen=True)
class Placement:
    """One rank's placement, or why there is none (``left_alone``; every other field then
    empty). ``cpus``: the mask every thread of the process has now (the plan's CPUs the
    kernel kept); ``main_threads``: the main process's intra-op threads (torch, OpenMP,
    MKL) in the rank's budget; ``workers``: the DataLoader workers planned for (None: not
    said), each on one of ``worker_shares`` (by worker id) within ``worker_cpus``;
    ``settings``: what was set (``OMP_NUM_THREADS=6``, ``torch.set_num_threads(6)``);
    ``kept``: the thread variables the person had set, left as they were."""

    left_alone: str | None = None
    local_rank: int | None = None
    pci_bus_id: str | None = None
    gpu_index: int | None = None
    slot: int = 0  # the rank's slot on its GPU (0..ranks_per_gpu-1)
    numa_node: int | None = None
    cpus: CpuSet = EMPTY
    planned_cpus: CpuSet = EMPTY
    main_threads: int = 0
    workers: int | None = None
    worker_cpus: CpuSet = EMPTY
    worker_shares: tuple[CpuSet, ...] = ()
    settings: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def placed(self) -> bool:
        return self.left_alone is None

    def __str__(self) -> str:
        if self.left_alone is not None:
            return f"placement left alone: {self.left_alone}"
        who = "this process" if self.local_rank is None else f"rank {self.local_rank}"
        gpu = f"GPU {self.pci_bus_id}" if self.pci_bus_id else "no GPU"
        node = "no single NUMA node" if self.numa_node is None else f"node {self.numa_node}"
        yours = next((k for k in self.kept if k.startswith("OMP_NUM_THREADS=")), None)
        threads = "thread" if self.main_threads == 1 else "threads"
        pool = f"main pool {yours}, yours" if yours else f"main pool {self.main_threads} {threads}"
        if self.workers is None:
            workers = f"workers on CPUs {format_cpulist(self.worker_cpus)}"
        elif self.workers == 0:
            workers = "no workers"
        else:
            noun = "worker" if self.workers == 1 else "workers"
            workers = f"{self.workers} {noun} on CPUs {format_cpulist(self.worker_cpus)}"
        return f"{who} on {gpu}: CPUs {format_cpulist(self.cpus)} ({node}), {pool}, {workers}"


# What this process has said already (a forked DataLoader worker inherits it: what its
# parent said is not said again there).
_said: set[str] = set()


def say_once(message: str, stacklevel: int) -> None:
    """``message`` as a ``PlacementWarning``, the first time this process says it.
    ``stacklevel`` counts from the caller of ``say_once``, as ``warnings.warn`` does."""
    if message in _said:
        return
    _said.add(message)
    warnings.warn(message, PlacementWarning, stacklevel=stacklevel + 1)
