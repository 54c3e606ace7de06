"""Training loops bound by different things, for ``bench/gpu/loop_scenarios.py`` (a GPU machine).

    python -m bench.workloads.loop_job data|gpu|python [--workers N] [--work N] [--batch N] [--seconds S]

* ``data``: ResNet-18 on images a DataLoader decodes on the CPU (``--work`` rounds of flips
  and normalisation per image, in ``--workers`` processes, pin memory on): with too few
  workers the loop waits for batches;
* ``gpu``: a large MLP (8 layers of 8192x8192, bf16) on small synthetic inputs made on the
  GPU, with ``loss.item()`` every step: the GPU is the limit and the loop waits in CUDA's
  synchronisation, which spins by default;
* ``python``: a small model whose step does a hundred small tensor operations and about
  10 ms of Python bookkeeping: the loop's own CPU work is the limit and the GPU idles.

Prints ``READY pid=...`` after warm-up and ``RATE t=... samples_per_s=...`` every 2 s.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

import torch
import torchvision
from torch.utils.data import DataLoader

from bench.workloads.rate_loop import measured_loop
from bench.workloads.train_job import Augmented, train_step


def data_step(a: argparse.Namespace) -> Callable[[], int]:
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
    return train_step(model, opt, iter(loader))


def gpu_step(a: argparse.Namespace) -> Callable[[], int]:
    width = 8192
    layers: list[torch.nn.Module] = []
    for _ in range(8):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(a.batch, width, device="cuda")

    def step() -> int:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()  # the host waits for the GPU here (CUDA spins by default)
        return a.batch

    return step


def python_step(a: argparse.Namespace) -> Callable[[], int]:
    model = torch.nn.Linear(64, 64).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(a.batch, 64, device="cuda")

    def step() -> int:
        h = model(x)
        for _ in range(50):  # small ops, one kernel launch each
            h = h * 0.999 + 0.001
        loss = h.pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        # Per-step bookkeeping in plain Python (metrics, logging): about 10 ms of CPU.
        _ = sorted((i * 7919) % 10007 for i in range(40000))
        return a.batch

    return step


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["data", "gpu", "python"])
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--work", type=int, default=12)
    ap.add_argument("--batch", type=int, default=0, help="default: 32 (data), 4096 (gpu), 64 (python)")
    ap.add_argument("--seconds", type=float, default=60.0)
    a = ap.parse_args()
    a.batch = a.batch or {"data": 32, "gpu": 4096, "python": 64}[a.mode]
    torch.backends.cudnn.benchmark = True
    step = {"data": data_step, "gpu": gpu_step, "python": python_step}[a.mode](a)
    for _ in range(10):
        step()
    torch.cuda.synchronize()
    print(f"READY pid={os.getpid()} mode={a.mode} workers={a.workers} batch={a.batch}", flush=True)
    done, elapsed = measured_loop(step, a.seconds, 2.0, torch.cuda.synchronize)
    print(f"RESULT samples_per_s={done / elapsed:.1f}", flush=True)


if __name__ == "__main__":
    main()
