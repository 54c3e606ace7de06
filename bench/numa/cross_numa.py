"""Start one torchrun rank on the wrong NUMA node: the CPUs of a node that is not its
GPU's, for the multi-GPU proof's ``cross_numa`` placement (bench/gpu/ddp_scenarios.py), from the repository root::

    PYTHONPATH=. torchrun --no-python --nproc-per-node 2 \
        python3 bench/numa/cross_numa.py -- python3 bench/workloads/ddp_job.py

The rank's GPU comes from LOCAL_RANK and CUDA_VISIBLE_DEVICES as ``affmon exec --from-env``
reads them; the node chosen is the next node with CPUs after the GPU's own (in id order,
wrapping). Memory follows by first touch: the job allocates after the pin, from CPUs on
the wrong node. ``--dry-run`` prints the CPUs instead of running; ``--hwloc-xml`` reads a
recorded machine (for tests).
"""

from __future__ import annotations

import argparse
import os
import sys

from affmon.commands.plan import local_rank_from_env
from affmon.core.errors import AffmonError
from affmon.core.model.cpuset import CpuSet, format_cpulist
from affmon.core.model.topology import Topology
from affmon.core.plan.visible import job_gpus
from affmon.sources.job_gpus import nvml_gpu_refs
from affmon.sources.live import load_topology


def wrong_node(topology: Topology, bus_id: str) -> tuple[int, int, CpuSet]:
    """(the GPU's node, the node chosen, its allowed CPUs) for a GPU given by bus id."""
    gpu = topology.gpu(bus_id)
    if gpu is None:
        raise AffmonError(f"no GPU {bus_id} on this machine")
    nodes = [n for n in topology.cpu_numa_nodes if n.cpus & topology.allowed_cpus]
    own = gpu.numa_node
    if own is None and gpu.local_cpus:
        own = next(iter(topology.nodes_of(gpu.local_cpus)), None)
    if own is None:
        raise AffmonError(f"GPU {bus_id}: the firmware does not say which NUMA node it is on")
    others = [n for n in nodes if n.id != own]
    if not others:
        raise AffmonError(f"one NUMA node with CPUs ({len(nodes)} in all): no wrong node to put GPU {bus_id}'s rank on")
    chosen = next((n for n in others if n.id > own), others[0])
    return own, chosen.id, frozenset(chosen.cpus & topology.allowed_cpus)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hwloc-xml", help="read this recorded machine instead of the live one")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    command = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    try:
        if not command and not a.dry_run:
            raise AffmonError("needs a command after --")
        topology = load_topology(hwloc_xml=a.hwloc_xml)
        local_rank = local_rank_from_env()
        refs = nvml_gpu_refs() if a.hwloc_xml is None else None
        job = job_gpus(topology, os.environ.get("CUDA_VISIBLE_DEVICES"), refs)
        found = job.devices[local_rank] if local_rank < len(job.devices) else None
        if found is None:
            raise AffmonError(f"LOCAL_RANK {local_rank}: no such GPU in {job.source}")
        bus_id = found
        own, node, cpus = wrong_node(topology, bus_id)
    except AffmonError as exc:
        sys.stderr.write(f"cross_numa: {exc}\n")
        return 2
    line = f"rank {local_rank}: GPU {bus_id} on node {own}, pinned to node {node} CPUs {format_cpulist(cpus)}"
    print(line, flush=True)
    if a.dry_run:
        return 0
    os.sched_setaffinity(0, cpus)
    os.execvp(command[0], command)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
