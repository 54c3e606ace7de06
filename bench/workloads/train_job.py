"""A small but real PyTorch training job for affmon's GPU scenarios.

ResNet-18 on synthetic images, bf16 autocast, with DataLoader worker processes that do
CPU-side augmentation (the part that starves when the CPU placement is wrong). Prints
``RESULT samples_per_s=...`` after ``--seconds`` of measured training (after warm-up),
and ``READY pid=...`` once the workers are up, so a harness can attach to it; with
``--report-every S``, a ``RATE t=... samples_per_s=...`` line every S seconds, so a
harness can measure before and after it changes the job's placement.

Needs torch and torchvision (a GPU machine); affmon itself never imports this.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
import torchvision
from torch.utils.data import DataLoader, Dataset

from bench.workloads.rate_loop import measured_loop


class Augmented(Dataset):
    def __init__(self, size: int, work: int) -> None:
        self.size, self.work = size, work

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int):
        rng = np.random.default_rng(i)
        x = rng.random((3, 160, 160), dtype=np.float32)
        for _ in range(self.work):  # flips and normalisation: CPU-bound augmentation
            x = np.flip(x, 2).copy()
            x = (x - x.mean()) / (x.std() + 1e-6)
        return torch.from_numpy(x), i % 1000


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, batches: Iterator[Any]) -> Callable[[], int]:
    """One bf16 training step on the next batch (channels-last); returns its samples."""

    def step() -> int:
        x, y = next(batches)
        x = x.cuda(non_blocking=True).to(memory_format=torch.channels_last)
        y = y.cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return int(x.shape[0])

    return step


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--model", choices=("resnet18", "resnet50"), default="resnet18")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--work", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=20, help="steps before measuring")
    ap.add_argument("--seconds", type=float, default=20.0, help="measured training time")
    ap.add_argument("--report-every", type=float, default=0.0, help="also print RATE lines this often (s)")
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    model = getattr(torchvision.models, a.model)(num_classes=1000).cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(
        Augmented(10**7, a.work),
        batch_size=a.batch,
        num_workers=a.workers,
        pin_memory=True,
        shuffle=True,
        persistent_workers=a.workers > 0,
    )
    step = train_step(model, opt, iter(loader))
    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    print(f"READY pid={os.getpid()} torch_threads={torch.get_num_threads()}", flush=True)
    done, elapsed = measured_loop(step, a.seconds, a.report_every, torch.cuda.synchronize)
    print(
        f"RESULT samples_per_s={done / elapsed:.1f} workers={a.workers} batch={a.batch} "
        f"affinity={sorted(os.sched_getaffinity(0))}",
        flush=True,
    )


if __name__ == "__main__":
    main()
