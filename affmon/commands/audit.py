"""``affmon audit``: is every rank of a running multi-rank job on its plan? One sample
of this machine (or the last sample of a recording), each rank's environment read from
``/proc/PID/environ`` where this user may, and one line per rank. Exit status 1 when a
rank is off plan (``affmon.core.plan.audit``), 0 when none is."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from typing import Any

from affmon.collect.procfs import ProcFs
from affmon.collect.sampler import Selection
from affmon.core.errors import ParseError, SourceError
from affmon.core.model.cpuset import CpuSet, format_cpulist
from affmon.core.model.samples import Sample
from affmon.core.model.topology import Topology
from affmon.core.plan.audit import Audit, RankAudit, audit
from affmon.core.plan.audit_ranks import RankEnv, parse_environ
from affmon.core.recording.format import Header, parse_sample_line, read_recording
from affmon.core.text import term_safe
from affmon.sources.live import live_sources
from affmon.sources.stream import read_lines


def read_environments(sample: Sample, root: str = "/") -> dict[tuple[int, int], RankEnv]:
    """The rank variables of every watched process whose environment this user may read
    (its own processes; root: all). A PID whose start time changed since the sample is
    another process now, and is left out."""
    proc = ProcFs(root)
    envs = {}
    for p in sample.processes:
        if not p.watched or p.kernel:
            continue
        data = proc.read(p.pid, "environ")
        if data is None:
            continue
        env = parse_environ(data)
        stat = proc.stat(p.pid)
        if stat is None or stat.start_ticks != p.start_ticks:
            continue
        if env.local_rank is not None or env.visible_devices is not None:
            envs[p.key] = env
    return envs


def last_sample(path: str) -> tuple[Header, Sample]:
    """The header and the last sample of a recording, read one line at a time."""
    lines = read_lines(path)
    try:
        first = next(lines, None)
        name = path.rsplit("/", 1)[-1]
        header, _ = read_recording([] if first is None else [first[1]], name)
        last = None
        for number, text in lines:
            last = parse_sample_line(text, name, number)
    finally:
        lines.close()
    if last is None:
        raise ParseError(f"{name}: no sample after the header; audit needs one")
    return header, last


# -- output ----------------------------------------------------------------------------


def _cpus(cpus: CpuSet | None) -> str | None:
    return None if cpus is None else format_cpulist(cpus)


def rank_json(r: RankAudit) -> dict[str, Any]:
    plan = r.plan
    return {
        "pid": r.pid,
        "start_ticks": r.start_ticks,
        "name": r.name,
        "local_rank": r.local_rank,
        "gpu_entry": r.gpu_entry,
        "gpu_index": r.gpu_index,
        "pci_bus_id": r.pci_bus_id,
        "matched_by": r.matched_by,
        "mask": _cpus(r.mask),
        "footprint": _cpus(r.footprint),
        "workers": list(r.workers),
        "plan": None
        if plan is None
        else {"cpus": format_cpulist(plan.cpus), "slot": plan.rank, "numa_node": plan.numa_node},
        "verdict": r.verdict,
        "problems": [
            {"code": p.code, "message": p.message, "cpus": format_cpulist(p.cpus), "pids": list(p.pids)}
            for p in r.problems
        ],
        "differences": list(r.differences),
        "notes": list(r.notes),
    }


def audit_json(result: Audit, source: str) -> dict[str, Any]:
    return {
        "source": source,
        "ranks_per_gpu": result.ranks_per_gpu,
        "ranks_per_gpu_inferred": result.ranks_per_gpu_inferred,
        "off_plan": result.off_plan,
        "ranks": [rank_json(r) for r in result.ranks],
        "warnings": list(result.warnings),
    }


def _gpu(r: RankAudit) -> str:
    if r.pci_bus_id is not None:
        return f"{r.gpu_index} {term_safe(r.pci_bus_id)}"
    if r.gpu_entry is not None:
        return f"{term_safe(r.gpu_entry)[:12]} (absent)"
    return "?"


def _matching(ranks: Iterable[RankAudit]) -> str:
    ways = sorted({r.matched_by for r in ranks})
    said = {
        "nvml": "NVML's process list",
        "environment": "LOCAL_RANK and CUDA_VISIBLE_DEVICES in /proc/PID/environ",
        "none": "nothing (no GPU found for some)",
    }
    return " and ".join(said[w] for w in ways)


def audit_text(result: Audit, source: str) -> str:
    """A header, one line per rank (what differs at its end), then the verdict."""
    ranks = result.ranks
    how = "given" if not result.ranks_per_gpu_inferred else "the most found on one GPU"
    lines = [
        f"{len(ranks)} rank{'s' if len(ranks) != 1 else ''} ({term_safe(source)}), GPUs matched by "
        f"{_matching(ranks)}; plan: {result.ranks_per_gpu} per GPU ({how})"
    ]
    lines += [f"! {term_safe(w)}" for w in result.warnings]
    lines.append(
        f"{'RANK':>4} {'PID':>8} {'NAME':<15} {'GPU':<17} {'MASK':<14} {'PLAN':<14} {'VERDICT':<10} WHAT DIFFERS"
    )
    for r in ranks:
        said = [f"{p.code}: {p.message}" for p in r.problems] + list(r.differences) + list(r.notes)
        lines.append(
            f"{'-' if r.local_rank is None else r.local_rank:>4} {r.pid:>8} {term_safe(r.name)[:15]:<15} "
            f"{_gpu(r):<17} {_cpus(r.mask) or '?':<14} {(_cpus(r.plan.cpus) if r.plan else '-') or '-':<14} "
            f"{r.verdict:<10} {term_safe(' '.join(said)) or '-'}"
        )
    if result.off_plan:
        lines.append(f"{result.off_plan} of {len(ranks)} ranks off plan")
    else:
        lines.append(f"no rank off plan ({', '.join(sorted({r.verdict for r in ranks}))})")
    return "\n".join(lines)


# -- the command -----------------------------------------------------------------------


def cmd_audit(args: argparse.Namespace) -> int:
    topology: Topology
    notice = None
    if args.audit_replay is not None:
        header, sample = last_sample(args.audit_replay)
        topology, envs, source, nvml = header.topology, {}, f"last sample of {args.audit_replay}", header.nvml
        missing = [pid for pid in args.pid if pid not in {p.pid for p in sample.processes}]
        if missing:
            raise SourceError(f"--pid {missing[0]}: not in the last sample of {args.audit_replay}")
    else:
        with live_sources(Selection(pids=tuple(args.pid))) as src:
            sample = src.sampler.sample()
        topology, envs, source, notice = src.topology, read_environments(sample), "live", src.notice
        nvml = src.nvml_status
    result = audit(sample, topology, envs, ranks_per_gpu=args.ranks_per_gpu, within=tuple(args.pid))
    if not result.ranks:  # nothing to audit: said, exit 0 (as plan does with no GPU to plan for)
        where = "in the trees of --pid" if args.pid else "among the watched processes"
        said = f"nothing to audit: no rank found {where} ({source}): none is on a GPU in NVML's process list" + (
            " or has LOCAL_RANK in a readable environment" if args.audit_replay is None else ""
        )
        if args.json:
            print(json.dumps({**audit_json(result, source), "nvml": nvml, "notice": notice, "said": said}, indent=2))
        else:
            print(term_safe(said))
        return 0
    if args.json:
        print(json.dumps({**audit_json(result, source), "nvml": nvml, "notice": notice}, indent=2))
    else:
        if nvml and not nvml.startswith("NVML:"):  # why GPUs were matched without NVML's process list
            print(term_safe(nvml))
        if notice:
            print(f"note: {term_safe(notice)}")
        print(audit_text(result, source))
    status: int = result.exit_status(args.strict)
    return status
