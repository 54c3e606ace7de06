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
import time

import numpy as np
import torch
import torchvision
from torch.utils.data import DataLoader, Dataset


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--work", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=20, help="steps before measuring")
    ap.add_argument("--seconds", type=float, default=20.0, help="measured training time")
    ap.add_argument("--report-every", type=float, default=0.0, help="also print RATE lines this often (s)")
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet18(num_classes=1000).cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(
        Augmented(10**7, a.work),
        batch_size=a.batch,
        num_workers=a.workers,
        pin_memory=True,
        shuffle=True,
        persistent_workers=a.workers > 0,
    )
    batches = iter(loader)

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

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    print(f"READY pid={os.getpid()} torch_threads={torch.get_num_threads()}", flush=True)
    done, start = 0, time.perf_counter()
    window_done, window_start = 0, start
    while time.perf_counter() - start < a.seconds:
        n = step()
        done += n
        window_done += n
        now = time.perf_counter()
        if a.report_every and now - window_start >= a.report_every:
            torch.cuda.synchronize()
            now = time.perf_counter()
            print(f"RATE t={now - start:.1f} samples_per_s={window_done / (now - window_start):.1f}", flush=True)
            window_done, window_start = 0, now
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    print(
        f"RESULT samples_per_s={done / elapsed:.1f} workers={a.workers} batch={a.batch} "
        f"affinity={sorted(os.sched_getaffinity(0))}",
        flush=True,
    )


if __name__ == "__main__":
    main()
