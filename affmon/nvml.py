"""The NVML gateway: the only module of affmon that touches ``pynvml``.

The module is handed in (``NvmlGateway(module=fake)`` in tests) or imported lazily, so
affmon starts and works CPU-only where ``nvidia-ml-py`` or the driver is missing; the
reason is kept in ``status`` as one line. Where the driver's library is missing, ``pynvml``
is not imported at all: its bindings are 2-4 MiB of the process's memory (RSS, measured
on a two-core VM) that a CPU-only monitor would carry for nothing.

Every call is guarded: NotSupported makes that field unknown (and the call is not tried
again on that GPU: nvitop's habit, it saves the cost of repeated failures); GPU_IS_LOST
marks the GPU lost for this tick and the others go on; any other NVML error makes the
field unknown for this tick.

PCIe traffic. The cumulative byte counters (``nvmlDeviceGetFieldValues`` with fields
197/198) answer in 0.5 ms, against 20 ms per direction per GPU for
``nvmlDeviceGetPcieThroughput``, both measured on the H200. There (driver 580) they are 32-bit
(``valueType`` unsigned int) and wrap every 4 GiB: at 35 GB/s that is eight times a
second, so a delta between two 1 s ticks means nothing (measured with
``bench/gpu/nvml_pcie_probe.py``). The gateway therefore reads them twice per tick, once
before and once after the other calls, at least ``pcie_window_s`` apart, and takes the
rate from NVML's own timestamps: a 32-bit counter cannot wrap twice in 20 ms below
200 GB/s. Where NVML gives 64-bit counters, their totals are also kept so that rates
over the whole interval are exact. The throughput call is the fallback where the
counters are unsupported; the sampler never runs on the UI thread.

GPU utilisation. ``nvmlDeviceGetUtilizationRates`` covers only NVML's last sample period
("between 1 second and 1/6 second"): on the H200 the driver takes one every 200 ms, so a
1 s tick sees a fifth of its interval. Under a load busy 30% of every second it read 0%
at every tick while the samples of the same seconds averaged 28-29%
(``bench/gpu/nvml_util_probe.py``). The gateway therefore reports the mean of the samples
``nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES)`` took since its last tick (the last
second of them at the first tick), and falls back to the rates' reading where that is
unsupported or no sample is new (a tick shorter than the driver's period). Memory
utilisation still comes from the rates' last period.

That mean costs: ``nvmlDeviceGetSamples`` took 2.0-2.4 ms of CPU a call on an H100 (driver
580.159.04; the same with 6 samples new as with the driver's 71), where every other call
of a tick took 1-40 us and the PCIe counters 0.27-0.29 ms (``bench/gpu/nvml_call_cost.py``).
So a GPU that looks idle (the rates' last period 0%, no process on it) and whose samples
read at the last look were all 0% has them read every ``IDLE_UTIL_EVERY`` ticks only, each
read covering the ticks between; the ticks between show the rates' 0%. A load NVML does not
list (another container's, where the driver cannot name its processes) shows at the next
read, and from then on its samples are read every tick until they are all 0% again.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import importlib.util
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, NamedTuple, TypeVar

from affmon.core.model.cpuset import MAX_CPU_ID, CpuSet
from affmon.core.model.samples import GpuProcess, GpuSample, PcieLink
from affmon.core.model.topology import Topology, normalize_bus_id

FI_PCIE_COUNT_TX_BYTES = 197  # NVML_FI_DEV_PCIE_COUNT_TX_BYTES
FI_PCIE_COUNT_RX_BYTES = 198  # NVML_FI_DEV_PCIE_COUNT_RX_BYTES
# nvmlValueType_t -> (union member, width in bits)
_VALUE_FIELDS = {
    0: ("dVal", 64),
    1: ("uiVal", 32),
    2: ("ulVal", 64),
    3: ("ullVal", 64),
    4: ("sllVal", 64),
    5: ("siVal", 32),
    6: ("usVal", 16),
}
PCIE_WINDOW_S = 0.02
FIRST_UTIL_WINDOW_US = 1_000_000  # at the first tick: the samples of the last second
IDLE_UTIL_EVERY = 5  # an idle-looking GPU's utilisation samples are read every this many ticks


# nvmlDeviceGetCpuAffinity fills this many 64-bit words: every CPU id Linux can have.
AFFINITY_WORDS = (MAX_CPU_ID + 64) // 64


@dataclass(frozen=True)
class DeviceInfo:
    """What ``affmon exec`` maps from. ``numa_node`` is NVML's ``nvmlDeviceGetNumaNodeId``
    (None where unsupported or negative): on Grace Hopper that is the GPU's own memory
    node, which has no CPUs. ``cpu_affinity`` is ``nvmlDeviceGetCpuAffinity``: the CPUs
    local to the GPU (None where unsupported)."""

    index: int
    uuid: str | None
    pci_bus_id: str | None
    numa_node: int | None = None
    cpu_affinity: CpuSet | None = None

    def home_node(self, topology: Topology) -> int | None:
        """The NUMA node this GPU's CPUs are on: NVML's node unless it is memory-only (then
        the node holding all of ``cpu_affinity``, ``Topology.gpu_home_node``); without an
        NVML node, the node the topology gives the GPU's bus id (None when unknown)."""
        if self.numa_node is None:
            known = None if self.pci_bus_id is None else topology.gpu(self.pci_bus_id)
            return None if known is None else known.numa_node
        return topology.gpu_home_node(self.numa_node, self.cpu_affinity)


class _Counter(NamedTuple):
    value: int
    bits: int
    timestamp_s: float  # NVML's timestamp of the reading, or our clock where it gives none


T = TypeVar("T")


class _GpuLost(Exception):
    pass


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class _Device:
    """What stays true about one GPU between ticks, and which calls it refused."""

    def __init__(self, index: int, handle: Any) -> None:
        self.index = index
        self.handle = handle
        self.unsupported: set[str] = set()
        self.name: str | None = None
        self.uuid: str | None = None
        self.pci_bus_id: str | None = None
        self.max_gen: int | None = None
        self.max_width: int | None = None
        self.numa_node: int | None = None
        self.cpu_affinity: CpuSet | None = None
        self.static_read = False
        self.util_seen_us = 0  # NVML timestamp of the newest utilisation sample read
        self.util_quiet = False  # every utilisation sample read at the last look was 0%
        self.util_skipped = 0  # ticks since then that read none (the GPU looked idle)


NO_PACKAGE = "no NVML: the nvidia-ml-py package is not installed; running CPU-only"
NVML_LIBRARY = "libnvidia-ml.so.1"  # the driver's library, as pynvml loads it on Linux


def _missing_nvml() -> str | None:
    """Why NVML cannot load, found without importing ``pynvml``: the package is not
    installed, or the driver's library does not load (the words are pynvml's own for it);
    None when both are there."""
    if "pynvml" in sys.modules:  # imported already (None: marked missing)
        return NO_PACKAGE if sys.modules["pynvml"] is None else None
    if importlib.util.find_spec("pynvml") is None:
        return NO_PACKAGE
    try:
        ctypes.CDLL(NVML_LIBRARY)
    except OSError:
        return "no NVML (NVML Shared Library Not Found); running CPU-only"
    return None


class NvmlGateway:
    def __init__(self, module: Any | None = None, pcie_window_s: float = PCIE_WINDOW_S) -> None:
        self._module = module
        self.pcie_window_s = pcie_window_s
        self.nvml: Any = None
        self.available = False
        self.status = "NVML not initialised"
        self._devices: list[_Device] = []

    # -- life cycle -------------------------------------------------------------

    def open(self) -> bool:
        """Load and initialise NVML; False (with ``status`` saying why) when there is none."""
        if self._module is None:
            missing = _missing_nvml()
            if missing is not None:
                self.status = missing
                return False
        try:
            nvml = self._module if self._module is not None else importlib.import_module("pynvml")
        except ImportError:
            self.status = NO_PACKAGE
            return False
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            self.status = f"no NVML ({_text(exc)}); running CPU-only"
            return False
        except OSError as exc:  # the shared library failed to load in an odd way
            self.status = f"no NVML ({exc}); running CPU-only"
            return False
        try:
            count = int(nvml.nvmlDeviceGetCount())
            devices = []
            for index in range(count):
                try:
                    devices.append(_Device(index, nvml.nvmlDeviceGetHandleByIndex(index)))
                except nvml.NVMLError as exc:  # one broken GPU must not hide the others
                    lost = _Device(index, None)
                    lost.unsupported.add(f"handle: {_text(exc)}")
                    devices.append(lost)
        except nvml.NVMLError as exc:
            # Initialised but unusable: shut it down again, or the driver library's
            # reference count keeps NVML initialised for the life of the process.
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()
            self.status = f"no NVML ({_text(exc)}); running CPU-only"
            return False
        self.nvml = nvml
        self._devices = devices
        self.available = True
        try:
            driver = _text(nvml.nvmlSystemGetDriverVersion())
        except nvml.NVMLError:
            driver = "unknown"
        self.status = f"NVML: {count} GPU{'s' if count != 1 else ''}, driver {driver}"
        return True

    def close(self) -> None:
        if self.available:
            with contextlib.suppress(self.nvml.NVMLError):
                self.nvml.nvmlShutdown()
        self.available = False

    def __call__(self) -> tuple[GpuSample, ...]:
        return self.sample()

    def devices(self) -> tuple[DeviceInfo, ...]:
        """Index, UUID and PCI bus id of every GPU (what ``affmon exec`` maps from)."""
        found = []
        for device in self._devices:
            if device.handle is not None and not device.static_read:
                with contextlib.suppress(_GpuLost):
                    self._read_static(device)
            found.append(
                DeviceInfo(device.index, device.uuid, device.pci_bus_id, device.numa_node, device.cpu_affinity)
            )
        return tuple(found)

    # -- sampling -----------------------------------------------------------------

    def sample(self) -> tuple[GpuSample, ...]:
        if not self.available:
            return ()
        first = {d.index: self._counters_or_lost(d) for d in self._devices}
        started = time.perf_counter()
        samples = [self._sample_device(d) for d in self._devices]
        if any(c for c in first.values()):
            time.sleep(max(0.0, self.pcie_window_s - (time.perf_counter() - started)))
        result = []
        for device, sample in zip(self._devices, samples, strict=True):
            before = first[device.index]
            if before is None:  # lost at the first reading
                result.append(self._lost(device))
                continue
            if sample.lost or not before:
                result.append(sample)
                continue
            after = self._counters_or_lost(device)
            if after is None:
                result.append(self._lost(device))
                continue
            if not after:
                result.append(sample)
                continue
            tx, rx = (_window_rate(a, b) for a, b in zip(before, after, strict=True))
            totals = [b.value if b is not None and b.bits == 64 else None for b in after]
            result.append(
                replace(
                    sample,
                    pcie_tx_window_bytes_per_s=tx,
                    pcie_rx_window_bytes_per_s=rx,
                    pcie_tx_bytes_total=totals[0],
                    pcie_rx_bytes_total=totals[1],
                )
            )
        return tuple(result)

    def _counters_or_lost(self, device: _Device) -> list[_Counter | None] | None:
        """Both PCIe counters; [] when unsupported; None when the GPU is lost."""
        if device.handle is None:
            return []
        try:
            return self._pcie_counters(device)
        except _GpuLost:
            return None

    def _call(self, device: _Device, key: str, fn: Callable[[], T]) -> T | None:
        """Run one NVML call for ``device``: NotSupported -> None forever, lost -> raise."""
        if key in device.unsupported:
            return None
        nvml = self.nvml
        try:
            return fn()
        except nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code == nvml.NVML_ERROR_GPU_IS_LOST:
                raise _GpuLost() from None
            if code == nvml.NVML_ERROR_NOT_SUPPORTED:
                device.unsupported.add(key)
            return None

    def _read_static(self, device: _Device) -> None:
        nvml, h = self.nvml, device.handle
        name = self._call(device, "name", lambda: nvml.nvmlDeviceGetName(h))
        device.name = None if name is None else _text(name)
        uuid = self._call(device, "uuid", lambda: nvml.nvmlDeviceGetUUID(h))
        device.uuid = None if uuid is None else _text(uuid)
        pci = self._call(device, "pci", lambda: nvml.nvmlDeviceGetPciInfo(h))
        device.pci_bus_id = None if pci is None else normalize_bus_id(_text(pci.busId))
        device.max_gen = self._call(device, "max_gen", lambda: nvml.nvmlDeviceGetMaxPcieLinkGeneration(h))
        device.max_width = self._call(device, "max_width", lambda: nvml.nvmlDeviceGetMaxPcieLinkWidth(h))
        self._read_numa(device)
        device.static_read = True

    def _read_numa(self, device: _Device) -> None:
        """NVML's NUMA node and CPU affinity of the GPU. nvidia-ml-py releases before
        ``nvmlDeviceGetNumaNodeId`` existed lack the function: unknown, like NotSupported."""
        nvml, h = self.nvml, device.handle
        get_node = getattr(nvml, "nvmlDeviceGetNumaNodeId", None)
        node = None if get_node is None else self._call(device, "numa_node", lambda: get_node(h))
        device.numa_node = int(node) if node is not None and int(node) >= 0 else None
        get_affinity = getattr(nvml, "nvmlDeviceGetCpuAffinity", None)
        words = None
        if get_affinity is not None:
            words = self._call(device, "cpu_affinity", lambda: get_affinity(h, AFFINITY_WORDS))
        device.cpu_affinity = None if words is None else _affinity_cpus(words)

    def _sample_device(self, device: _Device) -> GpuSample:
        if device.handle is None:
            return self._lost(device)
        nvml, h = self.nvml, device.handle
        try:
            if not device.static_read:
                self._read_static(device)
            util = self._call(device, "util", lambda: nvml.nvmlDeviceGetUtilizationRates(h))
            processes = self._processes(device)
            busy = self._util_since_last_tick(device, idle=util is not None and int(util.gpu) == 0 and not processes)
            memory = self._call(device, "memory", lambda: nvml.nvmlDeviceGetMemoryInfo(h))
            tx_window = rx_window = None
            if "pcie_counters" in device.unsupported:
                tx_window = self._throughput(device, "tx", nvml.NVML_PCIE_UTIL_TX_BYTES)
                rx_window = self._throughput(device, "rx", nvml.NVML_PCIE_UTIL_RX_BYTES)
            gen = self._call(device, "gen", lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(h))
            width = self._call(device, "width", lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(h))
            power_mw = self._call(device, "power", lambda: nvml.nvmlDeviceGetPowerUsage(h))
            sm_clock = self._call(device, "sm_clock", lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM))
            mem_clock = self._call(device, "mem_clock", lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM))
        except _GpuLost:
            return self._lost(device)
        return GpuSample(
            index=device.index,
            name=device.name,
            pci_bus_id=device.pci_bus_id,
            uuid=device.uuid,
            util_percent=busy if busy is not None else None if util is None else int(util.gpu),
            mem_util_percent=None if util is None else int(util.memory),
            mem_used_bytes=None if memory is None else int(memory.used),
            mem_total_bytes=None if memory is None else int(memory.total),
            pcie_tx_bytes_total=None,
            pcie_rx_bytes_total=None,
            pcie_tx_window_bytes_per_s=tx_window,
            pcie_rx_window_bytes_per_s=rx_window,
            pcie_link=PcieLink(gen=gen, width=width, max_gen=device.max_gen, max_width=device.max_width),
            power_w=None if power_mw is None else power_mw / 1000.0,
            sm_clock_mhz=sm_clock,
            mem_clock_mhz=mem_clock,
            processes=processes,
        )

    def _util_since_last_tick(self, device: _Device, idle: bool = False) -> int | None:
        """The mean of the GPU-utilisation samples NVML took since the last look (the last
        second of them at the first); None where the call is refused, nothing is new, or the
        GPU looks ``idle`` and its samples at the last look were all 0% (read again every
        ``IDLE_UTIL_EVERY`` ticks)."""
        if idle and device.util_quiet and device.util_skipped < IDLE_UTIL_EVERY - 1:
            device.util_skipped += 1
            return None
        device.util_skipped = 0
        nvml, h, since = self.nvml, device.handle, device.util_seen_us
        answer = self._call(
            device, "util_samples", lambda: nvml.nvmlDeviceGetSamples(h, nvml.NVML_GPU_UTILIZATION_SAMPLES, since)
        )
        if not answer:
            return None
        kind, samples = answer
        member = _VALUE_FIELDS.get(int(kind), ("uiVal", 32))[0]
        read = [(int(x.timeStamp), float(getattr(x.sampleValue, member))) for x in samples]
        if not read:
            return None
        newest = max(stamp for stamp, _ in read)
        floor = since if since else newest - FIRST_UTIL_WINDOW_US
        values = [value for stamp, value in read if stamp > floor]
        device.util_seen_us = max(since, newest)
        device.util_quiet = not any(values)
        return round(sum(values) / len(values)) if values else None

    def _lost(self, device: _Device) -> GpuSample:
        return GpuSample(
            index=device.index,
            name=device.name,
            pci_bus_id=device.pci_bus_id,
            uuid=device.uuid,
            util_percent=None,
            mem_util_percent=None,
            mem_used_bytes=None,
            mem_total_bytes=None,
            pcie_tx_bytes_total=None,
            pcie_rx_bytes_total=None,
            pcie_tx_window_bytes_per_s=None,
            pcie_rx_window_bytes_per_s=None,
            pcie_link=PcieLink(None, None, device.max_gen, device.max_width),
            power_w=None,
            sm_clock_mhz=None,
            mem_clock_mhz=None,
            processes=(),
            lost=True,
        )

    def _pcie_counters(self, device: _Device) -> list[_Counter | None]:
        """TX and RX byte counters; [] where NVML does not support them (the caller then
        falls back to the throughput call)."""
        nvml, h = self.nvml, device.handle
        values = self._call(
            device,
            "pcie_counters",
            lambda: nvml.nvmlDeviceGetFieldValues(h, [FI_PCIE_COUNT_TX_BYTES, FI_PCIE_COUNT_RX_BYTES]),
        )
        if values is None:
            return []
        now = time.monotonic()
        result: list[_Counter | None] = []
        for value in list(values)[:2]:
            if getattr(value, "nvmlReturn", 1) != 0:
                result.append(None)
                continue
            member, bits = _VALUE_FIELDS.get(int(getattr(value, "valueType", 3)), ("ullVal", 64))
            stamp_us = int(getattr(value, "timestamp", 0) or 0)
            result.append(_Counter(int(getattr(value.value, member)), bits, stamp_us / 1e6 if stamp_us else now))
        while len(result) < 2:
            result.append(None)
        if result == [None, None]:
            device.unsupported.add("pcie_counters")  # per-field NotSupported: use the fallback
            return []
        return result

    def _throughput(self, device: _Device, key: str, counter: int) -> float | None:
        nvml, h = self.nvml, device.handle
        kib_per_s = self._call(device, f"throughput_{key}", lambda: nvml.nvmlDeviceGetPcieThroughput(h, counter))
        return None if kib_per_s is None else float(kib_per_s) * 1024.0

    def _processes(self, device: _Device) -> tuple[GpuProcess, ...]:
        nvml, h = self.nvml, device.handle
        found: dict[int, int | None] = {}
        for key, fn in (
            ("compute_procs", nvml.nvmlDeviceGetComputeRunningProcesses),
            ("graphics_procs", nvml.nvmlDeviceGetGraphicsRunningProcesses),
        ):
            procs: list[Any] | None = self._call(device, key, partial(fn, h))
            for proc in procs or ():
                used = getattr(proc, "usedGpuMemory", None)
                # NVML reports "not available" memory as None or as a huge sentinel.
                if used is not None and (used < 0 or used >= 1 << 63):
                    used = None
                if int(proc.pid) not in found or found[int(proc.pid)] is None:
                    found[int(proc.pid)] = None if used is None else int(used)
        return tuple(GpuProcess(pid, used) for pid, used in sorted(found.items()))


def _window_rate(before: _Counter | None, after: _Counter | None) -> float | None:
    """Bytes per second between two readings of one counter, modulo its width."""
    if before is None or after is None or before.bits != after.bits:
        return None
    seconds = after.timestamp_s - before.timestamp_s
    if seconds <= 0:
        return None
    return ((after.value - before.value) % (1 << after.bits)) / seconds


def _affinity_cpus(words: Any) -> CpuSet | None:
    """CPU ids of ``nvmlDeviceGetCpuAffinity``'s 64-bit words (word 0 holds CPUs 0-63);
    None when no CPU is set (NVML knows no locality)."""
    cpus: set[int] = set()
    for i, word in enumerate(list(words)[:AFFINITY_WORDS]):
        value = int(word)
        cpus.update(64 * i + bit for bit in range(value.bit_length()) if value >> bit & 1)
    return frozenset(cpus) or None
