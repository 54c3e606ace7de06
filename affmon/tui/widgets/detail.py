"""The detail pane for the selected process: what it is, its findings with their
evidence and the suggested CPUs, its threads, and a history of its wait ratio and CPU.

Rows come escaped from ``views``; a finding's evidence holds raw names (for JSON), so the
evidence shown here passes through ``term_safe``. Every text is a Rich ``Text``, never
markup, so a name such as ``[bold]x`` is shown as it is."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text

from affmon.core import fmt
from affmon.core.findings import Finding
from affmon.tui.model.views import ProcessHistory, ProcessRow, ThreadRow
from affmon.tui.palette import Palette
from affmon.tui.widgets.celltable import CellTable
from affmon.tui.widgets.plot import LazyPlot
from affmon.tui.widgets.processes import wait_style
from affmon.tui.widgets.quiet import QuietStatic

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


def _evidence(value: Any) -> str:
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
        shown = {k: v for k, v in f.evidence.items() if k not in ("also", "worst_threads", "others")}
        if shown:
            out.append("  " + "  ".join(f"{k}={_evidence(v)}" for k, v in shown.items()) + "\n", style=p.muted)
        others = f.evidence.get("others")
        if isinstance(others, list) and others:
            names = ", ".join(
                fmt.term_safe(f"{o['pid']} {o['name']} {o['cpu_percent']}% on {o['cpus']}") for o in others[:6]
            )
            more = f" and {len(others) - 6} more" if len(others) > 6 else ""
            out.append(f"  others: {names}{more}\n", style=p.muted)
        if f.suggestion:
            out.append(fmt.term_safe(f"  suggested CPUs {f.suggestion.get('cpus')}"), style=p.success)
            out.append(" · press r to review and apply\n", style=p.muted)
    return out


class DetailText(QuietStatic):
    _built: tuple[object, ...] | None = None

    def show(self, row: ProcessRow | None, findings: Sequence[Finding], p: Palette, measured: bool = True) -> None:
        inputs = (row, tuple(findings), p, measured)
        if inputs != self._built:  # built again only when what it shows changed
            self._built = inputs
            self.put(detail_text(row, findings, p, measured))


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


class ProcessPlot(LazyPlot[tuple[int | None, ProcessHistory | None]]):
    """The selected process's wait ratio (%) and CPU use (%, 100 = one CPU)."""

    def show(self, pid: int | None, history: Mapping[int, ProcessHistory]) -> None:
        self.put((pid, history.get(pid) if pid is not None else None))

    def draw(self, data: tuple[int | None, ProcessHistory | None]) -> None:
        plt = self.plt
        pid, h = data
        if h is None:
            plt.title("no history (only watched processes keep one)")
            return
        plt.title(f"PID {pid}: wait % and CPU %")
        pairs = [(t, v * 100) for t, v in zip(h.wait_ratio.t_s, h.wait_ratio.values, strict=False) if v is not None]
        if pairs:
            plt.plot([t for t, _ in pairs], [v for _, v in pairs], label="wait %", marker="braille", color="red")
        pairs = [(t, v) for t, v in zip(h.cpu_percent.t_s, h.cpu_percent.values, strict=False) if v is not None]
        if pairs:
            plt.plot(
                [t for t, _ in pairs],
                [v for _, v in pairs],
                label="CPU %",
                yside="right",
                marker="braille",
                color="cyan",
            )
            top = max(100.0, *(v for _, v in pairs))
            plt.ylim(0, top, yside="right")  # type: ignore[arg-type]  # its stub says float; plotext takes "right"
        plt.ylim(0, 100)
        plt.xlabel("seconds")
