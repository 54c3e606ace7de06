"""A training script placing itself, three ways, alternated in one run: ResNet-18 with six
DataLoader workers doing CPU-side augmentation (``bench/workloads/remedy_job.py``'s dataset
and model), bf16 autocast on the GPU.

    python -m bench.gpu.place_scenarios [--device cuda] [--seconds 60] [--warmup 15]
        [--rounds 3] [--workers 6] [--batch 64] [--context fork] [--root DIR]

* ``none``: no placement: the mask the job inherited, torch's default intra-op threads,
  no ``worker_init_fn``.
* ``blog``: the blog-post recipe, ``worker_init_fn=lambda i: os.sched_setaffinity(0,
  [i + 16])``, on a machine of any size: worker ``i`` on CPU ``i + 16`` counted modulo the
  CPUs the job may use (a machine of 16 CPUs has no CPU 16). The main process as in ``none``.
* ``affmon``: ``affmon.place.rank(workers=N)`` first, then
  ``worker_init_fn=affmon.place.worker_init_fn``.

Each round runs each scenario once, in a process of its own (nothing carries over: masks,
thread pools, page cache aside), in an order rotated every round. A process trains for
``--warmup`` seconds, then counts the samples of ``--seconds``. Prints the placement each
scenario made (the main process's mask and threads, each worker's mask), the samples/s of
every round and their median.

``--device cpu`` runs the same flow on a machine without a GPU (then ``affmon.place``
leaves the placement alone and says why, unless ``--root`` names a recorded tree with a
GPU to plan against): a check of the script, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from typing import Any

SCENARIOS = ("none", "blog", "affmon")
RESULT = re.compile(r"^RESULT (.*)$", re.MULTILINE)


def blog_worker_init_fn(worker_id: int) -> None:
    """The recipe, adapted to the machine: CPU ``worker_id + 16`` among the CPUs allowed."""
    allowed = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, [allowed[(worker_id + 16) % len(allowed)]])


def _mask(pid: int, tid: int | None = None) -> str:
    path = f"/proc/{pid}/status" if tid is None else f"/proc/{pid}/task/{tid}/status"
    try:
        with open(path) as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("Cpus_allowed_list:"))
    except (OSError, StopIteration):
        return "?"


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (the DataLoader's workers, with spawn also
    multiprocessing's resource tracker)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(name))
    return sorted(found)


def child(a: argparse.Namespace) -> None:
    """One scenario, in this process: train, then print one ``RESULT`` line of JSON."""
    import multiprocessing

    import torch
    from torch.utils.data import DataLoader

    from bench.workloads.remedy_job import Augmented, make_model

    placement = None
    init: Any = None
    if a.child == "affmon":
        import affmon.place

        placement = str(affmon.place.rank(workers=a.workers, root=a.root))
        init = affmon.place.worker_init_fn
    elif a.child == "blog":
        init = blog_worker_init_fn
    device = a.device
    model = make_model(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    mean = torch.tensor([0.5, 0.5, 0.5]).view(1, 3, 1, 1)
    loader = DataLoader(
        Augmented(10**7, a.work),
        batch_size=a.batch,
        num_workers=a.workers,
        worker_init_fn=init,
        multiprocessing_context=multiprocessing.get_context(a.context),
        pin_memory=device == "cuda",
        persistent_workers=True,
        prefetch_factor=2,
        shuffle=True,
    )
    start = time.perf_counter()
    counted = 0
    measuring_since: float | None = None
    workers: dict[str, str] = {}
    for x, y in loader:
        x = (x - mean) * 2.0  # the main process's own CPU work, on its intra-op pool
        x = x.to(device, non_blocking=True).to(memory_format=torch.channels_last)
        y = y.to(device, non_blocking=True)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        now = time.perf_counter()
        if measuring_since is None:
            if now - start >= a.warmup:
                if device == "cuda":
                    torch.cuda.synchronize()
                measuring_since = time.perf_counter()
                workers = {str(pid): _mask(pid) for pid in _children(os.getpid())}
            continue
        counted += x.shape[0]
        if now - measuring_since >= a.seconds:
            break
    if device == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - (measuring_since or start)
    main_masks = sorted({_mask(os.getpid(), int(t)) for t in os.listdir(f"/proc/{os.getpid()}/task")})
    result = {
        "scenario": a.child,
        "samples_per_s": counted / elapsed if elapsed > 0 else 0.0,
        "placement": placement,
        "main_masks": main_masks,
        "main_threads": torch.get_num_threads(),
        "workers": workers,
    }
    print(f"RESULT {json.dumps(result)}", flush=True)


def run_one(a: argparse.Namespace, scenario: str) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.gpu.place_scenarios", "--child", scenario]
    for name in ("device", "seconds", "warmup", "workers", "batch", "work", "context"):
        command += [f"--{name}", str(getattr(a, name))]
    if a.root:
        command += ["--root", a.root]
    out = subprocess.run(command, capture_output=True, text=True, timeout=a.warmup + a.seconds + 600)
    found = RESULT.search(out.stdout)
    if out.returncode != 0 or found is None:
        sys.stderr.write(out.stderr[-4000:])
        raise SystemExit(f"{scenario}: exit {out.returncode}, no RESULT line")
    result: dict[str, Any] = json.loads(found.group(1))
    said = [line for line in out.stderr.splitlines() if "PlacementWarning" in line]
    result["warnings"] = said
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seconds", type=float, default=60.0, help="measured seconds per scenario and round")
    ap.add_argument("--warmup", type=float, default=15.0, help="seconds trained before measuring")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=6)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--work", type=int, default=2, help="augmentation passes per image (remedy_job's Augmented)")
    ap.add_argument("--context", default="fork", choices=("fork", "spawn", "forkserver"))
    ap.add_argument("--root", help="plan against this recorded sysfs tree (affmon scenario)")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--child", choices=SCENARIOS, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a)
        return
    scenarios = [s for s in a.scenarios.split(",") if s]
    unknown = sorted(set(scenarios) - set(SCENARIOS))
    if unknown:
        raise SystemExit(f"unknown scenarios: {', '.join(unknown)}")
    print(f"CPUs allowed: {len(os.sched_getaffinity(0))}; device {a.device}; {a.workers} workers ({a.context})")
    rates: dict[str, list[float]] = {s: [] for s in scenarios}
    shown: set[str] = set()
    for round_index in range(a.rounds):
        order = scenarios[round_index % len(scenarios) :] + scenarios[: round_index % len(scenarios)]
        for scenario in order:
            result = run_one(a, scenario)
            rates[scenario].append(result["samples_per_s"])
            print(f"round {round_index + 1} {scenario:7} {result['samples_per_s']:9.1f} samples/s", flush=True)
            if scenario not in shown:
                shown.add(scenario)
                if result["placement"]:
                    print(f"    {result['placement']}")
                for line in result["warnings"]:
                    print(f"    {line.strip()}")
                masks = " / ".join(result["main_masks"])
                print(f"    main process: threads on {masks}, {result['main_threads']} intra-op")
                print(f"    workers: {' '.join(result['workers'].values()) or 'none found'}")
    print()
    header = "".join(f"  round {i + 1:<3}" for i in range(a.rounds))
    print(f"{'scenario':9}{header}   median  samples/s")
    for scenario in scenarios:
        cells = "".join(f"  {r:9.1f}" for r in rates[scenario])
        print(f"{scenario:9}{cells}  {statistics.median(rates[scenario]):7.1f}")


if __name__ == "__main__":
    main()
