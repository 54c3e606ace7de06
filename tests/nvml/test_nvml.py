"""The NVML gateway against a fake pynvml: normal reads, NotSupported, lost GPUs, no NVML."""

import subprocess
import sys
import time

import pytest

from affmon.core.model.rates import make_snapshot
from affmon.core.model.samples import Sample
from affmon.core.model.topology import Gpu, NumaNode, Topology
from affmon.nvml import IDLE_UTIL_EVERY, NvmlGateway
from tests.helpers.fake_pynvml import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_UNINITIALIZED,
    NVML_ERROR_UNKNOWN,
    FakeGpu,
    FakeNvml,
    NVMLError,
)


def gateway(*gpus: FakeGpu) -> NvmlGateway:
    g = NvmlGateway(module=FakeNvml(list(gpus)), pcie_window_s=0.0)
    assert g.open()
    return g


def test_reads_every_field():
    gpu = FakeGpu(pids=[(1234, 5 << 30)], tx_per_read=20_000, rx_per_read=100_000)
    (s,) = gateway(gpu).sample()
    assert s.name == "NVIDIA H200"
    assert s.pci_bus_id == "0000:3b:00.0"  # NVML's spelling turned into sysfs's
    assert (s.util_percent, s.mem_util_percent) == (97, 40)
    # two reads of the counters 20 ms of NVML time apart: 20 kB and 100 kB moved
    assert s.pcie_tx_window_bytes_per_s == pytest.approx(1_000_000)
    assert s.pcie_rx_window_bytes_per_s == pytest.approx(5_000_000)
    assert (s.pcie_tx_bytes_total, s.pcie_rx_bytes_total) == (1_040_000, 5_200_000)  # 64-bit: kept
    assert "throughput" not in gpu.calls  # counters work: the 20 ms fallback is not called
    assert (s.pcie_link.gen, s.pcie_link.width, s.pcie_link.max_gen, s.pcie_link.max_width) == (5, 16, 5, 16)
    assert s.power_w == 450.0
    assert [(p.pid, p.used_memory_bytes) for p in s.processes] == [(1234, 5 << 30)]
    assert not s.lost


def test_32_bit_counters_wrap_inside_the_window_and_are_not_kept():
    # The H200's counters are 32-bit: a window that crosses the wrap still gives the rate.
    gpu = FakeGpu(counter_bits=32, tx_total=(1 << 32) - 100, tx_per_read=700_000, rx_per_read=0)
    (s,) = gateway(gpu).sample()
    assert s.pcie_tx_window_bytes_per_s == pytest.approx(700_000 / 0.02)
    assert s.pcie_rx_window_bytes_per_s == 0
    assert s.pcie_tx_bytes_total is None  # a 32-bit total means nothing across 1 s ticks


def test_window_is_waited_for_in_real_time():
    g = NvmlGateway(module=FakeNvml([FakeGpu()]), pcie_window_s=0.05)
    assert g.open()
    t = time.perf_counter()
    g.sample()
    assert time.perf_counter() - t >= 0.05


def test_pcie_rate_over_the_interval_from_64_bit_totals():
    gpu = FakeGpu()
    g = gateway(gpu)
    first = g.sample()
    gpu.tx_total += 2_000_000
    gpu.rx_total += 8_000_000
    second = g.sample()
    topo = Topology.build(
        source="sysfs",
        online_cpus={0},
        allowed_cpus={0},
        numa_nodes=[NumaNode(0, frozenset({0}))],
        packages=[],
        cores=[],
        l3_groups=[],
        gpus=[Gpu("0000:3b:00.0", "nvidia", None, frozenset({0}))],
    )
    snap = make_snapshot(Sample(10.0, 0, 0, (), first), Sample(12.0, 0, 0, (), second), topo)
    (rates,) = snap.gpus
    assert rates.pcie_tx_bytes_per_s == 1_000_000
    assert rates.pcie_rx_bytes_per_s == 4_000_000
    assert rates.numa_node is None and rates.local_cpus == frozenset({0})


def test_counters_not_supported_fall_back_to_throughput():
    gpu = FakeGpu(fail={"fields": NVML_ERROR_NOT_SUPPORTED})
    g = gateway(gpu)
    (s,) = g.sample()
    assert s.pcie_tx_bytes_total is None
    assert s.pcie_tx_window_bytes_per_s == 2000 * 1024
    assert s.pcie_rx_window_bytes_per_s == 3000 * 1024
    g.sample()
    assert gpu.calls["fields"] == 1  # NotSupported is remembered, never asked again


def test_per_field_not_supported_also_falls_back():
    gpu = FakeGpu(field_fail=NVML_ERROR_NOT_SUPPORTED)
    g = gateway(gpu)
    g.sample()
    (s,) = g.sample()
    assert s.pcie_rx_bytes_total is None and s.pcie_rx_window_bytes_per_s == 3000 * 1024


def test_gpu_lost_while_reading_counters():
    gpu = FakeGpu()
    g = gateway(gpu, FakeGpu(bus_id="00000000:86:00.0"))
    gpu.fail["fields"] = NVML_ERROR_GPU_IS_LOST
    a, b = g.sample()
    assert a.lost and not b.lost


@pytest.mark.parametrize("call", ["util", "memory", "gen", "power", "clock", "procs", "name", "pci"])
@pytest.mark.parametrize("error", [NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_UNKNOWN, NVML_ERROR_UNINITIALIZED])
def test_one_failing_call_leaves_the_rest(call, error):
    (s,) = gateway(FakeGpu(fail={call: error}, pids=[(7, None)])).sample()
    assert not s.lost
    values = {
        "util": s.mem_util_percent,  # GPU utilisation comes from the samples
        "memory": s.mem_used_bytes,
        "gen": s.pcie_link.gen,
        "power": s.power_w,
        "clock": s.sm_clock_mhz,
        "procs": s.processes or None,
        "name": s.name,
        "pci": s.pci_bus_id,
    }
    assert values.pop(call) is None
    assert all(v is not None for v in values.values()), values


def test_lost_gpu_is_marked_and_others_go_on():
    lost = FakeGpu(bus_id="00000000:3B:00.0")
    good = FakeGpu(bus_id="00000000:86:00.0", util=55)
    g = gateway(lost, good)
    g.sample()
    lost.fail["util"] = NVML_ERROR_GPU_IS_LOST
    a, b = g.sample()
    assert a.lost and a.util_percent is None and a.pci_bus_id == "0000:3b:00.0"
    assert not b.lost and b.util_percent == 55


@pytest.mark.parametrize("error", [NVML_ERROR_LIBRARY_NOT_FOUND, NVML_ERROR_DRIVER_NOT_LOADED])
def test_no_driver_means_cpu_only(error):
    g = NvmlGateway(module=FakeNvml([], init_error=error))
    assert not g.open()
    assert "CPU-only" in g.status and "\n" not in g.status
    assert g.sample() == ()


def test_no_package_means_cpu_only(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    g = NvmlGateway()
    assert not g.open()
    assert "nvidia-ml-py" in g.status and "CPU-only" in g.status


def test_real_module_without_driver_is_cpu_only_in_one_line():
    # CI has nvidia-ml-py installed but no driver: the real module must fail softly.
    g = NvmlGateway()
    if g.open():  # a GPU machine: the gateway works and says so
        assert g.status.startswith("NVML:")
        g.close()
    else:
        assert "CPU-only" in g.status and "\n" not in g.status


def test_without_the_driver_library_pynvml_is_never_imported_and_the_words_are_its_own():
    # A fresh interpreter: the library's name made one that no machine has, so this runs the
    # same way with a GPU and without.
    code = (
        "import sys, affmon.nvml as n\n"
        "n.NVML_LIBRARY = 'libaffmon-test-no-such-library.so.1'\n"
        "g = n.NvmlGateway()\n"
        "print(g.open(), 'pynvml' in sys.modules, g.status, sep='|')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    opened, imported, status = out.rstrip("\n").split("|")
    assert (opened, imported) == ("False", "False")
    import pynvml

    words = str(pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    assert status == f"no NVML ({words}); running CPU-only"


def test_unavailable_memory_sentinel_is_unknown():
    (s,) = gateway(FakeGpu(pids=[(9, (1 << 64) - 1)])).sample()
    assert [(p.pid, p.used_memory_bytes) for p in s.processes] == [(9, None)]


# -- GPU utilisation from NVML's samples -------------------------------------------------

T0 = 1_800_000_000_000_000  # an NVML timestamp, us


def test_utilisation_is_the_mean_of_the_samples_since_the_last_tick():
    """The H200's pattern under a load busy 30% of each second (bench/gpu/nvml_util_probe.py):
    samples every 200 ms of 90, 53, 0, 0, 0 while the rates' last period said 0."""
    seconds = [[90, 53, 0, 0, 0], [92, 53, 0, 0, 0]]
    buffer = [(T0 + i * 200_000, v) for i, v in enumerate([0, 0, 0, 0, 0, *seconds[0]])]
    gpu = FakeGpu(util=0, util_samples=buffer)
    g = gateway(gpu)
    (s,) = g.sample()
    assert s.util_percent == round(sum(seconds[0]) / 5)  # first tick: the last second only
    assert s.mem_util_percent == 40  # still the rates'
    gpu.util_samples = buffer + [(T0 + (10 + i) * 200_000, v) for i, v in enumerate(seconds[1])]
    (s,) = g.sample()
    assert s.util_percent == round(sum(seconds[1]) / 5)  # only the samples new since the last tick


def test_no_new_sample_falls_back_to_the_rates_reading():
    gpu = FakeGpu(util=61, util_samples=[(T0, 10), (T0 + 200_000, 30)])
    g = gateway(gpu)
    assert g.sample()[0].util_percent == 20
    (s,) = g.sample()  # a tick shorter than the driver's period: NVML says Not Found
    assert s.util_percent == 61 and not s.lost
    assert gpu.calls["samples"] == 2  # Not Found is not Not Supported: asked again next tick


def test_samples_not_supported_use_the_rates_and_are_not_asked_again():
    gpu = FakeGpu(util=73, fail={"samples": NVML_ERROR_NOT_SUPPORTED})
    g = gateway(gpu)
    assert [g.sample()[0].util_percent for _ in range(3)] == [73, 73, 73]
    assert gpu.calls["samples"] == 1


def test_an_idle_gpu_has_its_samples_read_every_few_ticks_only():
    """Rates at 0%, no process, samples all 0%: the costly samples call (2-2.4 ms of CPU on
    an H100) is made every IDLE_UTIL_EVERY ticks; every tick still reads 0%."""
    gpu = FakeGpu(util=0)
    g = gateway(gpu)
    ticks = 3 * IDLE_UTIL_EVERY
    assert [g.sample()[0].util_percent for _ in range(ticks)] == [0] * ticks
    assert gpu.calls["samples"] == 3
    assert gpu.calls["util"] == ticks  # the cheap reading, every tick


@pytest.mark.parametrize(
    "busy",
    [
        {"util": 0, "pids": [(4242, 1 << 30)]},  # a process on it, between kernels at the rates' last period
        {"util": 12, "pids": []},  # the rates' last period busy
    ],
)
def test_a_gpu_that_does_not_look_idle_has_its_samples_read_every_tick(busy):
    gpu = FakeGpu(**busy)
    g = gateway(gpu)
    for _ in range(2 * IDLE_UTIL_EVERY):
        g.sample()
    assert gpu.calls["samples"] == 2 * IDLE_UTIL_EVERY


def test_a_load_nvml_does_not_list_shows_at_the_next_read_and_is_then_read_every_tick():
    """Another container's job: no process NVML can name, the rates' last period 0%, its
    samples busy 30% of each second. It shows within IDLE_UTIL_EVERY ticks, as the mean of
    the ticks since the last read, and from then on every tick."""
    period = 200_000  # us: the H200's and H100's samples
    per_tick = 1_000_000 // period
    samples = [(T0 + i * period, 0) for i in range(per_tick)]
    gpu = FakeGpu(util=0, util_samples=samples)
    g = gateway(gpu)

    def tick(values: list[int]) -> int | None:
        start = samples[-1][0]
        samples.extend((start + (i + 1) * period, v) for i, v in enumerate(values))
        return g.sample()[0].util_percent

    assert g.sample()[0].util_percent == 0  # a read: all 0%
    shown = [tick([0] * per_tick), tick([90, 53, 0, 0, 0])]  # skipped, skipped: the rates' 0%
    assert shown == [0, 0] and gpu.calls["samples"] == 1
    read_at = None
    for n in range(IDLE_UTIL_EVERY):
        value = tick([90, 53, 0, 0, 0])
        if gpu.calls["samples"] == 2:
            read_at, shown_then = n, value
            break
    assert read_at is not None, "the hidden load was never read"
    busy_ticks = read_at + 2  # the busy seconds since the read that found all 0%
    assert shown_then == round(143 * busy_ticks / (per_tick * (busy_ticks + 1)))  # the mean since that read
    for n in range(3):
        assert tick([92, 53, 0, 0, 0]) == 29
        assert gpu.calls["samples"] == 3 + n


# -- NUMA node and CPU affinity -------------------------------------------------------


class NumaFakeNvml(FakeNvml):
    """The fake with NVML's NUMA calls: ``numa`` maps a GPU's bus id to what
    nvmlDeviceGetNumaNodeId answers (an int, or an NVML error code as ``("error", code)``),
    ``affinity`` to the CPUs nvmlDeviceGetCpuAffinity sets."""

    def __init__(self, gpus, numa, affinity):
        super().__init__(gpus)
        self.numa = numa
        self.affinity = affinity

    def nvmlDeviceGetNumaNodeId(self, h):
        answer = self.numa[self._gpu(h, "numa").bus_id]
        if isinstance(answer, tuple):
            raise NVMLError(answer[1])
        return answer

    def nvmlDeviceGetCpuAffinity(self, h, words):
        cpus = self.affinity[self._gpu(h, "affinity").bus_id]
        return [sum(1 << (c - 64 * i) for c in cpus if 64 * i <= c < 64 * (i + 1)) for i in range(words)]


def grace_hopper_pair() -> Topology:
    """Two Grace CPUs (nodes 0 and 1, 72 CPUs each) and their GPUs' memory nodes 2 and 10,
    as sysfs reads them; the GPUs' PCI numa_node is their Grace's."""
    return Topology.build(
        source="test",
        online_cpus=range(144),
        allowed_cpus=range(144),
        numa_nodes=[
            NumaNode(0, frozenset(range(72))),
            NumaNode(1, frozenset(range(72, 144))),
            NumaNode(2, frozenset(), memory_only=True),
            NumaNode(10, frozenset(), memory_only=True),
        ],
        packages=[],
        cores=[],
        l3_groups=[],
        gpus=[
            Gpu("0009:01:00.0", "nvidia", 0, frozenset(range(72))),
            Gpu("0019:01:00.0", "nvidia", 1, frozenset(range(72, 144))),
        ],
    )


GH_BUSES = ("00000009:01:00.0", "00000019:01:00.0")


def numa_gateway(numa, affinity, bus_ids=GH_BUSES):
    nvml = NumaFakeNvml([FakeGpu(bus_id=b) for b in bus_ids], numa, affinity)
    g = NvmlGateway(module=nvml, pcie_window_s=0.0)
    assert g.open()
    return g


def test_nvml_memory_node_falls_back_to_the_gpus_cpu_affinity():
    # Grace Hopper: NVML names each GPU's own memory node, which has no CPUs.
    g = numa_gateway(
        {GH_BUSES[0]: 2, GH_BUSES[1]: 10},
        {GH_BUSES[0]: range(72), GH_BUSES[1]: range(72, 144)},
    )
    topo = grace_hopper_pair()
    devices = g.devices()
    assert [(d.numa_node, d.cpu_affinity) for d in devices] == [
        (2, frozenset(range(72))),
        (10, frozenset(range(72, 144))),
    ]
    assert [d.home_node(topo) for d in devices] == [0, 1]


def test_nvml_cpu_node_is_kept_and_affinity_spanning_nodes_is_unknown():
    g = numa_gateway({GH_BUSES[0]: 1, GH_BUSES[1]: 10}, {GH_BUSES[0]: range(72), GH_BUSES[1]: range(60, 80)})
    assert [d.home_node(grace_hopper_pair()) for d in g.devices()] == [1, None]


def test_nvml_without_a_numa_answer_uses_the_topologys_node():
    # x86 drivers answer NotSupported; an old nvidia-ml-py has no such function at all.
    g = numa_gateway(
        {GH_BUSES[0]: ("error", NVML_ERROR_NOT_SUPPORTED), GH_BUSES[1]: -1},
        {GH_BUSES[0]: (), GH_BUSES[1]: range(72, 144)},
    )
    devices = g.devices()
    assert [(d.numa_node, d.cpu_affinity) for d in devices] == [(None, None), (None, frozenset(range(72, 144)))]
    assert [d.home_node(grace_hopper_pair()) for d in devices] == [0, 1]
    old = gateway(FakeGpu(bus_id=GH_BUSES[1]))
    (device,) = old.devices()
    assert (device.numa_node, device.cpu_affinity) == (None, None)
    assert device.home_node(grace_hopper_pair()) == 1
    assert (
        device.home_node(
            Topology.build(
                source="t", online_cpus=(), allowed_cpus=(), numa_nodes=(), packages=(), cores=(), l3_groups=(), gpus=()
            )
        )
        is None
    )


def test_nvml_affinity_beyond_the_first_word():
    bus = ("00000000:3B:00.0",)
    g = numa_gateway({bus[0]: 0}, {bus[0]: (63, 64, 200)}, bus)
    assert g.devices()[0].cpu_affinity == frozenset({63, 64, 200})
