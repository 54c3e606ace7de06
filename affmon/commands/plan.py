"""``affmon plan`` and ``affmon exec``: a placement for each GPU's ranks, and a command
started on its rank's CPUs."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
from collections.abc import Mapping
from typing import Any

from affmon.actions.threads import pin_calling_thread
from affmon.core.errors import AffmonError
from affmon.core.model.context import small_int
from affmon.core.model.cpuset import format_cpulist
from affmon.core.plan.planner import MachinePlan, RankPlan, plan_machine
from affmon.core.plan.visible import JobGpus
from affmon.core.rules.threads import thread_budget
from affmon.core.text import cut, term_safe
from affmon.place.planning import CannotPlan, LocalRank, plan_rank
from affmon.sources.job_gpus import find_job_gpus, nvml_gpu_refs
from affmon.sources.live import load_topology

# -- plan ----------------------------------------------------------------------------


def launch_lines(p: RankPlan) -> dict[str, str]:
    cpus = format_cpulist(p.cpus)
    numactl = f"numactl --physcpubind={cpus}"
    if p.numa_node is not None:
        numactl += f" --membind={p.numa_node}"
    return {"taskset": f"taskset -c {cpus}", "numactl": numactl}


def plan_json(plan: MachinePlan, job: JobGpus | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {}
    if job is not None:
        data["gpus"] = {"source": job.source, "pci_bus_ids": None if job.bus_ids is None else list(job.bus_ids)}
    data["plans"] = [
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
    ]
    data["warnings"] = [*(job.warnings if job is not None else ()), *plan.warnings]
    return data


def plan_text(plan: MachinePlan, job: JobGpus | None = None) -> str:
    lines = []
    if job is not None:
        if job.bus_ids is None:
            lines.append(f"GPUs planned: {term_safe(job.source)}")
        else:
            planned = ", ".join(job.bus_ids) or "none"
            lines.append(f"GPUs planned: {term_safe(planned)} (from {term_safe(job.source)})")
    for w in (*(job.warnings if job is not None else ()), *plan.warnings):
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
    """The plan for the job's GPUs: ``--gpus``, else (on the live machine only: the
    environment describes this machine, not a recorded one) ``CUDA_VISIBLE_DEVICES`` or
    the GPUs NVML can open, else every GPU."""
    topology = load_topology(args.root, args.hwloc_xml)
    live = args.root is None and args.hwloc_xml is None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if live else None
    job = find_job_gpus(topology, visible=visible, gpus=args.gpus, use_nvml=live)
    plan = plan_machine(topology, args.ranks_per_gpu, job.bus_ids)
    print(json.dumps(plan_json(plan, job), indent=2) if args.json else plan_text(plan, job))
    return 0


# -- exec ----------------------------------------------------------------------------


def local_rank_from_env() -> int:
    """``LOCAL_RANK`` as torchrun sets it: ASCII digits, at most six (``small_int``)."""
    local = os.environ.get("LOCAL_RANK")
    rank = small_int(local)
    if rank is None:
        shown = "unset" if local is None else f"{term_safe(cut(local, 20))!r}"
        raise CannotPlan(f"--from-env needs LOCAL_RANK (set by torchrun) to be a number; it is {shown}")
    return rank


def exec_plan(args: argparse.Namespace) -> tuple[RankPlan, tuple[str, ...]]:
    """This rank's plan and the warnings said on the way; ``CannotPlan`` when there is none.
    The job's GPUs come from ``CUDA_VISIBLE_DEVICES`` (also with ``--root``: it is the rank's
    own environment) or the GPUs NVML opens; the rank's GPU is entry ``LOCAL_RANK //
    --ranks-per-gpu`` of them (``--from-env``) or GPU ``--gpu`` (NVML's index, else PCI bus
    order): ``affmon.place.planning.plan_rank``, which the in-script API shares."""
    try:
        topology = load_topology(args.root)
    except AffmonError as exc:
        raise CannotPlan(str(exc)) from None
    refs = nvml_gpu_refs() if args.root is None else None
    return plan_rank(
        topology,
        visible=os.environ.get("CUDA_VISIBLE_DEVICES"),
        refs=refs,
        gpu=None if args.from_env else args.gpu,
        local_rank=LocalRank(local_rank_from_env(), "LOCAL_RANK") if args.from_env else None,
        ranks_per_gpu=args.ranks_per_gpu,
    )


# The intra-op pools a training process starts read these: PyTorch's (OpenMP), MKL's.
BUDGET_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def budget_env(cpus: int, workers: int, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The thread budget ``exec`` gives the command it starts (``own_threads.thread_budget``):
    the intra-op pools of the main process get the rank's CPUs less one per DataLoader worker
    (DataLoader sets one thread in each worker itself). A variable the person already set is
    theirs and stays."""
    env = os.environ if environ is None else environ
    threads = thread_budget(cpus, workers).main_threads
    return {name: str(threads) for name in BUDGET_VARIABLES if name not in env}


def budget_text(budget: Mapping[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in budget.items()) + " (its thread budget)"


# CPython ignores these at start-up (a closed pipe is an EPIPE error, a file over RLIMIT_FSIZE
# an EFBIG error, for the interpreter to raise), and execvp keeps an ignored signal
# ignored: without this the command would run with them ignored, and ``yes | head -1``
# in it would print "Broken pipe" where under taskset it ends quietly.
_IGNORED_BY_PYTHON = tuple(getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, name))


def _exec(command: list[str]) -> None:
    """``execvp`` with the signal dispositions a command started by a shell has; put back
    as they were when it fails (affmon goes on to report it)."""
    before = {sig: signal.signal(sig, signal.SIG_DFL) for sig in _IGNORED_BY_PYTHON}
    try:
        os.execvp(command[0], command)
    except BaseException:
        for sig, handler in before.items():
            if handler is not None:  # None: not set from Python, nothing to put back
                signal.signal(sig, handler)
        raise


def cmd_exec(args: argparse.Namespace) -> int:
    """Pin to this rank's plan, then exec the command. A rank that cannot be planned (or
    pinned) still runs, unpinned, after one line on stderr: a launcher wrapper must never
    keep a training job from starting. ``--strict`` makes that an error (exit 2)."""
    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise AffmonError("exec needs a command after --, e.g. affmon exec --gpu 0 -- python train.py")
    shown = shlex.join(command)  # as a shell would run it
    try:
        mine: RankPlan | None
        mine, warnings = exec_plan(args)
        problem = None
    except CannotPlan as exc:
        if args.strict:
            raise
        mine, warnings, problem = None, exc.warnings, str(exc)
    budget = None if mine is None or args.no_thread_budget else budget_env(len(mine.cpus), args.workers)
    if args.dry_run:
        for w in warnings:
            print(f"! {term_safe(w)}")
        if mine is None:
            said = term_safe(problem or "").rstrip(".")
            print(f"cannot plan: {said}. Would run unpinned: {term_safe(shown)}")
        else:
            where = f"GPU {mine.pci_bus_id}, rank {mine.rank}"
            setting = f", set {budget_text(budget)}," if budget else ""
            print(f"would pin to CPUs {format_cpulist(mine.cpus)} ({where}){setting} and run: {term_safe(shown)}")
        return 0
    if mine is not None:
        try:
            got = pin_calling_thread(mine.cpus)
            if got != mine.cpus:
                # The kernel keeps the plan's CPUs that this process's cpuset allows: another
                # machine's plan (--root), or a cpuset narrower than the plan, runs on fewer.
                sys.stderr.write(
                    f"affmon: warning: pinned to CPUs {format_cpulist(got)}, the part of the plan's "
                    f"{format_cpulist(mine.cpus)} that this process's cpuset allows\n"
                )
                if budget:
                    budget = budget_env(len(got), args.workers)
            os.environ.update(budget or {})  # a budget for CPUs it got, not for a plan it could not apply
        except OSError as exc:
            problem = f"cannot pin to CPUs {format_cpulist(mine.cpus)}: {exc.strerror} (outside this process's cpuset?)"
            if args.strict:
                raise AffmonError(problem) from None
    if problem is not None:
        said = term_safe(problem).rstrip(".")
        sys.stderr.write(f"affmon: warning: {said}. Running {term_safe(command[0])} unpinned.\n")
        sys.stderr.flush()
    try:
        _exec(command)
    except OSError as exc:
        sys.stderr.write(f"affmon: cannot run {term_safe(command[0])}: {exc.strerror}\n")
        return 127
    return 0  # not reached: execvp replaced this process
