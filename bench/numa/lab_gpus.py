"""GPU locality for the NUMA lab's guest, which has no GPU: what is injected, and how.

The guest's nodes, CPUs, pages and masks are its kernel's; its GPUs cannot be. Where a
check needs a GPU's node (``CROSS_NUMA`` judges threads against it; ``plan``, ``exec`` and
``audit`` place ranks by it), the lab gives affmon one, in two places only:

* the PCI bus: a directory of PCI functions (``class`` 0x030200, NVIDIA's vendor id,
  ``numa_node``, ``local_cpulist``) bind-mounted over the guest's ``/sys/bus/pci/devices``
  (``mount_pci_gpus``), or written into a recorded tree that mimics ``/`` with the guest's
  own ``/sys/devices/system`` copied beside it (``recorded_tree``: ``--root``);
* NVML's list of processes on each GPU: ``tests/helpers/fake_pynvml.py`` set as the ``pynvml``
  module of the process that calls affmon (``fake_nvml``), for affmon called in that
  process (``affmon.cli.main``).

Nothing else is pretended: affmon still reads the guest's /proc and /sys.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PCI_DEVICES = Path("/sys/bus/pci/devices")
NVIDIA_VENDOR = "0x10de"
H200_DEVICE = "0x2335"
DISPLAY_3D_CLASS = "0x030200"


@dataclass(frozen=True, slots=True)
class LabGpu:
    """A GPU on ``node`` whose local CPUs are ``local_cpus`` (a cpulist)."""

    bus_id: str  # sysfs spelling, 0000:3b:00.0
    node: int
    local_cpus: str

    @property
    def nvml_bus_id(self) -> str:
        domain, rest = self.bus_id.split(":", 1)
        return f"0000{domain}:{rest}".upper()


def gpus_per_node(node_cpus: Mapping[int, str]) -> list[LabGpu]:
    """One GPU per node with CPUs, in node order, on buses 0x10, 0x20, ..."""
    ordered = sorted(node_cpus.items())
    return [LabGpu(f"0000:{0x10 * (i + 1):02x}:00.0", node, cpus) for i, (node, cpus) in enumerate(ordered)]


def write_pci(directory: Path, gpus: Sequence[LabGpu]) -> None:
    for gpu in gpus:
        base = directory / gpu.bus_id
        base.mkdir(parents=True, exist_ok=True)
        for name, value in (
            ("class", DISPLAY_3D_CLASS),
            ("vendor", NVIDIA_VENDOR),
            ("device", H200_DEVICE),
            ("numa_node", str(gpu.node)),
            ("local_cpulist", gpu.local_cpus),
        ):
            (base / name).write_text(value + "\n")


def mount_pci_gpus(directory: Path, gpus: Sequence[LabGpu]) -> None:
    """Show ``gpus`` (and only them) as the guest's PCI devices, until ``unmount_pci``."""
    write_pci(directory, gpus)
    subprocess.run(["mount", "--bind", str(directory), str(PCI_DEVICES)], check=True)


def unmount_pci() -> None:
    subprocess.run(["umount", str(PCI_DEVICES)], check=False)


def recorded_tree(root: Path, gpus: Sequence[LabGpu]) -> Path:
    """A tree that mimics ``/`` for ``--root``: the guest's ``/sys/devices/system`` (CPUs,
    caches, nodes: regular files copied as the kernel wrote them) and ``gpus`` on its PCI
    bus."""
    system = root / "sys/devices/system"
    for part in ("cpu", "node"):
        _copy_sysfs(Path("/sys/devices/system") / part, system / part)
    write_pci(root / "sys/bus/pci/devices", gpus)
    return root


def _copy_sysfs(source: Path, target: Path, depth: int = 0) -> None:
    """The readable regular files under ``source``; links are left out (sysfs links lead
    back up the tree), and so are the per-CPU subtrees affmon does not read."""
    target.mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        if entry.is_symlink():
            continue
        if entry.is_dir():
            if depth < 4 and entry.name not in ("power", "cpufreq", "cpuidle", "hotplug", "microcode", "memory"):
                _copy_sysfs(entry, target / entry.name, depth + 1)
        elif entry.is_file():
            with contextlib.suppress(OSError):  # a write-only or unreadable attribute
                shutil.copyfile(entry, target / entry.name)


def fake_nvml(gpus: Sequence[LabGpu], pids: Mapping[str, Sequence[int]]) -> Any:
    """``tests/helpers/fake_pynvml.py``'s NVML with ``gpus``, each listing the PIDs ``pids`` gives
    its bus id; set as ``sys.modules["pynvml"]`` so that affmon's gateway opens it."""
    from tests.helpers.fake_pynvml import FakeGpu, FakeNvml

    fake = FakeNvml(
        [FakeGpu(bus_id=g.nvml_bus_id, util=90, pids=[(p, 1 << 30) for p in pids.get(g.bus_id, ())]) for g in gpus]
    )
    sys.modules["pynvml"] = fake
    return fake


__all__ = [
    "LabGpu",
    "fake_nvml",
    "gpus_per_node",
    "mount_pci_gpus",
    "recorded_tree",
    "unmount_pci",
    "write_pci",
]
