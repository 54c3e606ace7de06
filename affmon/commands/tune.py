"""``affmon tune PID``: try the planner's candidate placements on the running job, score
each by its GPUs' utilisation (or, CPU-only, by the CPU time its threads get), and keep the
best, journaled like any pin (``affmon undo PID`` restores the masks from before tune).
Ctrl-C (SIGINT), SIGTERM, SIGHUP (the terminal goes away) or SIGQUIT stops at once and
puts everything back. The loop itself is
``affmon.actions.tune``; this module samples, prints and handles the signals."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from affmon.actions.describe import who
from affmon.actions.journal import Journal, default_journal_path
from affmon.actions.tune import Isolation, Row, Tuner, TuneResult
from affmon.collect.identity import resolve_pid
from affmon.collect.procfs import ProcFs
from affmon.collect.sampler import Selection
from affmon.core.errors import AffmonError
from affmon.core.model.cpuset import format_cpulist
from affmon.core.plan.tuning import SCORE_UNITS, ScoreKind
from affmon.core.text import term_safe
from affmon.sources.live import live_sources

EXIT_FAILED = 1
EXIT_INTERRUPTED = 130


def _score_sentence(kind: ScoreKind) -> str:
    if kind == "gpu":
        return "score: the mean of NVML's utilisation samples of the job's GPUs over each window (higher is better)"
    return (
        "score: CPU time the job's threads got per second, in CPUs (no GPU of the job seen by NVML; "
        "higher is better, wait = their run-queue wait share from schedstat)"
    )


def _row_text(row: Row, kind: ScoreKind) -> str:
    unit = "%" if kind == "gpu" else " CPUs"
    score = "" if row.score is None else f"{row.score:.2f}{unit}"
    if row.measures:
        runs = ", ".join(f"{s:.2f}" if (s := m.score(kind)) is not None else "?" for m in row.measures) + (
            f"; wait {row.measures[-1].wait_share:.2f}" if row.measures[-1].wait_share is not None else ""
        )
        score = f"{score} ({runs})"
    names = ", ".join(who(pid) for pid, _ in row.isolate[:4]) + (" …" if len(row.isolate) > 4 else "")
    moved = f", moving {len(row.isolate)} process(es) off: {names}" if row.isolate else ""
    note = f" [{row.note}]" if row.note else ""
    return f"{row.number:>3}  {row.status:<8} {score:<28} {term_safe(row.description)}{moved}{note}"


def result_text(result: TuneResult) -> list[str]:
    lines = [f"tune {result.pid}: {_score_sentence(result.score_kind)}"]
    if result.spread is not None:
        lines.append(
            f"run-to-run spread (the largest difference between two windows of one placement): {result.spread:.2f}"
        )
    lines += [_row_text(r, result.score_kind) for r in result.rows]
    if result.chosen is not None:
        lines.append(f"chosen: row {result.chosen}: {term_safe(result.why)}")
        if result.pinned is not None:
            lines.append(
                f"{applied_text(result)} (journal {result.pinned.journal_id}); `affmon undo {result.pid}` restores "
                "the masks from before tune"
            )
        else:
            lines.append("nothing was changed")
    else:
        lines.append(term_safe(result.why))
    return lines


def applied_text(result: TuneResult) -> str:
    """The placement left in force as applied: per process where it is split, with the
    processes moved off."""
    pinned = result.pinned
    assert pinned is not None and result.chosen is not None
    row = result.rows[result.chosen]
    workers = sorted({t.pid for t in pinned.threads if t.pid != result.pid and t.status != "moved"})
    kids = f"its workers {', '.join(map(str, workers[:8]))}{' …' if len(workers) > 8 else ''}" if workers else ""
    placement = row.placement
    if placement is not None and placement.main_cpus is not None and placement.worker_cpus is not None:
        said = f"pinned main process {result.pid} to CPUs {format_cpulist(placement.main_cpus)}"
        said += f", {kids or 'its workers'} to CPUs {format_cpulist(placement.worker_cpus)}"
    else:
        said = f"pinned {result.pid}{' and ' + kids if kids else ''} to CPUs {format_cpulist(pinned.cpus)}"
    if row.isolate:
        said += f"; moved {len(row.isolate)} other process(es) off: PIDs {', '.join(str(p) for p, _ in row.isolate)}"
    return said


def _row_json(row: Row, kind: ScoreKind) -> dict[str, Any]:
    return {
        "row": row.number,
        "description": row.description,
        "cpus": None if row.cpus is None else format_cpulist(row.cpus),
        "main_cpus": None
        if row.placement is None or row.placement.main_cpus is None
        else format_cpulist(row.placement.main_cpus),
        "worker_cpus": None
        if row.placement is None or row.placement.worker_cpus is None
        else format_cpulist(row.placement.worker_cpus),
        "moves": [pid for pid, _ in row.isolate],
        "status": row.status,
        "score": row.score,
        "scores": [m.score(kind) for m in row.measures],
        "measures": [
            {
                "seconds": m.seconds,
                "gpu_util_percent": m.gpu_util_percent,
                "cpu_cpus": m.cpu_cpus,
                "wait_share": m.wait_share,
            }
            for m in row.measures
        ],
        "note": row.note,
    }


def result_json(result: TuneResult) -> dict[str, Any]:
    return {
        "pid": result.pid,
        "score": result.score_kind,
        "score_unit": SCORE_UNITS[result.score_kind],
        "spread": result.spread,
        "rows": [_row_json(r, result.score_kind) for r in result.rows],
        "chosen": result.chosen,
        "why": result.why,
        "pinned_cpus": None if result.pinned is None else format_cpulist(result.pinned.cpus),
        "journal_id": None if result.pinned is None else result.pinned.journal_id,
        "aborted": result.aborted,
        "error": result.error,
    }


# What ends a tune from outside: Ctrl-C, kill, a terminal that goes away (an ssh connection
# that drops, a tmux window closed), Ctrl-\. Each stops the tuner, which puts its trial back.
ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


@contextmanager
def _abort_on_signals(tuner: Tuner) -> Iterator[None]:
    """The ending signals make the tuner stop and restore, instead of killing it mid-pin."""

    def handler(signum: int, frame: FrameType | None) -> None:
        tuner.abort()

    previous = {s: signal.signal(s, handler) for s in ENDING_SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def cmd_tune(args: argparse.Namespace) -> int:
    target = resolve_pid(ProcFs("/"), args.pid)
    if target.note:
        sys.stderr.write(f"affmon: {target.note}\n")
    isolation: Isolation = "never" if args.no_isolate else "all" if args.isolate_all else "auto"
    with live_sources(Selection(pids=(target.pid,), others=True)) as src:
        if src.notice and isolation != "never":
            sys.stderr.write(f"affmon: note: {src.notice}\n")

        def progress(row: Row) -> None:
            if args.json or args.dry_run:
                return
            if row.status == "running":
                print(f"trying row {row.number}: {term_safe(row.description)}", flush=True)
            elif row.status in ("measured", "failed"):
                print(_row_text(row, tuner.score_kind), flush=True)

        tuner = Tuner(
            target.pid,
            start_ticks=target.start_ticks,
            sampler=src.sampler,
            topology=src.topology,
            journal=Journal(default_journal_path()),
            settle_s=args.settle,
            window_s=args.window,
            with_children=args.with_children,
            isolation=isolation,
            max_candidates=args.max_candidates,
            interval_s=args.interval,
            on_change=progress,
        )
        with _abort_on_signals(tuner):
            try:
                rows = tuner.prepare()
            except AffmonError:
                if tuner.aborted:
                    sys.stderr.write("affmon: tune interrupted before it changed anything\n")
                    return EXIT_INTERRUPTED
                raise
            for note in tuner.notes:
                sys.stderr.write(f"affmon: note: {term_safe(note)}\n")
            if args.dry_run:
                tuner.release()
                return _dry_run(args, rows, tuner.score_kind, target.pid)
            if not args.json:
                print(f"tune {target.pid}: {_score_sentence(tuner.score_kind)}", flush=True)
            try:
                result = tuner.run()
            finally:
                tuner.release()
    if args.json:
        print(json.dumps(result_json(result), indent=2))
    else:
        print("\n".join(result_text(result)))
    if result.aborted:
        sys.stderr.write("affmon: tune interrupted: the masks from before tune started are back\n")
        return EXIT_INTERRUPTED
    if result.error is not None:
        sys.stderr.write(f"affmon: {term_safe(result.error)}\n")
        return EXIT_FAILED
    return 0


def _dry_run(args: argparse.Namespace, rows: tuple[Row, ...], kind: ScoreKind, pid: int) -> int:
    if args.json:
        print(json.dumps({"pid": pid, "score": kind, "rows": [_row_json(r, kind) for r in rows]}, indent=2))
    else:
        print(f"tune {pid} --dry-run: the rows it would measure ({_score_sentence(kind)}); nothing was changed")
        print("\n".join(_row_text(r, kind) for r in rows))
    return 0
