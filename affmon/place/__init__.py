"""affmon's planner for a training script that places itself: ``rank()`` pins the calling
process to the plan ``affmon exec`` would apply and sets its thread budget;
``worker_init_fn`` puts each DataLoader worker on its share of the rank's CPUs.

    import affmon.place
    print(affmon.place.rank(workers=6))   # rank 0 on GPU 0000:3b:00.0: CPUs 0-7 (node 0), ...
    loader = DataLoader(data, num_workers=6, worker_init_fn=affmon.place.worker_init_fn)

Neither needs root, a monitor, Textual or NVML (NVML is asked where it is there). Neither
imports torch: where the program has imported it, they set its thread counts. Where there
is no plan (no GPU found, a cpuset with fewer cores than workers, a pin the kernel
refuses) they leave the masks and thread counts as they are and say why, once per reason
in each process, as a ``PlacementWarning``.

``AFFMON_PLACE`` carries the plan to DataLoader workers started by spawn; ``rank()`` sets
it (``affmon.place.remembered``).
"""

from __future__ import annotations

from affmon.place.placement import Placement, PlacementWarning, say_once

__all__ = ["Placement", "PlacementWarning", "rank", "worker_init_fn"]


def rank(
    *, gpu: int | None = None, ranks_per_gpu: int = 1, workers: int | None = None, root: str | None = None
) -> Placement:
    """Pin every thread of this process to its rank's CPUs and give its intra-op pools the
    rank's thread budget; returns what was done (``str()`` of it is one line).

    The rank's GPU: ``gpu`` (NVML's index, else PCI bus order), else entry ``LOCAL_RANK``
    (else ``SLURM_LOCALID``, else 0) of ``CUDA_VISIBLE_DEVICES`` (else of the GPUs NVML
    opens, else of every GPU); ``ranks_per_gpu`` ranks share each GPU's CPUs, as with
    ``affmon exec --ranks-per-gpu``. ``workers``: the DataLoader workers the rank will
    start (each gets a core of its own, and the main pool the rank's CPUs less one per
    worker); None: not said, the main pool gets every CPU and the workers' shares are cut
    from every core of the rank. ``root``: plan against a recorded sysfs tree instead of
    this machine (no NVML then).

    Call it before creating threads that should follow (DataLoaders, process groups):
    they inherit the mask of the thread that creates them."""
    if gpu is not None and gpu < 0:
        raise ValueError(f"gpu must be a GPU index (0 or more), not {gpu}")
    if ranks_per_gpu < 1:
        raise ValueError(f"ranks_per_gpu must be at least 1, not {ranks_per_gpu}")
    if workers is not None and workers < 0:
        raise ValueError(f"workers must be 0 or more, not {workers}")
    from affmon.place.apply import place_rank

    placement = place_rank(gpu=gpu, ranks_per_gpu=ranks_per_gpu, workers=workers, root=root)
    for warning in placement.warnings:
        say_once(warning, stacklevel=2)
    if placement.left_alone is not None:
        say_once(f"placement left alone: {placement.left_alone}", stacklevel=2)
    return placement


def worker_init_fn(worker_id: int) -> None:
    """For ``DataLoader(worker_init_fn=...)``: this worker on its share of the rank's
    worker CPUs (a run of whole cores where there are as many cores as workers, else all
    of them, shared), never outside the rank's plan; one intra-op thread
    (``torch.set_num_threads(1)``, ``OMP_NUM_THREADS=1``, ``MKL_NUM_THREADS=1``). With
    an init function of your own, call this one first inside it."""
    from affmon.place.apply import place_worker

    problem = place_worker(worker_id)
    if problem is not None:
        say_once(problem, stacklevel=2)
