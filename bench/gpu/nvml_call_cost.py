"""What each NVML call of the monitor's tick costs on this machine's GPU 0: CPU (this
thread's, so the driver's own work in the call is counted) and wall time per call, the
median of ``--rounds`` rounds of ``--calls`` calls each; and what the gateway's whole
``sample()`` costs, with the GPU as it is (run it idle, and beside a job).

The utilisation samples are asked for twice: since 0 (every sample the driver holds) and
since the newest one minus a second (what a tick asks for), to show whether the call's cost
depends on how many samples come back.

    python -m bench.gpu.nvml_call_cost [--calls 200] [--rounds 2]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import pynvml as nvml

from affmon.nvml import NvmlGateway


def per_call_ms(fn: Callable[[], Any], calls: int) -> tuple[float, float]:
    """(CPU ms, wall ms) per call, after one call to warm it."""
    fn()
    cpu, wall = time.thread_time(), time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.thread_time() - cpu) / calls * 1e3, (time.perf_counter() - wall) / calls * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        sys.exit(f"nvml_call_cost: no NVML here: {exc}")
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    print(f"GPU 0: {nvml.nvmlDeviceGetName(h)}, driver {nvml.nvmlSystemGetDriverVersion()}")
    _, held = nvml.nvmlDeviceGetSamples(h, nvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    stamps = sorted(int(x.timeStamp) for x in held)
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    print(
        f"utilisation samples held by the driver: {len(held)}, "
        f"{statistics.median(gaps) / 1000 if gaps else 0:.0f} ms apart (median)"
    )
    second_ago = stamps[-1] - 1_000_000 if stamps else 0
    calls: dict[str, Callable[[], Any]] = {
        "nvmlDeviceGetSamples (util, since 0)": lambda: nvml.nvmlDeviceGetSamples(
            h, nvml.NVML_GPU_UTILIZATION_SAMPLES, 0
        ),
        "nvmlDeviceGetSamples (util, last second)": lambda: nvml.nvmlDeviceGetSamples(
            h, nvml.NVML_GPU_UTILIZATION_SAMPLES, second_ago
        ),
        "nvmlDeviceGetUtilizationRates": lambda: nvml.nvmlDeviceGetUtilizationRates(h),
        "nvmlDeviceGetFieldValues (PCIe TX, RX)": lambda: nvml.nvmlDeviceGetFieldValues(h, [197, 198]),
        "nvmlDeviceGetMemoryInfo": lambda: nvml.nvmlDeviceGetMemoryInfo(h),
        "nvmlDeviceGetCurrPcieLinkGeneration": lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(h),
        "nvmlDeviceGetCurrPcieLinkWidth": lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(h),
        "nvmlDeviceGetPowerUsage": lambda: nvml.nvmlDeviceGetPowerUsage(h),
        "nvmlDeviceGetClockInfo (SM)": lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM),
        "nvmlDeviceGetComputeRunningProcesses": lambda: nvml.nvmlDeviceGetComputeRunningProcesses(h),
        "nvmlDeviceGetGraphicsRunningProcesses": lambda: nvml.nvmlDeviceGetGraphicsRunningProcesses(h),
    }
    found: dict[str, list[tuple[float, float]]] = {name: [] for name in calls}
    for _ in range(args.rounds):
        for name, fn in calls.items():
            found[name].append(per_call_ms(fn, args.calls))
    print(f"per call, median of {args.rounds} rounds of {args.calls}:")
    for name, values in found.items():
        cpu = statistics.median(v[0] for v in values)
        wall = statistics.median(v[1] for v in values)
        print(f"  {name:42s} {cpu:7.3f} ms CPU  {wall:7.3f} ms wall")
    gateway = NvmlGateway(pcie_window_s=0.0)
    if gateway.open():
        ticks = 30
        cpu, _ = per_call_ms(gateway.sample, ticks)
        print(f"  the gateway's sample() over {ticks} calls (PCIe window 0): {cpu:.3f} ms CPU a call")
    else:
        print(f"  the gateway did not open: {gateway.status}")


if __name__ == "__main__":
    main()
