"""``affmon diagnose``: sample, run the rules over every interval, print what held, and
each probed rank's training-loop breakdown over the whole run."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping

from affmon.actions.journal import pinned_masks
from affmon.collect.sampler import Selection
from affmon.commands.report import loop_text
from affmon.core.errors import SourceError
from affmon.core.model.domains import plural
from affmon.core.model.jobs import find_jobs
from affmon.core.model.rates import Snapshot
from affmon.core.model.samples import Sample
from affmon.core.model.topology import Topology
from affmon.core.model.window import widened
from affmon.core.plan.advice import attach_suggestions
from affmon.core.rules import tick
from affmon.core.rules.base import ExpectedMasks, Finding, Severity
from affmon.core.rules.evaluate import exit_status
from affmon.core.rules.loop_report import LoopReport, combined_reports
from affmon.core.text import term_safe
from affmon.sources.live import live_sources


def diagnose_run(
    samples: list[Sample], topology: Topology, masks: ExpectedMasks
) -> tuple[list[Finding], Snapshot, dict[int, LoopReport]]:
    """Debounced findings over consecutive samples (the tick every front end shares), with
    suggestions sized over every interval that raised them; the last interval; and each
    probed process's loop breakdown over all the intervals."""
    state = tick.start(topology)
    window: tuple[Snapshot, ...] = ()
    loops: list[Mapping[int, LoopReport]] = []
    for sample in samples:
        state = tick.advance(state, sample, masks)
        if state.snapshot is not None:
            window = widened(window, state.snapshot)
            loops.append(state.loops)
    if not window:
        raise SourceError("the samples closed no interval: the clock did not move between them")
    last = window[-1]
    return attach_suggestions(list(state.findings), last, window=window), last, combined_reports(loops)


def loops_text(loops: Mapping[int, LoopReport]) -> list[str]:
    """One line per probed process (each rank), after the findings."""
    if not loops:
        return []
    return ["", "training loops over the run:", *(f"  {loop_text(loops[pid])}" for pid in sorted(loops))]


def findings_text(findings: list[Finding], snap: Snapshot, intervals: int, *, partial: bool = False) -> str:
    """Findings grouped by job, worst first, each job's suggested core set once. Messages
    and the planner's sentences quote process names: each line passes through ``term_safe``."""
    all_jobs = find_jobs(snap)
    jobs = [j for j in all_jobs if j.training]
    others = len(all_jobs) - len(jobs)
    also = f", and {others} other watched process{'es' if others != 1 else ''}" if others else ""
    lines = [
        f"watched {len(jobs)} training job{'s' if len(jobs) != 1 else ''} "
        f"({plural(sum(len(j.members) for j in jobs), 'process')}){also} over {plural(intervals, 'interval')}"
    ]
    if not findings:
        seen = " as far as affmon can see (other users' processes are hidden)" if partial else ""
        lines.append(f"no findings: every watched job's CPU placement looks healthy{seen}")
    by_pid: dict[int | None, list[Finding]] = {}
    for f in findings:
        by_pid.setdefault(f.pid, []).append(f)
    for pid, group in by_pid.items():
        lines.append("")
        for f in group:
            who = f"pid {f.pid}" if f.pid is not None else "machine"
            lines.append(f"[{f.severity}] {f.code} {who}: {term_safe(f.message)}")
            if f.remedy:
                lines.append(f"    what to change: {term_safe(f.remedy)}")
            where = f.evidence.get("where")
            if isinstance(where, list) and where:
                lines.append("    where the loop ran (share of the probes that read its Python stack):")
                lines += [f"      {p.get('share', 0):.0%}  {term_safe(str(p.get('place')))}" for p in where[:5]]
        suggestion = next((f.suggestion for f in group if f.suggestion), None)
        if suggestion is None:
            continue
        if suggestion.get("no_change"):
            lines.append(f"    no pin: {term_safe(str(suggestion['no_change']))}")
            continue
        lines.append(f"    suggested CPUs: {term_safe(str(suggestion['cpus']))}")
        for key, mark in (("reasons", "-"), ("warnings", "!")):
            items = suggestion.get(key)
            for item in items if isinstance(items, list) else []:
                lines.append(f"      {mark} {term_safe(str(item))}")
        move_off = suggestion.get("move_off")
        isolate = " --isolate" if isinstance(move_off, list) and move_off else ""
        lines.append(f"    to apply: affmon pin {pid} --suggest --with-children{isolate}")
    return "\n".join(lines)


def cmd_diagnose(args: argparse.Namespace) -> int:
    selection = Selection(pids=tuple(args.pid), others=True)
    with live_sources(selection, loops=True) as src:
        samples = [src.sample()]
        for _ in range(args.samples - 1):
            time.sleep(args.interval)
            samples.append(src.sample())
    findings, last, loops = diagnose_run(samples, src.topology, pinned_masks())
    if args.json:
        report = {
            "findings": [f.to_json() for f in findings],
            "loops": [{"pid": pid, "name": loops[pid].name, **loops[pid].to_json()} for pid in sorted(loops)],
            "nvml": src.nvml_status,
            "notice": src.notice,
        }
        print(json.dumps(report, indent=2))
    else:
        if src.nvml_status and not src.nvml_status.startswith("NVML:"):
            print(term_safe(src.nvml_status))
        if src.notice:
            print(f"note: {src.notice}")
        print(findings_text(findings, last, len(samples) - 1, partial=src.notice is not None))
        for line in loops_text(loops):
            print(line)
    return exit_status(f for f in findings if f.severity >= Severity.WARN)
