"""``affmon pin`` and ``affmon undo``.

The only writes to the system go through ``affmon.actions.pin``; this module decides what
to ask for and says what happened, in plain words.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from affmon.actions.describe import result_text, undo_text
from affmon.actions.journal import Journal, default_journal_path
from affmon.actions.lease import end_tune, forget_stale, stale_note, tuning
from affmon.actions.migrate import MigrationResult, spans_nodes_message, target_node
from affmon.actions.pin import DryRunAffinity, MoveMemory, PinResult, pin
from affmon.actions.undo import undo
from affmon.collect.identity import resolve_pid, tgid_of
from affmon.collect.numa_maps import read_numa_maps
from affmon.collect.procfs import ProcFs
from affmon.collect.sampler import Selection
from affmon.core.errors import AffmonError, ParseError, SourceError
from affmon.core.model.cpuset import CpuSet, format_cpulist, parse_cpulist
from affmon.core.model.jobs import Job
from affmon.core.model.topology import Topology
from affmon.core.model.window import sample_window
from affmon.core.plan.advice import (
    NOTHING_TO_PLACE,
    job_of,
    movable_occupants,
    placement_cures,
    suggest_for_job,
    unchanged_by,
)
from affmon.core.plan.planner import Suggestion
from affmon.core.rules.base import Finding, RuleInputs
from affmon.core.rules.evaluate import evaluate
from affmon.core.text import term_safe
from affmon.sources.live import live_sources, load_topology

EXIT_FAILED = 1
# ``pin --suggest`` sizes the job over this many intervals of ``--interval``, as many as
# ``diagnose`` takes by default: one fresh second undersized a starved job on the H200.
SUGGEST_INTERVALS = 2


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
            f"{'CPU' if len(missing) == 1 else 'CPUs'} {format_cpulist(missing)} "
            f"{'is offline or does not exist' if len(missing) == 1 else 'are offline or do not exist'} "
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
        "memory": None if result.memory is None else memory_json(result.memory),
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


def memory_json(m: MigrationResult) -> dict[str, Any]:
    """The migration of ``pin --migrate-memory``: resident bytes per node (numa_maps)
    before and after, the pages the kernel could not move, and the one-line message."""
    return {
        "ok": m.ok,
        "attempted": m.attempted,
        "to_node": m.to_node,
        "from_nodes": list(m.from_nodes),
        "bytes_before": None if m.before is None else m.before.to_json(),
        "bytes_after": None if m.after is None else m.after.to_json(),
        "moved_bytes": m.moved_bytes,
        "pages_not_moved": m.pages_not_moved,
        "message": m.message,
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
    _lease_first(pid, force=args.force, dry_run=args.dry_run)
    suggestion = None
    isolate = args.isolate or args.isolate_all
    isolate_candidates: tuple[tuple[int, int], ...] = ()
    if args.suggest or isolate:
        selection = Selection(pids=(pid,), others=True)
        with live_sources(selection) as src:
            window = sample_window(src.sampler.sample, src.topology, args.interval, intervals=SUGGEST_INTERVALS)
        snapshot = window[-1]
        if src.notice and isolate:
            sys.stderr.write(f"affmon: note: {src.notice}\n")
        topology = src.topology
        job = job_of(snapshot, pid)
        if job is None or job.root.sample.start_ticks != target.start_ticks:
            raise SourceError(f"PID {pid} exited while affmon sampled it")
        if args.suggest:
            suggestion = suggest_for_job(job, snapshot, window=window)
            cpus = suggestion.cpus
        else:
            cpus = parse_cpus(args.cpus, topology)
        if isolate:
            starts = {p.sample.pid: p.sample.start_ticks for p in snapshot.processes}
            isolate_candidates = tuple(sorted((o.pid, starts[o.pid]) for o in movable_occupants(snapshot, job, cpus)))
        if suggestion is not None:
            pinned = job if args.with_children else Job(root=job.root, members=(job.root,))
            found = evaluate(snapshot, RuleInputs(topology))
            no_change = unchanged_by(pinned, cpus, [pid for pid, _ in isolate_candidates], topology)
            if no_change is None and not placement_cures(found, job.pid):
                no_change = NOTHING_TO_PLACE
            if no_change is not None and args.migrate_memory and memory_elsewhere(pid, topology, cpus):
                no_change = None  # the masks stay; the pages are what --migrate-memory moves
            if no_change is not None:
                return _no_change(args, pid, suggestion, no_change, [f for f in found if f.pid == job.pid and f.remedy])
    else:
        topology = load_topology()
        cpus = parse_cpus(args.cpus, topology)
    if not cpus:
        raise AffmonError("the suggestion is empty: nothing to pin to")
    if args.migrate_memory and len(topology.cpu_numa_nodes) > 1 and target_node(topology, cpus) is None:
        raise AffmonError(f"--migrate-memory: {spans_nodes_message(topology, cpus)}")
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
        move_memory=MoveMemory(topology) if args.migrate_memory else None,
        include_others=args.include_others,
        skip_refused=args.skip_refused,
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
    if result.memory is not None and not result.memory.ok:
        # The threads are pinned (and journaled); the pages are where they were.
        sys.stderr.write(f"affmon: threads pinned, but {term_safe(result.memory.message)}\n")
        return EXIT_FAILED
    return 0


def memory_elsewhere(pid: int, topology: Topology, cpus: CpuSet) -> bool:
    """Whether ``pid`` has resident memory on a node of CPUs other than the one node of
    ``cpus``: what ``--migrate-memory`` would move, with or without a change of mask."""
    to_node = target_node(topology, cpus)
    if to_node is None or len(topology.cpu_numa_nodes) < 2:
        return False
    memory = read_numa_maps(pid)
    cpu_nodes = {n.id for n in topology.cpu_numa_nodes}
    return memory is not None and any(
        size > 0 for node, size in memory.resident_bytes_by_node.items() if node != to_node and node in cpu_nodes
    )


def _no_change(args: argparse.Namespace, pid: int, suggestion: Suggestion, why: str, found: list[Finding]) -> int:
    """``pin --suggest`` where no placement change can help: the suggestion is what the job
    already has, or none of its findings in ``pin``'s last interval is one a core set cures.
    Nothing is pinned (no journal entry, no ``0-15 -> 0-15``); what to change instead is said,
    from the findings that name a remedy. Exit 0: nothing was asked that could be done."""
    if args.json:
        report = {
            "ok": True,
            "changed": False,
            "no_change": why,
            "remedies": [{"code": f.code, "message": f.message, "remedy": f.remedy} for f in found],
            "suggestion": {"cpus": format_cpulist(suggestion.cpus), "reasons": list(suggestion.reasons)},
            "threads": [],
        }
        print(json.dumps(report, indent=2))
        return 0
    print(f"PID {pid}: {term_safe(why)}; nothing was pinned")
    for f in found:
        print(f"  {f.code}: {term_safe(f.message)}")
        print(f"    what to change: {term_safe(str(f.remedy))}")
    if not found:
        print(f"  `affmon diagnose --pid {pid}` names what limits it")
    return 0


def _lease_first(pid: int, *, force: bool, dry_run: bool) -> None:
    """A job that another affmon is tuning is its: refuse in one line, or with ``--force``
    end that tune first (it puts its trial back). A tune that was killed is named."""
    tuned, holder, stale = tuning(pid)
    note = stale_note(tuned, stale)
    if note is not None:
        sys.stderr.write(f"affmon: note: {term_safe(note)}\n")
    if holder is None:
        return
    if not force or dry_run:
        how = "" if force else ", or pass --force to end that tune first (it puts its trial back)"
        raise AffmonError(f"{holder.sentence(tuned)}: nothing was pinned; wait for it to end{how}")
    sys.stderr.write(f"affmon: {term_safe(holder.sentence(tuned))}: ending that tune first\n")
    end_tune(tuned, holder)


# -- undo ----------------------------------------------------------------------------


def cmd_undo(args: argparse.Namespace) -> int:
    """Nothing to undo is an outcome, not bad input: ``--all`` and a bare ``undo`` (the
    newest pin) then succeed (safe to run again), ``undo PID`` fails (that PID's pin was not
    undone), one line either way."""
    path = default_journal_path()
    if not path.exists():
        sys.stderr.write(f"affmon: nothing to undo: no journal at {path}\n")
        return EXIT_FAILED if args.pid is not None else 0
    pid = None if args.all else args.pid
    if pid is None and not args.all:
        # Bare `affmon undo`, what a pin's last line suggests: the newest pin still in force.
        journal = Journal(path)
        live = [e for e in journal.heads() if e.state in ("pending", "applied")]  # no thread record is needed
        if not live:
            sys.stderr.write(f"affmon: nothing to undo: no pin of affmon is in force (journal {path})\n")
            return 0
        pid = live[-1].pid
    elif pid is not None:
        # A TID names its process, as for pin; a number that names nothing now is kept, so
        # the pin of a process that has exited can still be undone (its isolated neighbours).
        tgid = tgid_of(ProcFs("/"), pid)
        if tgid is not None and tgid != pid:
            sys.stderr.write(f"affmon: {pid} is a thread (TID) of PID {tgid}: using PID {tgid}\n")
            pid = tgid
    result = undo(Journal(path), pid)
    if result.ok and pid is not None:
        forget_stale(pid)  # a killed tune's lease: its masks are back
    if args.json:
        print(
            json.dumps(
                {
                    "ok": result.ok,
                    "entries": list(result.entry_ids),
                    "error": result.error,
                    "threads": [_thread_json(t) for t in result.threads],
                    "notes": list(result.notes),
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
