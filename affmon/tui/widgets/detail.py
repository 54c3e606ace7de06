"""The detail pane for the selected process: what it is, what placed it (Slurm,
Kubernetes, torchrun), its resident memory per NUMA node, its training loop's breakdown
with the verdict, its findings with their evidence, the advice of an INPUT_BOUND and the
suggested CPUs, its threads, and a history: of its loop's shares beside its GPUs' busy
share when its loop is probed, else of its wait ratio and CPU.

Rows come escaped from ``views``; a finding's evidence holds raw names (for JSON), so the
evidence shown here passes through ``term_safe``. Every text is a Rich ``Text``, never
markup, so a name such as ``[bold]x`` is shown as it is."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text
from textual.widget import Widget

from affmon.core import fmt
from affmon.core.findings import Finding
from affmon.core.loop import CPU_WAIT, DATA_WAIT, GPU_WAIT, ON_CPU
from affmon.core.samples import NodeMemory
from affmon.tui.model.process_detail import PLOTTED_SHARES, DetailedRow, LoopHistory, TrackedHistory
from affmon.tui.model.views import ProcessHistory, ProcessRow, Series, ThreadRow
from affmon.tui.palette import Palette
from affmon.tui.widgets.celltable import CellTable
from affmon.tui.widgets.plot import LazyPlot
from affmon.tui.widgets.processes import wait_style
from affmon.tui.widgets.quiet import QuietStatic, split_lines

THREAD_COLUMNS = (
    ("tid", "TID", 7),
    ("name", "NAME", 14),
    ("psr", "PSR", 3),
    ("mask", "MASK", 9),
    ("cpu", "CPU%", 5),
    ("wait", "WAIT", 4),
    ("sw", "SW/s", 5),
    ("mig", "MIG/s", 5),
)


GIB = 1 << 30
# Evidence shown in words elsewhere: the loop's line and shares (the loop line), the
# advice (its own line), the workers' figures (in the message).
_NOT_AS_EVIDENCE = ("also", "worst_threads", "others", "loop", "line", "advice", "workers", "budget", "stalled")
# What an INPUT_BOUND's advice (``affmon.core.loop_findings.input_advice``) asks for.
_ADVICE = {
    "add_workers": "add DataLoader workers",
    "more_cpus": "give the job more CPUs",
    "move_neighbours": "move the neighbours off the job's CPUs (r, with isolate)",
    "use_workers": "load the data in DataLoader workers",
    "check_pipeline": "look at the input pipeline (storage, a lock, a remote source)",
    "thread_budget": "fewer threads in the job (see OVERSUBSCRIBED)",
    "restore_threads": "give the confined threads the job's CPUs back (r)",
}
_PLOT = {
    DATA_WAIT: ("data", "magenta"),
    GPU_WAIT: ("GPU", "green"),
    ON_CPU: ("CPU", "cyan"),
    CPU_WAIT: ("cpu-wait", "red"),
}


def advice_text(advice: Any) -> str | None:
    """An INPUT_BOUND's ``evidence["advice"]`` in words: "add DataLoader workers (about 8)"."""
    if not isinstance(advice, dict):
        return None
    action = advice.get("action")
    words = _ADVICE.get(action, fmt.term_safe(str(action))) if isinstance(action, str) else None
    if words is None:
        return None
    workers = advice.get("workers")
    return f"{words} (about {workers})" if isinstance(workers, int) else words


def memory_text(memory: NodeMemory) -> str:
    """Resident memory per node, in GiB: "node 0 12.3 GiB · node 1 0.4 GiB"."""
    by_node = sorted(memory.resident_bytes_by_node.items())
    text = " · ".join(f"node {node} {n / GIB:.1f} GiB" for node, n in by_node) or "none resident"
    return text + (" (numa_maps cut short: a lower bound)" if memory.truncated else "")


def _place(out: Text, row: DetailedRow, p: Palette) -> None:
    """What placed it, where its memory is, and its training loop: a line each."""
    if row.context:
        out.append("placed by ", style=p.muted)
        out.append(fmt.term_safe(row.context) + "\n")
    if row.memory is not None:
        out.append("memory ", style=p.muted)
        out.append(memory_text(row.memory) + "\n")
    loop = row.loop
    if loop is not None:
        out.append("loop ", style=p.muted)
        out.append(fmt.term_safe(loop.line))
        if loop.verdict:
            out.append(f"  {loop.verdict.replace('_', ' ')}", style="bold")
        out.append("\n")


def _evidence(value: Any) -> str:
    if isinstance(value, list) and value and all(isinstance(v, dict) and "tid" in v for v in value):
        # CONFINED_THREAD's threads: "1234 main loop on 0 (wait 0.13)"
        return "; ".join(
            fmt.term_safe(f"{v['tid']} {v.get('role', '')} on {v.get('mask', '?')} (wait {v.get('wait_ratio')})")
            for v in value[:6]
        )
    if isinstance(value, list) and value and all(isinstance(v, dict) and "busy_threads" in v for v in value):
        # OVERSUBSCRIBED's processes: "1234 main process 15 busy"
        return "; ".join(
            fmt.term_safe(f"{v.get('pid')} {v.get('role', '')} {v['busy_threads']} busy") for v in value[:6]
        )
    if isinstance(value, list) and value and all(isinstance(v, dict) and "place" in v for v in value):
        # LOOP_BOUND's where: "62% train_step (train.py); 20% ..."
        return "; ".join(fmt.term_safe(f"{float(v.get('share') or 0):.0%} {v['place']}") for v in value[:5])
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | dict):
        return json.dumps(value, separators=(", ", ": "))  # ensure_ascii: no control character survives
    return fmt.term_safe(str(value))


def detail_text(row: ProcessRow | None, findings: Sequence[Finding], p: Palette, measured: bool = True) -> Text:
    if row is None:
        return Text("select a process (arrows or mouse) to see its threads and findings", style=p.muted)
    out = Text()
    out.append(f"{row.pid} {row.name}", style="bold")
    role = {"rank": "training rank", "worker": f"worker of {row.job_pid}", "launcher": "launcher"}.get(row.role, "")
    gpus = f" · GPU {','.join(map(str, row.gpus))}" if row.gpus else ""
    out.append(f"  {role}{gpus} · {row.threads} threads · user {row.user or '?'}\n", style=p.muted)
    if row.cmdline:
        out.append(row.cmdline[:300] + "\n", style=p.muted)
    out.append("mask ", style=p.muted)
    out.append(fmt.cpus(row.mask) + (" (threads differ)" if row.mask_varies else ""))
    out.append("   ran on ", style=p.muted)
    out.append(fmt.cpus(row.ran_on_cpus) if row.ran_on_cpus else "-")
    out.append(f" (node {fmt.nodes(row.ran_on_nodes)})\n" if row.ran_on_cpus else "\n")
    if isinstance(row, DetailedRow):
        _place(out, row, p)
    if not measured:
        out.append("\nrates and findings once the first interval closes\n", style=p.muted)
    elif not findings:
        out.append("\nno findings", style=p.success)
        out.append(": its CPU placement looks healthy\n", style=p.muted)
    for f in findings:
        color = p.severity(f.severity)
        out.append("\n● ", style=color)
        out.append(f"{str(f.severity).upper()} {f.code}", style=f"bold {color}")
        if f.pid is not None and f.pid != row.pid:
            out.append(f" (job {f.pid})", style=p.muted)
        out.append(f"\n  {fmt.term_safe(f.message)}\n")
        shown = {k: v for k, v in f.evidence.items() if k not in _NOT_AS_EVIDENCE}
        if shown:
            out.append("  " + "  ".join(f"{k}={_evidence(v)}" for k, v in shown.items()) + "\n", style=p.muted)
        advice = advice_text(f.evidence.get("advice"))
        if advice is not None:
            out.append("  advice: ", style=p.muted)
            out.append(advice + "\n", style=p.success)
        others = f.evidence.get("others")
        if isinstance(others, list) and others:
            names = ", ".join(
                fmt.term_safe(f"{o['pid']} {o['name']} {o['cpu_percent']}% on {o['cpus']}") for o in others[:6]
            )
            more = f" and {len(others) - 6} more" if len(others) > 6 else ""
            out.append(f"  others: {names}{more}\n", style=p.muted)
        if f.remedy:
            out.append("  what to change: ", style=p.muted)
            out.append(fmt.term_safe(f.remedy) + "\n", style=p.success)
        if f.suggestion and f.suggestion.get("no_change"):
            out.append(fmt.term_safe(f"  no pin: {f.suggestion.get('no_change')}\n"), style=p.muted)
        elif f.suggestion:
            out.append(fmt.term_safe(f"  suggested CPUs {f.suggestion.get('cpus')}"), style=p.success)
            out.append(" · press r to review and apply\n", style=p.muted)
    return out


class DetailText(QuietStatic):
    """The selected process's text. It keeps the lines it once had (``keeps_lines``) only
    while its text overflows its pane: a text that fits leaves no blank lines to scroll to
    below it, and the pane no scroll bar."""

    _built: tuple[object, ...] | None = None
    _pid: int | None = None  # the process shown: another one starts with no lines kept
    keeps_lines = True

    def _pane_lines(self) -> int:
        parent = self.parent
        return parent.size.height if isinstance(parent, Widget) else 0

    def floor_lines(self) -> int:
        """The lines it keeps, or its pane's height (the CSS gives it ``min-height: 100%``
        of the pane), the more of the two."""
        return max(super().floor_lines(), self._pane_lines())

    def show(self, row: ProcessRow | None, findings: Sequence[Finding], p: Palette, measured: bool = True) -> None:
        inputs = (row, tuple(findings), p, measured)
        if inputs != self._built:  # built again only when what it shows changed
            self._built = inputs
            pid = None if row is None else row.pid
            text = detail_text(row, findings, p, measured)
            if pid != self._pid or (self._kept and self._fits(text)):
                self._pid = pid
                self._kept = 0  # another process, or a text that fits: from its own height
            self.put(text)

    def _fits(self, text: Text) -> bool:
        """Whether ``text`` fits in the pane at the width it is shown at."""
        width = self.size.width
        return width > 0 and len(self._wrap(split_lines(text), width)) <= self._pane_lines()


class ThreadTable(CellTable):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="none", zebra_stripes=True, **kwargs)
        self._rows: tuple[ThreadRow, ...] = ()
        self._palette: Palette | None = None

    def on_mount(self) -> None:
        for key, label, width in THREAD_COLUMNS:
            self.add_column(label, width=width, key=key)

    def show(self, rows: Sequence[ThreadRow], p: Palette) -> None:
        """Redraw only what changed. Threads re-sort by CPU% every tick: rows are held by
        position (``CellTable``), and a thread row equal to the one shown at its position
        last tick is not formatted again."""
        rows = tuple(rows)
        if rows == self._rows and p == self._palette:
            return
        self.show_header = bool(rows)  # no selection: no column header beside the placeholder
        old = self._rows if p == self._palette else ()
        shown = self._shown
        cells = [
            shown[i] if i < len(old) and i < len(shown) and old[i] == t else self._cells_of(t, p)
            for i, t in enumerate(rows)
        ]
        self.put_rows(cells)
        self._rows, self._palette = rows, p

    @staticmethod
    def _cells_of(t: ThreadRow, p: Palette) -> tuple[Text, ...]:
        return (
            Text(str(t.tid), justify="right"),
            Text(t.name, no_wrap=True, overflow="ellipsis"),
            Text(fmt.node(t.psr), justify="right"),
            Text(fmt.cpus(t.mask, 9), no_wrap=True),
            Text(fmt.cpu_percent(t.cpu_percent), justify="right"),
            Text(fmt.ratio_percent(t.wait_ratio), justify="right", style=wait_style(t.wait_ratio, p, t.busy)),
            Text(fmt.per_s(t.switches_per_s), justify="right"),
            Text(fmt.per_s(t.migrations_per_s), justify="right"),
        )


def _points(series: Series, scale: float = 1.0) -> tuple[list[float], list[float]]:
    pairs = [(t, v * scale) for t, v in zip(series.t_s, series.values, strict=False) if v is not None]
    return [t for t, _ in pairs], [v for _, v in pairs]


class ProcessPlot(LazyPlot[tuple[int | None, ProcessHistory | None]]):
    """The selected process's history: its training loop's shares (%) beside its GPUs'
    busy share (%) when its loop is probed (``TrackedHistory``), else its wait ratio (%)
    and CPU use (%, 100 = one CPU)."""

    def show(self, pid: int | None, history: Mapping[int, ProcessHistory]) -> None:
        self.put((pid, history.get(pid) if pid is not None else None))

    def draw(self, data: tuple[int | None, ProcessHistory | None]) -> None:
        plt = self.plt
        pid, h = data
        if h is None:
            plt.title("no history (only watched processes keep one)")
            return
        if isinstance(h, TrackedHistory) and h.loop is not None:
            self._draw_loop(pid, h.loop)
            return
        plt.title(f"PID {pid}: wait % and CPU %")
        pairs = [(t, v * 100) for t, v in zip(h.wait_ratio.t_s, h.wait_ratio.values, strict=False) if v is not None]
        if pairs:
            plt.plot(
                [t for t, _ in pairs], [v for _, v in pairs], label="wait % (left axis)", marker="braille", color="red"
            )
        pairs = [(t, v) for t, v in zip(h.cpu_percent.t_s, h.cpu_percent.values, strict=False) if v is not None]
        if pairs:
            plt.plot(
                [t for t, _ in pairs],
                [v for _, v in pairs],
                label="CPU % (right axis)",
                yside="right",
                marker="braille",
                color="cyan",
            )
            top = max(100.0, *(v for _, v in pairs))
            plt.ylim(0, top, yside="right")  # type: ignore[arg-type]  # its stub says float; plotext takes "right"
        plt.ylim(0, 100)
        plt.xlabel("seconds before now")

    def _draw_loop(self, pid: int | None, loop: LoopHistory) -> None:
        plt = self.plt
        plt.title(f"PID {pid}: loop % and GPU busy %")
        for name, series in zip(PLOTTED_SHARES, loop.shares, strict=True):
            t, v = _points(series, 100.0)
            if t:
                label, color = _PLOT[name]
                plt.plot(t, v, label=label, marker="braille", color=color)
        t, v = _points(loop.gpu_busy, 100.0)
        if t:
            plt.plot(t, v, label="GPU busy", marker="braille", color="yellow")
        plt.ylim(0, 100)
        plt.xlabel("seconds before now")
