"""NVML faults, against ``tests/helpers/fake_pynvml.py``: every pynvml function the
gateway calls made to raise NotSupported, GpuIsLost, Unknown and Uninitialized, on one
GPU of two, at start-up and mid-run, and all of them at once. The gateway never raises;
a field it could not read is None (unknown); a lost GPU is marked lost and the other
goes on; NotSupported is not asked again; start-up faults leave affmon CPU-only with a
one-line reason. (``tests/nvml/test_nvml.py`` has the normal reads and a few single faults.)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import affmon.nvml
from affmon.core.model.samples import GpuSample
from affmon.nvml import NvmlGateway
from tests.helpers.fake_pynvml import (
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_UNINITIALIZED,
    NVML_ERROR_UNKNOWN,
    FakeGpu,
    FakeNvml,
    NVMLError,
)

ERRORS = {
    "NotSupported": NVML_ERROR_NOT_SUPPORTED,
    "GpuIsLost": NVML_ERROR_GPU_IS_LOST,
    "Unknown": NVML_ERROR_UNKNOWN,
    "Uninitialized": NVML_ERROR_UNINITIALIZED,
}
SOFT = ["NotSupported", "Unknown", "Uninitialized"]  # errors that make a field unknown

# Every per-GPU function the gateway calls -> what in a sample it fills.
DEVICE_CALLS: dict[str, Callable[[GpuSample], object]] = {
    "nvmlDeviceGetName": lambda s: s.name,
    "nvmlDeviceGetUUID": lambda s: s.uuid,
    "nvmlDeviceGetPciInfo": lambda s: s.pci_bus_id,
    "nvmlDeviceGetMaxPcieLinkGeneration": lambda s: s.pcie_link.max_gen,
    "nvmlDeviceGetMaxPcieLinkWidth": lambda s: s.pcie_link.max_width,
    # GPU utilisation comes from the samples (below); the rates give memory utilisation
    "nvmlDeviceGetUtilizationRates": lambda s: s.mem_util_percent,
    "nvmlDeviceGetMemoryInfo": lambda s: (s.mem_used_bytes, s.mem_total_bytes),
    "nvmlDeviceGetFieldValues": lambda s: (s.pcie_tx_window_bytes_per_s, s.pcie_rx_bytes_total),
    "nvmlDeviceGetCurrPcieLinkGeneration": lambda s: s.pcie_link.gen,
    "nvmlDeviceGetCurrPcieLinkWidth": lambda s: s.pcie_link.width,
    "nvmlDeviceGetPowerUsage": lambda s: s.power_w,
    "nvmlDeviceGetClockInfo": lambda s: (s.sm_clock_mhz, s.mem_clock_mhz),
    "nvmlDeviceGetComputeRunningProcesses": lambda s: s.processes or None,
}
# Called only where the PCIe counters are not supported: tested with that set up.
FALLBACK_CALLS: dict[str, Callable[[GpuSample], object]] = {
    "nvmlDeviceGetPcieThroughput": lambda s: (s.pcie_tx_window_bytes_per_s, s.pcie_rx_window_bytes_per_s),
}
# Answers nothing in the fake: failing must only not disturb the rest.
# Failing, these leave every field known: graphics processes are an addition, and the
# utilisation samples fall back to the rates' reading.
QUIET_CALLS = ["nvmlDeviceGetGraphicsRunningProcesses", "nvmlDeviceGetSamples"]
ALL_DEVICE_CALLS = [*DEVICE_CALLS, *FALLBACK_CALLS, *QUIET_CALLS]


class Faults:
    """Make pynvml functions of a ``FakeNvml`` raise: ``break_(name, code, gpu)`` (``gpu``
    None: on every GPU, or a module-level function). Counts calls and refusals."""

    def __init__(self, nvml: FakeNvml) -> None:
        self.nvml = nvml
        self.calls: dict[str, int] = {}
        self.refused: dict[str, int] = {}
        self.broken: dict[str, tuple[int, FakeGpu | None]] = {}
        for name in dir(FakeNvml):
            if name.startswith("nvml"):
                setattr(nvml, name, self._wrap(name, getattr(nvml, name)))

    def _wrap(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            fault = self.broken.get(name)
            if fault is not None and (fault[1] is None or (args and args[0] is fault[1])):
                self.refused[name] = self.refused.get(name, 0) + 1
                raise NVMLError(fault[0])
            return real(*args)

        return call

    def break_(self, name: str, code: int, gpu: FakeGpu | None = None) -> None:
        assert name.startswith("nvml") and hasattr(FakeNvml, name), name
        self.broken[name] = (code, gpu)

    def mend(self) -> None:
        self.broken.clear()


def two_gpus(**first: Any) -> tuple[NvmlGateway, Faults, FakeGpu, FakeGpu]:
    a = FakeGpu(bus_id="00000000:3B:00.0", pids=[(101, 1 << 30)], tx_per_read=1000, **first)
    b = FakeGpu(bus_id="00000000:86:00.0", pids=[(202, 2 << 30)], tx_per_read=1000, util=55)
    nvml = FakeNvml([a, b])
    faults = Faults(nvml)
    return NvmlGateway(module=nvml, pcie_window_s=0.0), faults, a, b


def assert_whole(s: GpuSample, *, except_: Callable[[GpuSample], object] | None = None) -> None:
    """Every field the fake provides is there (but the one ``except_`` names)."""
    assert not s.lost
    for name, read in DEVICE_CALLS.items():
        if read is except_:
            continue
        value = read(s)
        assert value is not None and (not isinstance(value, tuple) or None not in value), (name, s)


def assert_unknown(value: object) -> None:
    assert value is None or (isinstance(value, tuple) and set(value) == {None}), value


def assert_lost(s: GpuSample) -> None:
    assert s.lost
    values = (
        s.util_percent,
        s.mem_used_bytes,
        s.power_w,
        s.sm_clock_mhz,
        s.pcie_link.gen,
        s.pcie_tx_window_bytes_per_s,
    )
    assert set(values) == {None} and s.processes == ()


def test_every_function_the_gateway_calls_is_covered() -> None:
    """The fault tables above list every pynvml function ``affmon/nvml.py`` calls."""
    source = Path(affmon.nvml.__file__).read_text()
    called = set(re.findall(r"\bnvml\.(nvml[A-Z]\w*)", source))
    startup = {
        "nvmlInit",
        "nvmlShutdown",
        "nvmlDeviceGetCount",
        "nvmlDeviceGetHandleByIndex",
        "nvmlSystemGetDriverVersion",
    }
    assert called == set(ALL_DEVICE_CALLS) | startup


# -- one function failing on one GPU, from the first sample on --------------------------


@pytest.mark.parametrize("error", SOFT)
@pytest.mark.parametrize("call", [*DEVICE_CALLS, *QUIET_CALLS])
def test_a_failing_call_makes_its_field_unknown_and_nothing_else(call: str, error: str) -> None:
    gateway, faults, a, _ = two_gpus()
    faults.break_(call, ERRORS[error], a)
    assert gateway.open()
    read = DEVICE_CALLS.get(call)
    for _ in range(3):
        first, second = gateway.sample()
        if call == "nvmlDeviceGetFieldValues":
            assert first.pcie_tx_bytes_total is None and first.pcie_rx_bytes_total is None
            # NotSupported: the 20 ms throughput call stands in; otherwise unknown this tick
            fallback = 2000 * 1024 if error == "NotSupported" else None
            assert first.pcie_tx_window_bytes_per_s == fallback
        elif read is not None:
            assert_unknown(read(first))
        assert_whole(first, except_=read)
        assert_whole(second)
    if error == "NotSupported":  # refused once (per NVML call site), then never asked again
        assert faults.refused[call] == (2 if call == "nvmlDeviceGetClockInfo" else 1)
    gateway.close()


@pytest.mark.parametrize("error", SOFT)
def test_the_throughput_fallback_failing_leaves_pcie_unknown(error: str) -> None:
    gateway, faults, a, _ = two_gpus(fail={"fields": NVML_ERROR_NOT_SUPPORTED})  # counters: unsupported
    faults.break_("nvmlDeviceGetPcieThroughput", ERRORS[error], a)
    assert gateway.open()
    for _ in range(2):
        first, second = gateway.sample()
        assert_unknown(FALLBACK_CALLS["nvmlDeviceGetPcieThroughput"](first))
        assert first.util_percent == 97 and not first.lost
        assert second.pcie_tx_window_bytes_per_s is not None


@pytest.mark.parametrize("call", ALL_DEVICE_CALLS)
def test_gpu_lost_in_any_call_mid_run_is_shown_lost_and_the_other_goes_on(call: str) -> None:
    gateway, faults, a, _ = two_gpus(fail={"fields": NVML_ERROR_NOT_SUPPORTED} if call in FALLBACK_CALLS else {})
    assert gateway.open()
    first, second = gateway.sample()
    assert not first.lost and not second.lost
    faults.break_(call, NVML_ERROR_GPU_IS_LOST, a)
    for _ in range(2):
        lost, other = gateway.sample()
        if call in ("nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo") or call.startswith(
            "nvmlDeviceGetMaxPcie"
        ):
            assert not lost.lost  # read once at the first sample: not asked again
            continue
        assert_lost(lost)
        assert lost.pci_bus_id == "0000:3b:00.0" and lost.name == "NVIDIA H200"  # still says which GPU
        assert_whole(other)
        assert other.util_percent == 55 and [p.pid for p in other.processes] == [202]


@pytest.mark.parametrize("call", ALL_DEVICE_CALLS)
def test_gpu_lost_from_the_start_in_any_call(call: str) -> None:
    gateway, faults, a, _ = two_gpus(fail={"fields": NVML_ERROR_NOT_SUPPORTED} if call in FALLBACK_CALLS else {})
    faults.break_(call, NVML_ERROR_GPU_IS_LOST, a)
    assert gateway.open()
    lost, other = gateway.sample()
    assert_lost(lost)
    assert_whole(other)
    assert [d.pci_bus_id for d in gateway.devices()][1] == "0000:86:00.0"


# -- everything failing at once ---------------------------------------------------------


STATIC = {  # read once, at the first sample, and kept
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth",
}


@pytest.mark.parametrize("error", list(ERRORS))
def test_every_call_failing_at_once(error: str) -> None:
    gateway, faults, _, _ = two_gpus()
    assert gateway.open()
    gateway.sample()
    for call in ALL_DEVICE_CALLS:
        faults.break_(call, ERRORS[error])
    for _ in range(3):
        samples = gateway.sample()
        assert [s.pci_bus_id for s in samples] == ["0000:3b:00.0", "0000:86:00.0"]
        for s in samples:
            if error == "GpuIsLost":
                assert_lost(s)
                continue
            assert not s.lost
            for call, read in DEVICE_CALLS.items():
                if call not in STATIC:
                    assert_unknown(read(s))
    faults.mend()
    for s in gateway.sample():  # NVML is back: what was not refused as unsupported reads again
        assert not s.lost
        assert (s.util_percent is None) == (error == "NotSupported")
    gateway.close()


# -- start-up and shutdown ---------------------------------------------------------------


@pytest.mark.parametrize("error", list(ERRORS))
@pytest.mark.parametrize("call", ["nvmlInit", "nvmlDeviceGetCount"])
def test_start_up_failing_means_cpu_only_in_one_line(call: str, error: str) -> None:
    gateway, faults, _, _ = two_gpus()
    faults.break_(call, ERRORS[error])
    assert not gateway.open()
    assert "CPU-only" in gateway.status and "\n" not in gateway.status
    assert gateway.sample() == () and gateway.devices() == ()
    gateway.close()
    # NVML initialised and then abandoned would stay initialised (a reference count in
    # the driver library): a failed open shuts it down again.
    assert faults.calls.get("nvmlShutdown", 0) == (1 if call != "nvmlInit" else 0)


@pytest.mark.parametrize("error", list(ERRORS))
def test_a_gpu_whose_handle_fails_is_lost_and_the_other_is_read(error: str) -> None:
    gateway, faults, _, _ = two_gpus()
    real = faults.nvml.nvmlDeviceGetHandleByIndex

    def handle(index: int) -> Any:
        if index == 0:
            raise NVMLError(ERRORS[error])
        return real(index)

    faults.nvml.nvmlDeviceGetHandleByIndex = handle  # type: ignore[method-assign]
    assert gateway.open() and gateway.status.startswith("NVML: 2 GPUs")
    for _ in range(2):
        lost, other = gateway.sample()
        assert lost.lost and lost.index == 0
        assert_whole(other)
    assert [d.index for d in gateway.devices()] == [0, 1]


@pytest.mark.parametrize("error", list(ERRORS))
def test_driver_version_and_shutdown_failing_are_harmless(error: str) -> None:
    gateway, faults, _, _ = two_gpus()
    faults.break_("nvmlSystemGetDriverVersion", ERRORS[error])
    faults.break_("nvmlShutdown", ERRORS[error])
    assert gateway.open()
    assert gateway.status == "NVML: 2 GPUs, driver unknown"
    assert len(gateway.sample()) == 2
    gateway.close()
    assert not gateway.available and gateway.sample() == ()


def test_library_that_fails_to_load_at_init_is_cpu_only() -> None:
    class Broken(FakeNvml):
        def nvmlInit(self) -> None:
            raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    gateway = NvmlGateway(module=Broken([FakeGpu()]))
    assert not gateway.open()
    assert "CPU-only" in gateway.status and "libnvidia-ml" in gateway.status and "\n" not in gateway.status
