"""A training job whose CPU-side knobs change while it runs, for ``bench/gpu/remedy_scenarios.py``:
a planted problem, affmon's fix and the hand fix are measured in the same process.

    python -m bench.workloads.remedy_job --control FILE [--seconds S] [--batch 32] [--device cuda]

ResNet-18 (a small CNN where torchvision is missing) on synthetic 160x160 images, bf16
autocast on a GPU. The dataset's CPU-side augmentation is torch work on each image (a
convolution, a flip and a normalisation), so a DataLoader worker's intra-op pool really
runs it in parallel. ``--control`` is a JSON file read every second; a change rebuilds the
DataLoader (new workers) or sets the main process's threads:

* ``workers``: DataLoader workers (0: the loop loads its own data);
* ``worker_threads``: ``torch.set_num_threads`` in each worker (its ``worker_init_fn``);
* ``main_threads``: ``torch.set_num_threads`` in the main process, which also normalises
  each batch on the CPU (its pool runs that);
* a FIFO at the control file's path with ``.storage`` for its suffix: while it exists, a
  worker's next item opens it and blocks until a writer comes (a hung file system);
* ``context``: the workers' start method, ``spawn`` (the default here: workers are the
  rank's children, as with ``fork``; ``forkserver`` would make them its grandchildren) or
  ``fork``. Forked after the main process ran its OpenMP pool, workers with more than one
  thread can deadlock in theirs.

The DataLoader has a timeout (``timeout``, 20 s), so a stalled pipeline returns control to
the loop, which then rebuilds it from the control file. Prints ``READY pid=...`` after warm-up, ``RATE t=...
samples_per_s=...`` every 2 s and ``LOADER ...`` at each rebuild.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

DEFAULT = {"workers": 6, "worker_threads": 1, "main_threads": 16, "context": "spawn", "timeout": 20}


class Augmented(Dataset[tuple[torch.Tensor, int]]):
    """Images made and augmented with torch on the CPU: the work a worker's pool runs."""

    def __init__(self, size: int, work: int, storage: str | None = None) -> None:
        self.size, self.work, self.storage = size, work, storage
        self.kernel = torch.randn(8, 3, 3, 3) / 9

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if self.storage and os.path.exists(self.storage):
            # The "storage" hangs: a FIFO with no writer blocks every reader in open(), as a
            # file system that stops answering does; it answers (EOF) once a writer comes.
            with open(self.storage, "rb") as f:
                f.read()
        g = torch.Generator().manual_seed(i)
        x = torch.rand(3, 160, 160, generator=g)
        for _ in range(self.work):
            y = torch.nn.functional.conv2d(x[None], self.kernel, padding=1)[0]
            x = (x + y[:3]).flip(2)
            x = (x - x.mean()) / (x.std() + 1e-6)
        return x, i % 1000


def set_threads(n: int, _worker_id: int) -> None:
    torch.set_num_threads(n)


def make_model(device: str) -> torch.nn.Module:
    try:
        import torchvision

        model: torch.nn.Module = torchvision.models.resnet18(num_classes=1000)
    except ImportError:  # a CPU-only machine without torchvision: a small CNN, same shape of work
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 32, 3, stride=2, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(32, 64, 3, stride=2, padding=1),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(64, 1000),
        )
    return model.to(device).to(memory_format=torch.channels_last)


def read_control(path: Path) -> dict[str, Any]:
    try:
        return {**DEFAULT, **json.loads(path.read_text())}
    except (OSError, ValueError):
        return dict(DEFAULT)


def loader(control: dict[str, Any], batch: int, work: int, device: str, storage: str) -> DataLoader[Any]:
    workers = int(control["workers"])
    extra: dict[str, Any] = {}
    if workers:
        extra = {
            "multiprocessing_context": multiprocessing.get_context(control["context"]),
            "worker_init_fn": functools.partial(set_threads, int(control["worker_threads"])),
            "persistent_workers": True,
            "timeout": int(control["timeout"]),
            "prefetch_factor": 2,
        }
    return DataLoader(
        Augmented(10**7, work, storage),
        batch_size=batch,
        num_workers=workers,
        pin_memory=device == "cuda",
        shuffle=True,
        **extra,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--control", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=900)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--work", type=int, default=2)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    device = a.device
    model = make_model(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    mean = torch.tensor([0.5, 0.5, 0.5]).view(1, 3, 1, 1)
    control = read_control(a.control)
    torch.set_num_threads(int(control["main_threads"]))
    dl = loader(control, a.batch, a.work, device, str(a.control.with_suffix(".storage")))
    it = iter(dl)
    print(f"LOADER {json.dumps(control)}", flush=True)
    start = last_check = window_start = time.perf_counter()
    done = window_done = 0
    ready = False
    while time.perf_counter() - start < a.seconds:
        now = time.perf_counter()
        if now - last_check >= 1.0:
            last_check = now
            wanted = read_control(a.control)
            if wanted != control:
                if wanted["main_threads"] != control["main_threads"]:
                    torch.set_num_threads(int(wanted["main_threads"]))
                if {k: wanted[k] for k in ("workers", "worker_threads", "context", "timeout")} != {
                    k: control[k] for k in ("workers", "worker_threads", "context", "timeout")
                }:
                    del it
                    dl = loader(wanted, a.batch, a.work, device, str(a.control.with_suffix(".storage")))
                    it = iter(dl)
                control = wanted
                print(f"LOADER {json.dumps(control)}", flush=True)
        try:
            x, y = next(it)
        except RuntimeError as exc:  # the DataLoader's timeout: a stalled pipeline
            print(f"STALL {str(exc)[:120]}", flush=True)
            wanted = read_control(a.control)
            if wanted == control:
                continue  # wait on: a rebuild would only stall again (and shutting down takes time)
            del it
            control = wanted
            torch.set_num_threads(int(control["main_threads"]))
            dl = loader(control, a.batch, a.work, device, str(a.control.with_suffix(".storage")))
            it = iter(dl)
            print(f"LOADER {json.dumps(control)}", flush=True)
            continue
        x = (x - mean) * 2.0  # the main process's own CPU work, on its intra-op pool
        x = x.to(device, non_blocking=True).to(memory_format=torch.channels_last)
        y = y.to(device, non_blocking=True)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        done += x.shape[0]
        window_done += x.shape[0]
        now = time.perf_counter()
        if not ready and done >= 20 * a.batch:
            ready = True
            print(f"READY pid={os.getpid()}", flush=True)
        if now - window_start >= 2.0:
            if device == "cuda":
                torch.cuda.synchronize()
            now = time.perf_counter()
            print(f"RATE t={now - start:.1f} samples_per_s={window_done / (now - window_start):.1f}", flush=True)
            window_done, window_start = 0, now


if __name__ == "__main__":
    main()
