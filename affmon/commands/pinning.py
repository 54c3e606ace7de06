"""``affmon plan``, ``affmon pin``, ``affmon exec`` and ``affmon undo``.

The only writes to the system go through ``affmon.actions.pin``; this module decides what
to ask for and says what happened, in plain words.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from affmon.actions.describe import result_text, undo_text
from affmon.actions.journal import Journal, default_journal_path
from affmon.actions.pin import DryRunAffinity, PinResult, pin
from affmon.actions.undo import undo
from affmon.collect.identity import resolve_pid, tgid_of
from affmon.collect.procfs import ProcFs
from affmon.collect.sampler import Selection
from affmon.core.advice import job_of, occupants, suggest_for_job
from affmon.core.cpuset import CpuSet, format_cpulist, parse_cpulist
from affmon.core.errors import AffmonError, ParseError, SourceError
from affmon.core.fmt import term_safe
from affmon.core.planner import MachinePlan, RankPlan, Suggestion, plan_machine
from affmon.core.rates import make_snapshot
from affmon.core.topology import Topology
from affmon.sources.live import live_sources, load_topology

EXIT_FAILED = 1


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


# -- pin -----------------------------------------------------------------------------


def parse_cpus(text: str, topology: Topology) -> CpuSet:
    try:
        cpus = parse_cpulist(text)
    except ParseError as exc:
        raise AffmonError(f"--cpus {text!r} is not a CPU list ({exc}); write it like 0-7,16-23") from None
    if not cpus:
        raise AffmonError("--cpus is empty: give at least one CPU")
    missing = cpus - topology.online_cpus
    if missing:
        raise AffmonError(
            f"CPUs {format_cpulist(missing)} are offline or do not exist "
            f"(online: {format_cpulist(topology.online_cpus)})"
        )
    return cpus


def suggestion_text(s: Suggestion) -> list[str]:
    lines = [f"suggested CPUs {format_cpulist(s.cpus)}"]
    lines += [f"  - {term_safe(r)}" for r in s.reasons]
    lines += [f"  ! {term_safe(w)}" for w in s.warnings]
    if s.move_off:
        lines.append(f"  processes on those CPUs: {' '.join(map(str, s.move_off))} (--isolate moves them off)")
    return lines


def pin_json(result: PinResult, suggestion: Suggestion | None) -> dict[str, Any]:
    return {
        "ok": result.ok,
        "dry_run": result.dry_run,
        "cpus": format_cpulist(result.cpus),
        "error": result.error,
        "warning": result.warning,
        "rolled_back": result.rolled_back,
        "journal_id": result.journal_id,
        "suggestion": None
        if suggestion is None
        else {
            "cpus": format_cpulist(suggestion.cpus),
            "move_off": list(suggestion.move_off),
            "reasons": list(suggestion.reasons),
            "warnings": list(suggestion.warnings),
        },
        "threads": [_thread_json(t) for t in result.threads],
    }


def _thread_json(t: Any) -> dict[str, Any]:
    return {
        "pid": t.pid,
        "tid": t.tid,
        "before": None if t.before is None else format_cpulist(t.before),
        "after": None if t.after is None else format_cpulist(t.after),
        "status": t.status,
        "message": t.message,
    }


def cmd_pin(args: argparse.Namespace) -> int:
    target = resolve_pid(ProcFs("/"), args.pid)  # a TID names its process; no such PID: one line, exit 2
    if target.note:
        sys.stderr.write(f"affmon: {target.note}\n")
    pid = target.pid
    suggestion = None
    isolate = args.isolate or args.isolate_all
    isolate_candidates: tuple[tuple[int, int], ...] = ()
    if args.suggest or isolate:
        selection = Selection(pids=(pid,), others=True)
        with live_sources(selection) as src:
            first = src.sampler.sample()
            time.sleep(args.interval)
            snapshot = make_snapshot(first, src.sampler.sample(), src.topology)
        if src.notice and isolate:
            sys.stderr.write(f"affmon: note: {src.notice}\n")
        topology = src.topology
        job = job_of(snapshot, pid)
        if job is None or job.root.sample.start_ticks != target.start_ticks:
            raise SourceError(f"PID {pid} exited while affmon sampled it")
        if args.suggest:
            suggestion = suggest_for_job(job, snapshot)
            cpus = suggestion.cpus
        else:
            cpus = parse_cpus(args.cpus, topology)
        if isolate:
            starts = {p.sample.pid: p.sample.start_ticks for p in snapshot.processes}
            isolate_candidates = tuple(
                sorted((o.pid, starts[o.pid]) for o in occupants(snapshot, job.pids) if o.cpus & cpus)
            )
    else:
        topology = load_topology()
        cpus = parse_cpus(args.cpus, topology)
    if not cpus:
        raise AffmonError("the suggestion is empty: nothing to pin to")
    journal = Journal(default_journal_path())  # a dry run only reads it
    result = pin(
        pid,
        cpus,
        start_ticks=target.start_ticks,
        with_children=args.with_children,
        ops=DryRunAffinity() if args.dry_run else None,
        journal=journal,
        isolate=isolate,
        isolate_candidates=isolate_candidates,
        isolate_all=args.isolate_all,
    )
    if args.json:
        print(json.dumps(pin_json(result, suggestion), indent=2))
    else:
        if suggestion is not None:
            print("\n".join(suggestion_text(suggestion)))
        print("\n".join(result_text(result)))
    if not result.ok:
        sys.stderr.write(f"affmon: {term_safe(str(result.error))}\n")
        return EXIT_FAILED
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


# -- undo ----------------------------------------------------------------------------


def cmd_undo(args: argparse.Namespace) -> int:
    """Nothing to undo is an outcome, not bad input: ``--all`` then succeeds (it is safe to
    run again), ``undo PID`` fails (that PID's pin was not undone), one line either way."""
    path = default_journal_path()
    if not path.exists():
        sys.stderr.write(f"affmon: nothing to undo: no journal at {path}\n")
        return 0 if args.all else EXIT_FAILED
    pid = None if args.all else args.pid
    if pid is not None:
        # A TID names its process, as for pin; a number that names nothing now is kept, so
        # the pin of a process that has exited can still be undone (its isolated neighbours).
        tgid = tgid_of(ProcFs("/"), pid)
        if tgid is not None and tgid != pid:
            sys.stderr.write(f"affmon: {pid} is a thread (TID) of PID {tgid}: using PID {tgid}\n")
            pid = tgid
    result = undo(Journal(path), pid)
    if args.json:
        print(
            json.dumps(
                {
                    "ok": result.ok,
                    "entries": list(result.entry_ids),
                    "error": result.error,
                    "threads": [_thread_json(t) for t in result.threads],
                },
                indent=2,
            )
        )
    else:
        lines = undo_text(result)
        if lines:
            print("\n".join(lines))
    if not result.ok:
        sys.stderr.write(f"affmon: {term_safe(str(result.error))}\n")
        return EXIT_FAILED
    return 0
