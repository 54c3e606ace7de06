"""Probe how NVML's cumulative PCIe byte counters (fields 197/198) behave on this GPU:
their value type and width, how fast they wrap under load, and how they compare with
``nvmlDeviceGetPcieThroughput``. Needs torch and a GPU: ``python -m bench.gpu.nvml_pcie_probe``.

On the H200 (driver 580.159) it showed ``valueType`` 1 (unsigned int, 32 bits), raw
values up to 4,266,227,828 and a wrap every ~120 ms under back-to-back 256 MiB copies,
which is why the gateway measures the rate over a short window (see affmon/nvml.py).
"""

import subprocess
import sys
import time

import pynvml as nvml

LOAD = (
    "import torch,time\n"
    "x=torch.empty(256<<20,dtype=torch.uint8).pin_memory(); y=torch.empty_like(x,device='cuda')\n"
    "print('ready',flush=True); t=time.time()\n"
    "while time.time()-t<12:\n"
    "    y.copy_(x,non_blocking=True); x.copy_(y,non_blocking=True); torch.cuda.synchronize()\n"
)


def fields(handle):
    """(nvmlReturn, valueType, value, timestamp_us) of TX and RX."""
    values = nvml.nvmlDeviceGetFieldValues(handle, [197, 198])
    return [(v.nvmlReturn, v.valueType, v.value.ullVal, v.timestamp) for v in values]


def main() -> None:
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    print("idle (ret, type, value, timestamp_us):", fields(handle))
    load = subprocess.Popen([sys.executable, "-c", LOAD], stdout=subprocess.PIPE, text=True)
    try:
        assert load.stdout is not None and load.stdout.readline().strip() == "ready"
        time.sleep(1)
        prev = fields(handle)
        seen = []
        for _ in range(25):  # about 5 ms apart
            time.sleep(0.005)
            cur = fields(handle)
            deltas = [c[2] - p[2] for c, p in zip(cur, prev, strict=True)]
            stamps = [c[3] - p[3] for c, p in zip(cur, prev, strict=True)]
            print(f"delta tx={deltas[0]:>12} rx={deltas[1]:>12} raw={[c[2] for c in cur]} dt_us={stamps}")
            seen.extend(c[2] for c in cur)
            prev = cur
        print("max raw value seen:", max(seen), "(2^32 =", 2**32, ")")
        started = time.perf_counter()
        tx = nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_TX_BYTES)
        rx = nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_RX_BYTES)
        print(f"throughput API: tx={tx} KB/s rx={rx} KB/s, {(time.perf_counter() - started) * 1e3:.1f} ms for both")
    finally:
        load.kill()
        load.wait()


if __name__ == "__main__":
    main()
