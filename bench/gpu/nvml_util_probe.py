"""What NVML's GPU utilisation means at a 1 s sampling interval: the instantaneous
``nvmlDeviceGetUtilizationRates`` against the mean of ``nvmlDeviceGetSamples(...,
NVML_GPU_UTILIZATION_SAMPLES, last_seen)`` over the same second, under a load of known
duty cycle (matrix products for ``--busy`` of every second, idle for the rest).

    python -m bench.gpu.nvml_util_probe [--busy 0.3] [--seconds 10]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import pynvml as nv

LOAD = """
import sys, time, torch
busy = float(sys.argv[1]); a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
print("LOAD READY", flush=True)
while True:
    t = time.perf_counter()
    while time.perf_counter() - t < busy:
        a @ a
        torch.cuda.synchronize()
    time.sleep(max(0.0, 1.0 - (time.perf_counter() - t)))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--busy", type=float, default=0.3)
    ap.add_argument("--seconds", type=int, default=10)
    a = ap.parse_args()
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    load = subprocess.Popen([sys.executable, "-c", LOAD, str(a.busy)], stdout=subprocess.PIPE, text=True)
    assert load.stdout is not None and "READY" in load.stdout.readline()
    time.sleep(2)
    kind, buffered = nv.nvmlDeviceGetSamples(h, nv.NVML_GPU_UTILIZATION_SAMPLES, 0)
    stamps = [s.timeStamp for s in buffered]
    print(f"buffer: value type {kind}, {len(buffered)} samples over {(stamps[-1] - stamps[0]) / 1e6:.2f} s")
    print("values:", [s.sampleValue.uiVal for s in buffered[-12:]])
    print("stamp steps (ms):", [round((b - x) / 1e3) for x, b in zip(stamps[-12:], stamps[-11:], strict=False)])
    last = max(stamps)
    for _ in range(a.seconds):
        time.sleep(1.0)
        rate = nv.nvmlDeviceGetUtilizationRates(h).gpu
        try:
            _, new = nv.nvmlDeviceGetSamples(h, nv.NVML_GPU_UTILIZATION_SAMPLES, last)
        except nv.NVMLError as exc:
            print(f"rates {rate:3d}%  samples: {exc}")
            continue
        values = [s.sampleValue.uiVal for s in new]
        last = max([last, *(s.timeStamp for s in new)])
        mean = sum(values) / len(values) if values else float("nan")
        print(f"rates {rate:3d}%  samples since last: {len(values)}, mean {mean:.1f}, values {values}")
    try:
        nv.nvmlDeviceGetSamples(h, nv.NVML_GPU_UTILIZATION_SAMPLES, last)
        print("immediately again: answered")
    except nv.NVMLError as exc:
        print(f"immediately again: {exc} (code {getattr(exc, 'value', '?')})")
    load.kill()
    nv.nvmlShutdown()


if __name__ == "__main__":
    main()
