"""The GPUs a job uses, as ``plan``, ``exec`` and the commands that suggest CPUs need
them: ``--gpus`` when given, else ``CUDA_VISIBLE_DEVICES``, else the GPUs NVML can open
(inside a Slurm job with constrained devices, only the job's), else every GPU of the
topology. NVML is asked only about the live machine, never for a recorded tree."""

from __future__ import annotations

from typing import Any

from affmon.core.model.topology import Topology
from affmon.core.plan.visible import GpuRef, JobGpus, job_gpus, select_gpus
from affmon.nvml import NvmlGateway


def nvml_gpu_refs(module: Any | None = None) -> tuple[GpuRef, ...] | None:
    """Index, UUID and bus id of each GPU NVML opens; None without NVML. A GPU whose
    handle NVML refused (not the job's) has no bus id and so is not the job's."""
    gateway = NvmlGateway(module=module, pcie_window_s=0.0)
    if not gateway.open():
        return None
    try:
        return tuple(GpuRef(d.index, d.uuid, d.pci_bus_id) for d in gateway.devices())
    finally:
        gateway.close()


def find_job_gpus(
    topology: Topology,
    *,
    visible: str | None,
    gpus: str | None = None,
    use_nvml: bool,
    nvml_module: Any | None = None,
) -> JobGpus:
    """The job's GPUs on ``topology``. ``visible`` is the job's ``CUDA_VISIBLE_DEVICES``
    (None: unset, or not the job's); ``gpus`` a ``--gpus`` list; ``use_nvml`` False for a
    recorded tree. Raises ``ParseError`` only for a bad ``gpus``."""
    refs = nvml_gpu_refs(nvml_module) if use_nvml else None
    if gpus is not None:
        return select_gpus(topology, gpus, refs)
    return job_gpus(topology, visible, refs)


__all__ = ["GpuRef", "JobGpus", "find_job_gpus", "nvml_gpu_refs"]
