"""A DDP training job for the multi-GPU scenarios: one rank per GPU (torchrun), each rank
the same ResNet-18 with 4 DataLoader workers as bench/workloads/train_job.py. Every rank prints
``READY rank=R pid=P`` and ``RATE rank=R t=... samples_per_s=...`` lines.

    PYTHONPATH=. torchrun --nproc-per-node 2 bench/workloads/ddp_job.py --seconds 60 --report-every 2
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import torchvision
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from bench.workloads.rate_loop import measured_loop
from bench.workloads.train_job import Augmented, train_step


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--work", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--report-every", type=float, default=2.0)
    a = ap.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet18(num_classes=1000).cuda().to(memory_format=torch.channels_last)
    model = DistributedDataParallel(model, device_ids=[local])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = Augmented(10**7, a.work)
    loader = DataLoader(
        data,
        batch_size=a.batch,
        num_workers=a.workers,
        pin_memory=True,
        sampler=DistributedSampler(data, shuffle=True),
        persistent_workers=a.workers > 0,
    )
    step = train_step(model, opt, iter(loader))
    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    print(f"READY rank={rank} pid={os.getpid()} gpu={local} affinity={sorted(os.sched_getaffinity(0))}", flush=True)
    measured_loop(step, a.seconds, a.report_every, torch.cuda.synchronize, f"rank={rank}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
