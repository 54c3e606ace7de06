"""Ranks in the NUMA lab's guest: ``plan``, ``exec`` and ``audit`` against one GPU per node
(injected: ``bench/numa/lab_gpus.py``), with processes the guest's kernel places
(``python -m bench.numa.lab_checks ranks``, on the four-node shape).

* ``plan``: on the live guest with the GPUs on its PCI bus, on a recorded tree of the same
  machine (``--root``), and for half the GPUs (``--gpus``).
* ``launch``: each rank started with the plan's own ``numactl`` line, and with ``affmon exec
  --from-env`` (``LOCAL_RANK``, ``CUDA_VISIBLE_DEVICES``); each writes 32 MiB and says its
  mask and where its pages are (numa_maps).
* ``audit``: ranks started with ``numactl --cpunodebind=N --membind=N`` (the node of their
  GPU) under this process as launcher, audited; then one rank moved to the next rank's
  node, audited again.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.numa.lab_gpus import LabGpu, gpus_per_node, mount_pci_gpus, recorded_tree, unmount_pci

NODE_DIR = Path("/sys/devices/system/node")
# What a launched rank runs: its mask, then 32 MiB written and where its anonymous memory is.
PROBE = """
import json, mmap, os, re
size = 32 << 20
area = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # private: "anon=" in numa_maps
area.write(b"\\1" * size)
nodes = {}
for line in open("/proc/self/numa_maps"):
    if " anon=" not in line or " file=" in line:
        continue  # anonymous memory only: the shared libraries' pages sit where first read
    for node, pages in re.findall(r" N(\\d+)=(\\d+)", line):
        nodes[node] = nodes.get(node, 0) + int(pages) * 4096
mask = sorted(os.sched_getaffinity(0))
print(json.dumps({"mask": mask, "numa_maps": nodes}))
"""
SLEEPER = "import time; time.sleep(900)"


def cpu_nodes() -> dict[int, str]:
    nodes = {}
    for path in sorted(NODE_DIR.glob("node[0-9]*")):
        cpus = (path / "cpulist").read_text().strip()
        if cpus:
            nodes[int(path.name.removeprefix("node"))] = cpus
    return nodes


def _rank_env(local_rank: int, gpus: list[LabGpu]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "CUDA_VISIBLE_DEVICES")}
    env["LOCAL_RANK"] = str(local_rank)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(gpus)))
    return env


def _probe(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    started = time.monotonic()
    run = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    said: dict[str, Any] = {"argv": argv, "rc": run.returncode, "stderr": run.stderr[-1000:]}
    said["seconds"] = round(time.monotonic() - started, 2)
    if run.returncode == 0 and run.stdout.strip():
        said.update(json.loads(run.stdout.strip().splitlines()[-1]))
    return said


def launch(plan: dict[str, Any], gpus: list[LabGpu]) -> dict[str, Any]:
    """Each rank of ``plan`` by the plan's numactl line, and by ``affmon exec --from-env``."""
    python = [sys.executable, "-S", "-c", PROBE]
    by_numactl, by_exec = [], []
    for local_rank, p in enumerate(plan["plans"]):
        env = _rank_env(local_rank, gpus)
        by_numactl.append(_probe([*shlex.split(p["launch"]["numactl"]), *python], env))
        by_exec.append(_probe([sys.executable, "-m", "affmon", "exec", "--from-env", "--", *python], env))
    return {"numactl": by_numactl, "exec": by_exec}


def audit_round(affmon: Any, gpus: list[LabGpu], nodes: dict[int, str]) -> dict[str, Any]:
    """Ranks on their GPUs' nodes (``numactl --cpunodebind``), started by a shell as their
    launcher, audited; then rank 1 moved onto another rank's node and audited again."""
    visible = ",".join(str(i) for i in range(len(gpus)))
    lines = [
        f"LOCAL_RANK={i} CUDA_VISIBLE_DEVICES={visible} numactl --cpunodebind={g.node} --membind={g.node}"
        f" {shlex.quote(sys.executable)} -S -c {shlex.quote(SLEEPER)} & echo $!"
        for i, g in enumerate(gpus)
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "CUDA_VISIBLE_DEVICES")}
    launcher = subprocess.Popen(["sh", "-c", "\n".join([*lines, "wait"])], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert launcher.stdout is not None
        pids = [int(launcher.stdout.readline()) for _ in gpus]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(_is_python(pid) for pid in pids):
            time.sleep(0.2)
        out: dict[str, Any] = {"launcher": launcher.pid, "pids": pids}
        out["on_plan"] = affmon("audit", "--pid", str(launcher.pid), "--json")
        moved_to = sorted(nodes)[2 % len(nodes)]
        os.sched_setaffinity(pids[1], _cpus(nodes[moved_to]))
        out["moved"] = {"rank": 1, "pid": pids[1], "to_node": moved_to, "cpus": nodes[moved_to]}
        out["off_plan"] = affmon("audit", "--pid", str(launcher.pid), "--json")
        return out
    finally:
        subprocess.run(["pkill", "-KILL", "-P", str(launcher.pid)], check=False)
        launcher.kill()
        launcher.wait()


def _is_python(pid: int) -> bool:
    try:
        return b"python" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return False


def _cpus(cpulist: str) -> set[int]:
    out: set[int] = set()
    for part in cpulist.split(","):
        first, _, last = part.partition("-")
        out.update(range(int(first), int(last or first) + 1))
    return out


def ranks_part(affmon: Any, workdir: Path) -> dict[str, Any]:
    nodes = cpu_nodes()
    gpus = gpus_per_node(nodes)
    tree = recorded_tree(workdir / "tree", gpus)
    out: dict[str, Any] = {"gpus": {g.bus_id: g.node for g in gpus}, "node_cpus": nodes}
    out["plan_root"] = affmon("plan", "--root", str(tree), "--json")
    out["plan_root_share"] = affmon("plan", "--root", str(tree), "--gpus", "1,3", "--json")
    mount_pci_gpus(workdir / "pci", gpus)
    try:
        out["plan_live"] = affmon("plan", "--json")
        plan = out["plan_live"]["json"]
        if plan and plan.get("plans"):
            out["launch"] = launch(plan, gpus)
        out["audit"] = audit_round(affmon, gpus, nodes)
    finally:
        unmount_pci()
    return out


__all__ = ["ranks_part"]
