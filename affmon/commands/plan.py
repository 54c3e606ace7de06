"""``affmon plan`` and ``affmon exec``: a placement for each GPU's ranks, and a command
started on its rank's CPUs."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from affmon.core.cpuset import format_cpulist
from affmon.core.errors import AffmonError
from affmon.core.fmt import term_safe
from affmon.core.planner import MachinePlan, RankPlan, plan_machine
from affmon.core.topology import Topology
from affmon.sources.live import load_topology

# -- plan ----------------------------------------------------------------------------


def launch_lines(p: RankPlan) -> dict[str, str]:
    cpus = format_cpulist(p.cpus)
    numactl = f"numactl --physcpubind={cpus}"
    if p.numa_node is not None:
        numactl += f" --membind={p.numa_node}"
    return {"taskset": f"taskset -c {cpus}", "numactl": numactl}


def plan_json(plan: MachinePlan) -> dict[str, Any]:
    return {
        "plans": [
            {
                "pci_bus_id": p.pci_bus_id,
                "gpu_index": p.gpu_index,
                "rank": p.rank,
                "numa_node": p.numa_node,
                "cpus": format_cpulist(p.cpus),
                "reasons": list(p.reasons),
                "launch": launch_lines(p),
            }
            for p in plan.plans
        ],
        "warnings": list(plan.warnings),
    }


def plan_text(plan: MachinePlan) -> str:
    lines = []
    for w in plan.warnings:
        lines.append(f"! {term_safe(w)}")
    for p in plan.plans:
        gpu = "no GPU" if p.pci_bus_id is None else f"GPU {p.gpu_index} ({term_safe(p.pci_bus_id)})"
        node = "node ?" if p.numa_node is None else f"node {p.numa_node}"
        lines.append(f"{gpu} rank {p.rank}: CPUs {format_cpulist(p.cpus)} ({len(p.cpus)} CPUs, {node})")
        for reason in p.reasons:
            lines.append(f"    - {term_safe(reason)}")
        launch = launch_lines(p)
        lines.append(f"    {launch['taskset']}    or    {launch['numactl']}")
    return "\n".join(lines)


def cmd_plan(args: argparse.Namespace) -> int:
    plan = plan_machine(load_topology(args.root, args.hwloc_xml), args.ranks_per_gpu)
    print(json.dumps(plan_json(plan), indent=2) if args.json else plan_text(plan))
    return 0


# -- exec ----------------------------------------------------------------------------


def gpu_from_env() -> tuple[str, int]:
    """(the CUDA_VISIBLE_DEVICES entry or index this rank uses, local rank)."""
    local = os.environ.get("LOCAL_RANK")
    if local is None or not local.isdigit():
        raise AffmonError("--from-env needs LOCAL_RANK (set by torchrun) to be a number")
    rank = int(local)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return str(rank), rank
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if rank >= len(entries):
        raise AffmonError(f"LOCAL_RANK {rank} but CUDA_VISIBLE_DEVICES lists {len(entries)} GPUs ({visible})")
    return entries[rank], rank


def bus_id_for(entry: str, topology: Topology, use_nvml: bool) -> str:
    """The PCI bus id of a GPU given as an NVML index or a UUID (NVML answers for the live
    machine; without it, or for a recorded tree, NVIDIA GPUs count in PCI bus order)."""
    from affmon.nvml import NvmlGateway

    gateway = NvmlGateway(pcie_window_s=0.0)
    if use_nvml and gateway.open():
        try:
            for device in gateway.devices():
                named = entry == str(device.index) or bool(device.uuid and device.uuid.startswith(entry))
                if named and device.pci_bus_id:
                    return device.pci_bus_id
        finally:
            gateway.close()
    if entry.isdigit():  # no NVML: NVIDIA GPUs in PCI bus order, as NVML enumerates them
        nvidia = [g.pci_bus_id for g in topology.gpus if g.vendor == "nvidia"] or [g.pci_bus_id for g in topology.gpus]
        if int(entry) < len(nvidia):
            return nvidia[int(entry)]
    raise AffmonError(f"no GPU {entry!r} on this machine ({len(topology.gpus)} GPUs found)")


def cmd_exec(args: argparse.Namespace) -> int:
    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise AffmonError("exec needs a command after --, e.g. affmon exec --gpu 0 -- python train.py")
    topology = load_topology(args.root)
    if args.from_env:
        entry, local_rank = gpu_from_env()
        rank = local_rank % args.ranks_per_gpu
    else:
        entry, rank = str(args.gpu), 0
    bus_id = bus_id_for(entry, topology, use_nvml=args.root is None)
    plan = plan_machine(topology, args.ranks_per_gpu)
    mine = next((p for p in plan.plans if p.pci_bus_id == bus_id and p.rank == rank), None)
    if mine is None or not mine.cpus:
        raise AffmonError(f"no plan for GPU {bus_id} rank {rank}")
    if args.dry_run:
        print(f"would pin to CPUs {format_cpulist(mine.cpus)} (GPU {bus_id}, rank {rank}) and run: {' '.join(command)}")
        return 0
    try:
        os.sched_setaffinity(0, mine.cpus)
    except OSError as exc:
        raise AffmonError(
            f"cannot pin to CPUs {format_cpulist(mine.cpus)}: {exc.strerror} (outside this process's cpuset?)"
        ) from None
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        sys.stderr.write(f"affmon: cannot run {command[0]}: {exc.strerror}\n")
        return 127
    return 0  # not reached: execvp replaced this process
