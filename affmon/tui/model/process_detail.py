"""What the detail pane shows of a process beyond its table row: its training loop over the
interval (``LoopReport``) and the history of the loop's shares beside its GPUs' busy share,
its resident memory per NUMA node, and what placed it (Slurm, Kubernetes, torchrun).

``DetailedRow`` and ``TrackedHistory`` extend ``views.ProcessRow`` and
``views.ProcessHistory`` with these fields, so every widget that takes the base types
takes them unchanged; the monitor hands them out only for processes that have any of it
(a loop probed, a context read, numa_maps read: the watched training processes). Values
are kept raw, as the samples hold them; the detail pane escapes what a process wrote
(its environment's job ids, its cgroup path) where it shows them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from affmon.core.model.loop import CPU_WAIT, DATA_WAIT, GPU_WAIT, ON_CPU
from affmon.core.model.samples import NodeMemory, ProcessSample
from affmon.core.rules.loop_report import LoopReport
from affmon.tui.model.views import ProcessHistory, ProcessRow, Series

# The shares the plot draws, in the order of its legend: what the loop waited for first.
PLOTTED_SHARES = (DATA_WAIT, GPU_WAIT, ON_CPU, CPU_WAIT)


@dataclass(frozen=True, slots=True)
class LoopHistory:
    """One point per tick: each share of ``PLOTTED_SHARES`` (0..1, None for a tick without
    a breakdown) and the GPUs' busy share beside them (None where unknown)."""

    shares: tuple[Series, ...]  # in the order of PLOTTED_SHARES
    gpu_busy: Series


@dataclass(frozen=True, slots=True)
class TrackedHistory(ProcessHistory):
    """A watched process's history with its loop's, when the loop probe covers it."""

    loop: LoopHistory | None = None


@dataclass(frozen=True, slots=True)
class DetailedRow(ProcessRow):
    """A process row with what only the detail pane shows. ``context``: ``Context.summary()``
    (None when nothing placed it that affmon could see)."""

    loop: LoopReport | None = None
    context: str | None = None
    memory: NodeMemory | None = None


def detailed(row: ProcessRow, loop: LoopReport | None, sample: ProcessSample | None) -> ProcessRow:
    """``row`` as a ``DetailedRow`` when there is a loop, a context or memory to show;
    ``row`` itself otherwise (most processes)."""
    context = None
    memory = None
    if sample is not None:
        if sample.context is not None and not sample.context.empty:
            context = sample.context.summary() or None
        memory = sample.memory
    if loop is None and context is None and memory is None:
        return row
    base = {f.name: getattr(row, f.name) for f in fields(ProcessRow)}
    return DetailedRow(**base, loop=loop, context=context, memory=memory)


def loop_points(report: LoopReport | None) -> tuple[tuple[float | None, ...], float | None]:
    """One tick's point of each plotted share, and the GPUs' busy share (all None without
    a breakdown: a gap in the plot, never a zero)."""
    b = report.breakdown if report is not None else None
    if b is None:
        return tuple(None for _ in PLOTTED_SHARES), None
    return tuple(b.shares[name] for name in PLOTTED_SHARES), b.gpu_busy
