"""The plan of one rank. Pure: the topology, the rank's environment and the driver's GPUs
(``GpuRef``, from NVML) are handed in, values come back.

``plan_rank`` is ``affmon exec``'s choice of GPU and slot: GPU ``gpu`` (NVML's index,
else PCI bus order) as rank 0 of it, or entry ``local_rank`` of the job's
``CUDA_VISIBLE_DEVICES`` (else the GPUs NVML opens, else every GPU), entry
``local_rank // ranks_per_gpu``, as slot ``local_rank % ranks_per_gpu``, planned by
``plan_machine`` among the job's GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from affmon.core.errors import AffmonError
from affmon.core.model.context import small_int
from affmon.core.model.topology import Topology
from affmon.core.plan.planner import RankPlan, plan_machine
from affmon.core.plan.visible import GpuRef, gpu_by_index, job_gpus
from affmon.core.text import cut, term_safe


class CannotPlan(AffmonError):
    """No plan for this rank: exec runs the command unpinned (``--strict``: fails), the
    in-script API leaves placement alone. ``warnings`` are what was said on the way."""

    def __init__(self, message: str, warnings: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.warnings = warnings


# Where a launcher says which of the node's ranks a process is, in the order read:
# torchrun's variable, then Slurm's (srun sets it for every task).
LOCAL_RANK_VARIABLES = ("LOCAL_RANK", "SLURM_LOCALID")


@dataclass(frozen=True, slots=True)
class LocalRank:
    """The process's rank on its node, and the variable it came from (None: neither was
    set, and the process is taken as the node's only rank, 0)."""

    rank: int
    variable: str | None


def local_rank_from(environ: Mapping[str, str]) -> LocalRank:
    """``LOCAL_RANK``, else ``SLURM_LOCALID``, as ASCII digits (``small_int``); neither
    set: local rank 0. A variable set to anything but a number is ``CannotPlan``."""
    for name in LOCAL_RANK_VARIABLES:
        value = environ.get(name)
        if value is None:
            continue
        rank = small_int(value)
        if rank is None:
            shown = term_safe(cut(value, 20))
            raise CannotPlan(f"{name} must be a number to pick this rank's GPU; it is {shown!r}")
        return LocalRank(rank, name)
    return LocalRank(0, None)


def plan_rank(
    topology: Topology,
    *,
    visible: str | None,
    refs: Sequence[GpuRef] | None,
    gpu: int | None = None,
    local_rank: LocalRank | None = None,
    ranks_per_gpu: int = 1,
) -> tuple[RankPlan, tuple[str, ...]]:
    """This rank's plan and the warnings said on the way; ``CannotPlan`` when there is none.
    ``visible``: the rank's ``CUDA_VISIBLE_DEVICES`` (None: unset); ``refs``: the GPUs NVML
    opens (None: no NVML, or a recorded tree). ``gpu`` (an explicit GPU) wins over
    ``local_rank``; with neither, local rank 0."""
    if not topology.gpus:
        raise CannotPlan("no GPU on this machine: sysfs lists no GPU PCI device")
    job = job_gpus(topology, visible, refs)
    wanted = job.bus_ids
    if gpu is not None:
        slot = 0
        found = gpu_by_index(gpu, topology, refs)
        if found is None:
            raise CannotPlan(f"no GPU {gpu} on this machine ({len(topology.gpus)} GPUs found)", job.warnings)
        bus_id = found
        if wanted is not None and bus_id not in wanted:
            wanted = (*wanted, bus_id)
    else:
        # ``ranks_per_gpu`` ranks share each GPU: local ranks 0..n-1 on the first, n..2n-1
        # on the second, each its slot of the GPU's share.
        local = local_rank or LocalRank(0, None)
        slot = local.rank % ranks_per_gpu
        index = local.rank // ranks_per_gpu
        name = local.variable or "local rank"
        if index >= len(job.devices):
            per = f" ({ranks_per_gpu} a GPU)" if ranks_per_gpu > 1 else ""
            raise CannotPlan(f"{name} {local.rank}{per} but {job.source} gives {len(job.devices)} GPUs", job.warnings)
        device = job.devices[index]
        if device is None:
            raise CannotPlan(job.why_unresolved(index), job.warnings)
        bus_id = device
    plan = plan_machine(topology, ranks_per_gpu, wanted)
    mine = next((p for p in plan.plans if p.pci_bus_id == bus_id and p.rank == slot), None)
    if mine is None or not mine.cpus:
        raise CannotPlan(f"no plan for GPU {bus_id} rank {slot}", (*job.warnings, *plan.warnings))
    return mine, (*job.warnings, *plan.warnings)
