"""`affmon` run as a user runs it (its environment merged with ``env``), and a recorded tree
of this machine's CPUs with one GPU: shared by the tests of `plan`, `pin`, `undo` and `exec`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def affmon(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "affmon", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def tiny_gpu_tree(root: Path, cpus: list[int]) -> None:
    """A recorded tree of this machine's CPUs with one NVIDIA GPU local to the last CPU."""
    online = ",".join(map(str, cpus))
    cpu = root / "sys/devices/system/cpu"
    for n in cpus:
        (cpu / f"cpu{n}").mkdir(parents=True)
    (cpu / "online").write_text(online + "\n")
    for n in cpus:
        d = root / f"sys/devices/system/node/node{n}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(f"{n}\n")
    gpu = root / "sys/bus/pci/devices/0000:3b:00.0"
    gpu.mkdir(parents=True)
    values = {"class": "0x030200", "vendor": "0x10de", "numa_node": str(cpus[-1]), "local_cpulist": str(cpus[-1])}
    for name, value in values.items():
        (gpu / name).write_text(value + "\n")
