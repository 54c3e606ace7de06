"""A loop window (``affmon.core.model.loop.LoopWindow``) in a recording: the raw counts the loop
probe took over one interval, stored under its process so that a replay computes the
breakdown, the verdict and the findings again from them (with its own thresholds).

``{"tid": ..., "seconds": ..., "run_ns": ..., "wait_ns": ..., "probes": {class: count},
"syscall_readable": ..., "workers": [count, run_ns, wait_ns, domain_cpus, free_cpus] | null,
"spin_probes": ..., "stack_probes": ..., "rate_hz": ...}``, and where the probe read them:
``"frame_probes"``, ``"data_probes"`` (running probes whose Python stack was read, and of
those, in a data loader's frames), ``"frames_unavailable"`` (why no stack was read), and
``"worker_waits": [[pid, tid, state, wchan, syscall], ...]`` (where a stalled pipeline's
worker threads slept, at most ``MAX_WAITS``), ``"top_frames": [[place, count], ...]``
(where the running probes found the loop's Python stack, at most ``TOP_FRAMES``). The key
is absent from recordings made without the probe, and from samples it did not cover. Pure."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from affmon.core.errors import ParseError
from affmon.core.model.loop import BLOCKED_SHARES, RUNNING, TOP_FRAMES, UNKNOWN, LoopWindow, TaskWait, WorkerStats
from affmon.core.recording.json_values import (
    read_bool,
    read_dict,
    read_float,
    read_int,
    read_list,
    read_opt_float,
    read_opt_int,
    read_opt_str,
)

PROBE_CLASSES = frozenset({RUNNING, UNKNOWN, *BLOCKED_SHARES})


def window_to_json(w: LoopWindow) -> dict[str, Any]:
    workers = w.workers
    return {
        "tid": w.tid,
        "seconds": w.seconds,
        "run_ns": w.run_ns,
        "wait_ns": w.wait_ns,
        "probes": dict(sorted(w.probes.items())),
        "syscall_readable": w.syscall_readable,
        "workers": None
        if workers is None
        else [workers.count, workers.run_ns, workers.wait_ns, workers.domain_cpus, workers.free_cpus],
        "spin_probes": w.spin_probes,
        "stack_probes": w.stack_probes,
        "rate_hz": w.rate_hz,
        **({} if w.frame_probes is None else {"frame_probes": w.frame_probes, "data_probes": w.data_probes}),
        **({} if w.frames_unavailable is None else {"frames_unavailable": w.frames_unavailable}),
        **({} if not w.top_frames else {"top_frames": [[label, n] for label, n in w.top_frames]}),
        **({} if w.refused_why is None else {"refused_why": w.refused_why}),
        **(
            {}
            if workers is None or not workers.waits
            else {"worker_waits": [[x.pid, x.tid, x.state, x.wchan, x.syscall] for x in workers.waits]}
        ),
    }


MAX_WAITS = 64  # as the collector reads at most
MAX_TEXT = 200  # a wchan, a system call's name, a reason: short words, never a document


def _text(value: Any, what: str) -> str | None:
    found = read_opt_str(value, what)
    if found is not None and len(found) > MAX_TEXT:
        raise ParseError(f"{what}: longer than {MAX_TEXT} characters")
    return found


def _waits(value: Any) -> tuple[TaskWait, ...]:
    if value is None:
        return ()
    rows = read_list(value, "loop worker_waits")
    if len(rows) > MAX_WAITS:
        raise ParseError(f"loop worker_waits: {len(rows)} rows, at most {MAX_WAITS}")
    found = []
    for raw in rows:
        row = read_list(raw, "loop worker_waits row")
        if len(row) != 5:
            raise ParseError(f"loop worker_waits row has {len(row)} fields, expected 5")
        state = _text(row[2], "loop worker_waits state") or "?"
        found.append(
            TaskWait(
                _count(row[0], "loop worker_waits pid"),
                _count(row[1], "loop worker_waits tid"),
                state[:4],
                _text(row[3], "loop worker_waits wchan"),
                _text(row[4], "loop worker_waits syscall"),
            )
        )
    return tuple(found)


def _count(value: Any, what: str) -> int:
    found = read_int(value, what)
    if found < 0:
        raise ParseError(f"{what}: expected a count, got {found}")
    return found


def _opt_count(value: Any, what: str) -> int | None:
    return None if value is None else _count(value, what)


def _workers(value: Any) -> WorkerStats | None:
    if value is None:
        return None
    row = read_list(value, "loop workers")
    if len(row) != 5:
        raise ParseError(f"loop workers has {len(row)} fields, expected 5")
    free = read_opt_float(row[4], "loop workers free_cpus")
    return WorkerStats(
        _count(row[0], "loop workers count"),
        _count(row[1], "loop workers run_ns"),
        _count(row[2], "loop workers wait_ns"),
        _count(row[3], "loop workers domain_cpus"),
        None if free is None else max(0.0, free),
    )


def window_from_json(d: Any, pid: int) -> LoopWindow:
    """The window of process ``pid``; a malformed one raises ``ParseError``."""
    d = read_dict(d, "loop")
    probes = {}
    for name, count in read_dict(d["probes"], "loop probes").items():
        if name not in PROBE_CLASSES:
            raise ParseError(f"loop probes: unknown class {name[:40]!r}")
        probes[name] = _count(count, f"loop probes {name}")
    rate = read_opt_float(d["rate_hz"], "loop rate_hz")
    if rate is not None and rate <= 0:
        raise ParseError(f"loop rate_hz: expected a positive rate, got {rate:g}")
    return LoopWindow(
        pid=pid,
        tid=_count(d["tid"], "loop tid"),
        seconds=read_float(d["seconds"], "loop seconds"),
        run_ns=read_opt_int(d["run_ns"], "loop run_ns"),
        wait_ns=read_opt_int(d["wait_ns"], "loop wait_ns"),
        probes=probes,
        syscall_readable=read_bool(d["syscall_readable"], "loop syscall_readable"),
        workers=_with_waits(_workers(d["workers"]), _waits(d.get("worker_waits"))),
        spin_probes=_opt_count(d["spin_probes"], "loop spin_probes"),
        stack_probes=_opt_count(d["stack_probes"], "loop stack_probes"),
        rate_hz=rate,
        frame_probes=_opt_count(d.get("frame_probes"), "loop frame_probes"),
        data_probes=_opt_count(d.get("data_probes"), "loop data_probes"),
        frames_unavailable=_text(d.get("frames_unavailable"), "loop frames_unavailable"),
        top_frames=_top_frames(d.get("top_frames")),
        refused_why=_text(d.get("refused_why"), "loop refused_why"),
    )


def _top_frames(value: Any) -> tuple[tuple[str, int], ...]:
    if value is None:
        return ()
    rows = read_list(value, "loop top_frames")
    if len(rows) > TOP_FRAMES:
        raise ParseError(f"loop top_frames: {len(rows)} places, at most {TOP_FRAMES}")
    found = []
    for raw in rows:
        row = read_list(raw, "loop top_frames row")
        if len(row) != 2:
            raise ParseError(f"loop top_frames row has {len(row)} fields, expected 2")
        found.append((_text(row[0], "loop top_frames place") or "?", _count(row[1], "loop top_frames count")))
    return tuple(found)


def _with_waits(workers: WorkerStats | None, waits: tuple[TaskWait, ...]) -> WorkerStats | None:
    if workers is None or not waits:
        return workers
    return replace(workers, waits=waits)
