"""A training script's side of ``affmon.place``, run by tests/place/test_place.py in a process of
its own (a pin there must not move pytest's threads). Holds no tests.

    python -m tests.place.test_place_probe '{"root": "/tmp/tree", "calls": [{"workers": 2}], ...}'

The spec (JSON) says what to do, in this order: ``pre_mask``: pin the main thread to
these CPUs first (the threads started next inherit it); ``torch_threads``: import torch,
set its intra-op pool to that many threads and run it once, so its threads exist;
``python_threads``: start that many idle Python threads; ``calls``: call
``affmon.place.rank(root=..., **call)`` for each; ``torch_after``: import torch then;
``init_in_main``: call ``worker_init_fn(0)`` here; ``loader``: iterate a DataLoader of
``workers`` workers started by ``context`` (fork, spawn) with our ``worker_init_fn``.

Prints one JSON line: the placements, the ``PlacementWarning`` messages (each time one was
emitted), every thread's mask from ``/proc/self/task/*/status`` before and after, torch's
thread count, the thread variables, each worker's report (the same, from inside it) and
the top-level modules loaded.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import warnings
from typing import Any


def thread_masks() -> dict[str, list[int]]:
    """Every thread of this process and its mask, as ``/proc/self/task/TID/status`` says."""
    from affmon.core.model.cpuset import parse_cpulist

    found = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                status = f.read()
        except FileNotFoundError:
            continue  # exited meanwhile
        line = next(x for x in status.splitlines() if x.startswith("Cpus_allowed_list:"))
        found[tid] = sorted(parse_cpulist(line.split(":", 1)[1]))
    return found


def torch_threads() -> int | None:
    torch = sys.modules.get("torch")
    return None if torch is None else int(torch.get_num_threads())


class Report:
    """A dataset whose items are the worker's own report of its placement."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> str:
        import torch.utils.data

        info = torch.utils.data.get_worker_info()
        return json.dumps(
            {
                "pid": os.getpid(),
                "worker_id": None if info is None else info.id,
                "threads": thread_masks(),
                "torch_threads": torch_threads(),
                "omp": os.environ.get("OMP_NUM_THREADS"),
                "mkl": os.environ.get("MKL_NUM_THREADS"),
            }
        )


def run_loader(context: str, workers: int) -> list[dict[str, Any]]:
    import multiprocessing

    import torch.utils.data

    import affmon.place

    loader = torch.utils.data.DataLoader(
        Report(),
        batch_size=1,
        num_workers=workers,
        worker_init_fn=affmon.place.worker_init_fn,
        multiprocessing_context=multiprocessing.get_context(context),
    )
    return [json.loads(batch[0]) for batch in loader]


def main(spec: dict[str, Any]) -> dict[str, Any]:
    if spec.get("pre_mask") is not None:
        os.sched_setaffinity(0, spec["pre_mask"])
    if spec.get("torch_threads") is not None:
        import torch

        torch.set_num_threads(spec["torch_threads"])
        torch.ones(256, 256) @ torch.ones(256, 256)  # runs the intra-op pool: its threads now exist
    stop = threading.Event()
    idle = [threading.Thread(target=stop.wait, daemon=True) for _ in range(spec.get("python_threads", 0))]
    for thread in idle:
        thread.start()
    before = thread_masks()
    torch_before = torch_threads()

    import affmon.place

    out: dict[str, Any] = {"placements": [], "warnings": []}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every warning emitted is recorded: the once is affmon's
        for call in spec.get("calls", []):
            placement = affmon.place.rank(root=spec.get("root"), **call)
            out["placements"].append(
                {
                    "str": str(placement),
                    "placed": placement.placed,
                    "cpus": sorted(placement.cpus),
                    "main_threads": placement.main_threads,
                    "worker_cpus": sorted(placement.worker_cpus),
                    "worker_shares": [sorted(s) for s in placement.worker_shares],
                    "settings": list(placement.settings),
                    "kept": list(placement.kept),
                    "warnings": list(placement.warnings),
                }
            )
        if spec.get("torch_after"):
            import torch  # reads OMP_NUM_THREADS as it loads
        if spec.get("init_in_main"):
            affmon.place.worker_init_fn(0)
    out["warnings"] = [str(w.message) for w in caught if issubclass(w.category, affmon.place.PlacementWarning)]
    out["threads_before"] = before
    out["threads"] = thread_masks()
    out["torch_threads_before"] = torch_before
    out["torch_threads"] = torch_threads()
    out["omp"] = os.environ.get("OMP_NUM_THREADS")
    out["mkl"] = os.environ.get("MKL_NUM_THREADS")
    out["affmon_place"] = os.environ.get("AFFMON_PLACE")
    if spec.get("loader"):
        out["workers"] = run_loader(spec["loader"]["context"], spec["loader"]["workers"])
    out["modules"] = sorted({name.split(".")[0] for name in sys.modules})
    stop.set()
    return out


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
