"""A stand-in for the ``pynvml`` module, for the NVML gateway's tests.

It mirrors the real module's surface that affmon uses (names and error classes from
nvidia-ml-py) and lets a test make any call on any GPU raise a chosen NVML error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_GPU_UTILIZATION_SAMPLES = 1
SAMPLE_PERIOD_US = 200_000  # the H200's driver: one utilisation sample every 200 ms

_NAMES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _NAMES.get(self.value, f"error {self.value}")


@dataclass
class FakeGpu:
    name: str = "NVIDIA H200"
    bus_id: str = "00000000:3B:00.0"
    util: int = 97
    mem_util: int = 40
    mem_used: int = 10 << 30
    mem_total: int = 141 << 30
    tx_total: int = 1_000_000
    rx_total: int = 5_000_000
    tx_per_read: int = 0
    rx_per_read: int = 0
    us_per_read: int = 20_000
    clock_us: int = 1_795_969_018_813_217
    counter_bits: int = 64
    gen: int = 5
    width: int = 16
    max_gen: int = 5
    max_width: int = 16
    pids: list[tuple[int, int | None]] = field(default_factory=list)
    # The driver's utilisation samples as (NVML timestamp us, percent). None: every call
    # to nvmlDeviceGetSamples finds five new samples of ``util`` (one second's worth).
    util_samples: list[tuple[int, int]] | None = None
    sample_clock_us: int = 1_795_969_000_000_000  # NVML time of the newest synthesised sample
    fail: dict[str, int] = field(default_factory=dict)  # call name -> NVML error code
    field_fail: int = 0  # per-field nvmlReturn for the PCIe counters
    calls: dict[str, int] = field(default_factory=dict)


class FakeNvml:
    """Build with the GPUs, then hand to ``NvmlGateway(module=...)``."""

    NVMLError = NVMLError

    def __init__(self, gpus: list[FakeGpu], init_error: int | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        for name, value in globals().items():
            if name.startswith("NVML_"):
                setattr(self, name, value)

    def _gpu(self, handle: Any, call: str) -> FakeGpu:
        gpu: FakeGpu = handle
        gpu.calls[call] = gpu.calls.get(call, 0) + 1
        if call in gpu.fail:
            raise NVMLError(gpu.fail[call])
        return gpu

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.159.04"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetName(self, h: Any) -> str:
        return self._gpu(h, "name").name

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        self._gpu(h, "uuid")
        return "GPU-0000"

    def nvmlDeviceGetPciInfo(self, h: Any) -> Any:
        return SimpleNamespace(busId=self._gpu(h, "pci").bus_id.encode())

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        g = self._gpu(h, "util")
        return SimpleNamespace(gpu=g.util, memory=g.mem_util)

    def nvmlDeviceGetSamples(self, h: Any, kind: int, last_seen_us: int) -> tuple[int, list[Any]]:
        """As nvidia-ml-py: (value type, samples newer than ``last_seen_us``, all when 0);
        Not Found when there is none."""
        g = self._gpu(h, "samples")
        assert kind == NVML_GPU_UTILIZATION_SAMPLES, kind
        if g.util_samples is None:
            newest = max(last_seen_us, g.sample_clock_us)
            fresh = [(newest + SAMPLE_PERIOD_US * (i + 1), g.util) for i in range(5)]
            g.sample_clock_us = fresh[-1][0]
        else:
            fresh = [(t, v) for t, v in g.util_samples if t > last_seen_us]
        if not fresh:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return 1, [SimpleNamespace(timeStamp=t, sampleValue=SimpleNamespace(uiVal=v)) for t, v in fresh]

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        g = self._gpu(h, "memory")
        return SimpleNamespace(used=g.mem_used, total=g.mem_total, free=g.mem_total - g.mem_used)

    def nvmlDeviceGetFieldValues(self, h: Any, ids: list[int]) -> list[Any]:
        """Counters advance by ``tx_per_read``/``rx_per_read`` bytes and ``us_per_read``
        microseconds of NVML time at every read, wrapping at ``counter_bits``."""
        g = self._gpu(h, "fields")
        g.tx_total += g.tx_per_read
        g.rx_total += g.rx_per_read
        g.clock_us += g.us_per_read
        values = {197: g.tx_total, 198: g.rx_total}
        wrap = 1 << g.counter_bits
        kind, member = (1, "uiVal") if g.counter_bits == 32 else (3, "ullVal")
        return [
            SimpleNamespace(
                fieldId=i,
                nvmlReturn=g.field_fail,
                valueType=kind,
                timestamp=g.clock_us,
                value=SimpleNamespace(**{member: values[i] % wrap}),
            )
            for i in ids
        ]

    def nvmlDeviceGetPcieThroughput(self, h: Any, counter: int) -> int:
        self._gpu(h, "throughput")
        return 2000 if counter == NVML_PCIE_UTIL_TX_BYTES else 3000  # KiB/s

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: Any) -> int:
        return self._gpu(h, "gen").gen

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: Any) -> int:
        return self._gpu(h, "width").width

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: Any) -> int:
        return self._gpu(h, "max_gen").max_gen

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: Any) -> int:
        return self._gpu(h, "max_width").max_width

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        self._gpu(h, "power")
        return 450_000

    def nvmlDeviceGetClockInfo(self, h: Any, kind: int) -> int:
        self._gpu(h, "clock")
        return 1980 if kind == NVML_CLOCK_SM else 3201

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:
        g = self._gpu(h, "procs")
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in g.pids]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: Any) -> list[Any]:
        self._gpu(h, "gprocs")
        return []
