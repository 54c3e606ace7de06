"""A recorded sysfs tree of an NVIDIA DGX A100 seen from inside a Slurm job, built from
``nvidia-smi topo -m`` of a DGX A100 (tests/fixtures/other/nvsmi-topo__dgx-a100__gengwg-cheatsheets.txt):

* 256 CPUs, core ``c`` = CPUs ``c`` and ``c+128``; NUMA node ``n`` = CPUs ``16n..16n+15``
  and their siblings (NPS4, the "CPU Affinity" column);
* each GPU's NUMA node and local CPUs from the "NUMA Affinity" and "CPU Affinity" columns;
* L3 caches of four cores (the EPYC 7742's CCX: 4 cores share one 16 MB L3);
* the job's cgroup v2 cpuset, by default node 3's CPUs 48-63,176-191 (the Slurm job of
  two GPUs in nvsmi-topo__dgx-a100-slurm-2gpu-job: GPU0 and GPU1, both on node 3).

The file gives no PCI bus ids: the ones used here are stand-ins in GPU index order, so
that PCI bus order is NVML's order as on the real machine.
"""

from __future__ import annotations

import re
from pathlib import Path

NVSMI = Path(__file__).parent.parent / "fixtures" / "other" / "nvsmi-topo__dgx-a100__gengwg-cheatsheets.txt"
BUS_IDS = ["0000:07:00.0", "0000:0f:00.0", "0000:47:00.0", "0000:4e:00.0"]
BUS_IDS += ["0000:87:00.0", "0000:90:00.0", "0000:b7:00.0", "0000:bd:00.0"]
JOB_CPUS = "48-63,176-191"


def gpu_rows() -> list[tuple[int, str, int]]:
    """(GPU index, CPU affinity, NUMA node) of each GPU row of the nvidia-smi table."""
    rows = []
    for line in NVSMI.read_text().splitlines():
        m = re.match(r"GPU(\d+)\t.*\t([\d,-]+)\t(\d+)$", line)
        if m:
            rows.append((int(m.group(1)), m.group(2), int(m.group(3))))
    assert len(rows) == 8, rows
    return rows


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def dgx_a100_tree(root: Path, job_cpus: str | None = JOB_CPUS) -> Path:
    """Write the tree under ``root``; ``job_cpus`` None: no cgroup (the whole machine)."""
    cpu_dir = root / "sys/devices/system/cpu"
    write(cpu_dir / "online", "0-255")
    for cpu in range(256):
        core = cpu % 128
        base = cpu_dir / f"cpu{cpu}"
        write(base / "topology/thread_siblings_list", f"{core},{core + 128}")
        write(base / "topology/physical_package_id", str(core // 64))
        first = core - core % 4
        for name, value in {"level": "3", "type": "Unified"}.items():
            write(base / f"cache/index3/{name}", value)
        write(base / "cache/index3/shared_cpu_list", f"{first}-{first + 3},{first + 128}-{first + 131}")
    for node in range(8):
        lo = 16 * node
        write(root / f"sys/devices/system/node/node{node}/cpulist", f"{lo}-{lo + 15},{lo + 128}-{lo + 143}")
    for index, affinity, node in gpu_rows():
        gpu = root / "sys/bus/pci/devices" / BUS_IDS[index]
        values = {"class": "0x030200", "vendor": "0x10de", "numa_node": str(node), "local_cpulist": affinity}
        for name, value in values.items():
            write(gpu / name, value)
    if job_cpus is not None:
        write(root / "sys/fs/cgroup/cpuset.cpus.effective", "0-255")
        write(root / "sys/fs/cgroup/slurm/job_1/cpuset.cpus.effective", job_cpus)
        write(root / "proc/self/cgroup", "0::/slurm/job_1")
    return root
