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

from rich.cells import cell_len, get_character_cell_size
from rich.text import Text
from textual.widget import Widget

from affmon.core import fmt
from affmon.core.model.loop import CPU_WAIT, DATA_WAIT, GPU_WAIT, ON_CPU
from affmon.core.model.samples import NodeMemory
from affmon.core.rules.base import Finding
from affmon.core.text import term_safe
from affmon.tui.model.process_detail import PLOTTED_SHARES, DetailedRow, LoopHistory, TrackedHistory
from affmon.tui.model.views import ProcessHistory, ProcessRow, Series, ThreadRow
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


GIB = 1 << 30
# Evidence shown in words elsewhere: the loop's line and shares (the loop line), the
# advice (its own line), the workers' figures (in the message).
_NOT_AS_EVIDENCE = ("also", "worst_threads", "others", "loop", "line", "advice", "workers", "budget", "stalled")
# What an INPUT_BOUND's advice (``affmon.core.rules.loop.input_advice``) asks for.
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
    words = _ADVICE.get(action, term_safe(str(action))) if isinstance(action, str) else None
    if words is None:
        return None
    workers = advice.get("workers")
    return f"{words} (about {workers})" if isinstance(workers, int) else words


def memory_text(memory: NodeMemory) -> str:
    """Resident memory per node, in GiB: "node 0 12.3 GiB · node 1 0.4 GiB"."""
    by_node = sorted(memory.resident_bytes_by_node.items())
    text = " · ".join(f"node {node} {n / GIB:.1f} GiB" for node, n in by_node) or "none resident"
    return text + (" (numa_maps cut short: a lower bound)" if memory.truncated else "")


def _evidence(value: Any) -> str:
    if isinstance(value, list) and value and all(isinstance(v, dict) and "tid" in v for v in value):
        # CONFINED_THREAD's threads: "1234 main loop on 0 (wait 0.13)"
        return "; ".join(
            term_safe(f"{v['tid']} {v.get('role', '')} on {v.get('mask', '?')} (wait {v.get('wait_ratio')})")
            for v in value[:6]
        )
    if isinstance(value, list) and value and all(isinstance(v, dict) and "busy_threads" in v for v in value):
        # OVERSUBSCRIBED's processes: "1234 main process 15 busy"
        return "; ".join(term_safe(f"{v.get('pid')} {v.get('role', '')} {v['busy_threads']} busy") for v in value[:6])
    if isinstance(value, list) and value and all(isinstance(v, dict) and "place" in v for v in value):
        # LOOP_BOUND's where: "62% train_step (train.py); 20% ..."
        return "; ".join(term_safe(f"{float(v.get('share') or 0):.0%} {v['place']}") for v in value[:5])
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | dict):
        return json.dumps(value, separators=(", ", ": "))  # ensure_ascii: no control character survives
    return term_safe(str(value))


class Hanging(Text):
    """One line of the detail text, and the indent of its continuations: wrapped at the
    pane's width (``hang_wrap``), a line's continuations start under the text after its
    bullet or label ("others: ", "what to change: "), never flush left where they would
    read as lines of their own."""

    __slots__ = ("hang",)

    def __init__(self, hang: int = 2, style: str = "") -> None:
        super().__init__(style=style)
        self.hang = hang


def _cut_points(plain: str, first: int, rest: int) -> list[tuple[int, int]]:
    """Where ``plain`` is cut into lines of at most ``first`` cells, then ``rest``: after
    the last word that fits (spaces at a cut dropped), or within a word longer than a line."""
    cells = [get_character_cell_size(ch) for ch in plain]
    pieces: list[tuple[int, int]] = []
    start, n, room = 0, len(plain), first
    while start < n:
        used, i, cut, in_word = 0, start, None, False
        while i < n and used + cells[i] <= room:
            if plain[i] == " ":
                if in_word:
                    cut = i  # the line may end before this space
                in_word = False
            else:
                in_word = True
            used += cells[i]
            i += 1
        if i >= n or plain[i] == " ":
            end = i
        elif cut is not None:
            end = cut
        else:
            end = max(i, start + 1)  # a word longer than the line: cut within it
        pieces.append((start, end))
        start = end
        while start < n and plain[start] == " ":
            start += 1
        room = rest
    return pieces


def hang_wrap(line: Text, width: int, hang: int) -> list[Text]:
    """``line`` in lines of at most ``width`` cells, broken between words, every line after
    the first indented by ``hang`` cells (2 where ``hang`` would take more than half the
    width), so a continuation never starts flush left."""
    if cell_len(line.plain) <= width:
        return [line]
    indent = hang if 2 * hang <= width else min(2, width // 2)
    out: list[Text] = []
    for start, end in _cut_points(line.plain, width, width - indent):
        piece = line[start:end]
        piece.rstrip()
        if out:
            piece.pad_left(indent)
        out.append(piece)
    return out


class _Lines:
    """The detail text as it is built: a list of ``Hanging`` lines."""

    def __init__(self) -> None:
        self.lines: list[Hanging] = []

    def line(self, hang: int = 2, style: str = "") -> Hanging:
        line = Hanging(hang, style)
        self.lines.append(line)
        return line

    def labelled(self, label: str, label_style: str, value: str, value_style: str = "") -> Hanging:
        """``label`` then ``value``; its continuations start under ``value``."""
        line = self.line(cell_len(label))
        line.append(label, style=label_style)
        line.append(value, style=value_style)
        return line


def _place(out: _Lines, row: DetailedRow, p: Palette) -> None:
    """What placed it, where its memory is, and its training loop: a line each."""
    if row.context:
        out.labelled("placed by ", p.muted, term_safe(row.context))
    if row.memory is not None:
        out.labelled("memory ", p.muted, memory_text(row.memory))
    loop = row.loop
    if loop is not None:
        line = out.labelled("loop ", p.muted, term_safe(loop.line))
        if loop.verdict:
            line.append(f"  {loop.verdict.replace('_', ' ')}", style="bold")


def _finding(out: _Lines, f: Finding, row: ProcessRow, p: Palette) -> None:
    """A finding: its code under a bullet, its message, evidence, advice, the other
    processes it names, what to change and the suggested CPUs, each line hanging under
    the text after its bullet or label."""
    color = p.severity(f.severity)
    out.line()
    line = out.line()
    line.append("● ", style=color)
    line.append(f"{str(f.severity).upper()} {f.code}", style=f"bold {color}")
    if f.pid is not None and f.pid != row.pid:
        line.append(f" (job {f.pid})", style=p.muted)
    out.line().append(f"  {term_safe(f.message)}")
    shown = {k: v for k, v in f.evidence.items() if k not in _NOT_AS_EVIDENCE}
    if shown:
        out.line().append("  " + "  ".join(f"{k}={_evidence(v)}" for k, v in shown.items()), style=p.muted)
    advice = advice_text(f.evidence.get("advice"))
    if advice is not None:
        out.labelled("  advice: ", p.muted, advice, p.success)
    others = f.evidence.get("others")
    if isinstance(others, list) and others:
        names = ", ".join(term_safe(f"{o['pid']} {o['name']} {o['cpu_percent']}% on {o['cpus']}") for o in others[:6])
        more = f" and {len(others) - 6} more" if len(others) > 6 else ""
        out.labelled("  others: ", p.muted, f"{names}{more}", p.muted)
    if f.remedy:
        out.labelled("  what to change: ", p.muted, term_safe(f.remedy), p.success)
    if f.suggestion and f.suggestion.get("no_change"):
        out.labelled("  no pin: ", p.muted, term_safe(str(f.suggestion.get("no_change"))), p.muted)
    elif f.suggestion:
        line = out.line()
        line.append(term_safe(f"  suggested CPUs {f.suggestion.get('cpus')}"), style=p.success)
        line.append(" · press r to review and apply", style=p.muted)


def detail_lines(
    row: ProcessRow | None, findings: Sequence[Finding], p: Palette, measured: bool = True
) -> list[Hanging]:
    """The selected process's detail, line by line (the last one blank), each line to be
    wrapped at the pane's width with ``hang_wrap``."""
    out = _Lines()
    if row is None:
        out.line(style=p.muted).append("select a process (arrows or mouse) to see its threads and findings")
        return out.lines
    line = out.line()
    line.append(f"{row.pid} {row.name}", style="bold")
    role = {"rank": "training rank", "worker": f"worker of {row.job_pid}", "launcher": "launcher"}.get(row.role, "")
    gpus = f" · GPU {','.join(map(str, row.gpus))}" if row.gpus else ""
    line.append(f"  {role}{gpus} · {row.threads} threads · user {row.user or '?'}", style=p.muted)
    if row.cmdline:
        out.line().append(row.cmdline[:300], style=p.muted)
    line = out.labelled("mask ", p.muted, fmt.cpus(row.mask) + (" (threads differ)" if row.mask_varies else ""))
    line.append("   ran on ", style=p.muted)
    line.append(fmt.cpus(row.ran_on_cpus) if row.ran_on_cpus else "-")
    if row.ran_on_cpus:
        line.append(f" (node {fmt.nodes(row.ran_on_nodes)})")
    if isinstance(row, DetailedRow):
        _place(out, row, p)
    if not measured:
        out.line()
        out.line(style=p.muted).append("rates and findings once the first interval closes")
    elif not findings:
        out.line()
        line = out.line()
        line.append("no findings", style=p.success)
        line.append(": its CPU placement looks healthy", style=p.muted)
    for f in findings:
        _finding(out, f, row, p)
    out.line()
    return out.lines


def detail_text(row: ProcessRow | None, findings: Sequence[Finding], p: Palette, measured: bool = True) -> Text:
    """``detail_lines`` as one text, unwrapped."""
    return Text("\n").join(detail_lines(row, findings, p, measured))


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
            lines = detail_lines(row, findings, p, measured)
            if pid != self._pid or (self._kept and self._fits(lines)):
                self._pid = pid
                self._kept = 0  # another process, or a text that fits: from its own height
            self.put(lines)

    def _wrap(self, source: list[Text], width: int) -> list[Text]:
        """Each line at ``width`` with its continuations hanging (``hang_wrap``): at the
        pane's width whenever it changes, since the layout wraps again on a resize."""
        if width <= 0:
            return list(source)
        lines: list[Text] = []
        for line in source:
            lines.extend(hang_wrap(line, width, line.hang if isinstance(line, Hanging) else 2))
        return lines

    def _fits(self, lines: list[Hanging]) -> bool:
        """Whether ``lines`` fit in the pane at the width they are shown at."""
        width = self.size.width
        return width > 0 and len(self._wrap(list(lines), width)) <= self._pane_lines()


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
        busy_t, busy_v = _points(loop.gpu_busy, 100.0)
        # No GPU busy share (no NVML, or no GPU of its own): the title names only the loop.
        plt.title(f"PID {pid}: loop %" + (" and GPU busy %" if busy_t else ""))
        for name, series in zip(PLOTTED_SHARES, loop.shares, strict=True):
            t, v = _points(series, 100.0)
            if t:
                label, color = _PLOT[name]
                plt.plot(t, v, label=label, marker="braille", color=color)
        if busy_t:
            plt.plot(busy_t, busy_v, label="GPU busy", marker="braille", color="yellow")
        plt.ylim(0, 100)
        plt.xlabel("seconds before now")
