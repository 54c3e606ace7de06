"""The real NVML gateway on a real GPU. CI has no GPU, so this module is skipped there;
on a GPU machine (``pytest -m gpu``) it checks what NVML reports against sysfs and
against a process that really uses the GPU."""

import os
import subprocess
import sys
import time

import pytest

from affmon.collect.sysfs_topology import read_topology
from affmon.nvml import NvmlGateway

pytestmark = pytest.mark.gpu

_gateway = NvmlGateway()
if not _gateway.open() or not _gateway.sample():
    pytest.skip(f"no GPU here: {_gateway.status}", allow_module_level=True)


def test_every_gpu_reports_its_basics():
    topology = read_topology("/")
    samples = _gateway.sample()
    for s in samples:
        print(s)
        assert not s.lost
        assert s.name and s.pci_bus_id and s.mem_total_bytes
        assert s.pci_bus_id == s.pci_bus_id.lower()
        assert os.path.isdir(f"/sys/bus/pci/devices/{s.pci_bus_id}"), "NVML bus id must map onto sysfs"
        assert topology.gpu(s.pci_bus_id) is not None
        assert s.util_percent is not None and 0 <= s.util_percent <= 100
        link = s.pcie_link
        if link.gen is not None and link.max_gen is not None:
            assert 1 <= link.gen <= link.max_gen


def test_pcie_rate_under_load_and_process_is_listed():
    torch = pytest.importorskip("torch")
    code = (
        "import torch,sys,time\n"
        "x=torch.empty(256<<20,dtype=torch.uint8).pin_memory()\n"
        "y=torch.empty_like(x,device='cuda')\n"
        "print('ready',flush=True)\n"
        "t=time.time()\n"
        "while time.time()-t<6: y.copy_(x,non_blocking=True); torch.cuda.synchronize()\n"
    )
    assert torch.cuda.is_available()
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        second = _gateway.sample()
        s = second[0]
        print("window rates rx/tx B/s:", s.pcie_rx_window_bytes_per_s, s.pcie_tx_window_bytes_per_s)
        # 256 MiB host-to-device copies back to back: the GPU receives well over 1 GB/s
        assert s.pcie_rx_window_bytes_per_s is not None and s.pcie_rx_window_bytes_per_s > 1e9
        pids = {p.pid for g in second for p in g.processes}
        print("pids", pids, "copy process", proc.pid)
        assert proc.pid in pids
    finally:
        proc.kill()
        proc.wait()
