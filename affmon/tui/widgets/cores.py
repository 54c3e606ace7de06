"""The core map: every CPU as a cell, grouped by NUMA node and shared cache, showing
which training job ran there in the last interval and how busy it was.

A cell is the CPU id and a bar (▁ to █, how busy; · idle) coloured by who ran there: a
job's colour, on the error colour's background where two jobs or a job and another busy
process shared the CPU (contention), muted for other processes. The CPU id is reversed
where the selected process ran, dimmed outside its mask (or the machine's allowed set),
and underlined where it is local to the selected process's GPU (every GPU's when none is selected).
Before the first interval closes (one sample, no rates) the bars are left blank.

The legend shows each style on the words it explains ("ran here" reversed, "outside mask"
dimmed, "GPU-local" underlined): a sample digit such as "7" read as a count of CPUs."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from affmon.core import fmt
from affmon.core.cpuset import CpuSet
from affmon.tui.model.views import CoreCell, CoreGroup, ProcessRow
from affmon.tui.palette import Palette
from affmon.tui.widgets.quiet import QuietStatic

LEVELS = "▁▂▃▄▅▆▇█"
CELL_WIDTH = 6  # "  12▇ "


def level(busy_percent: float) -> str:
    if busy_percent < 1.0:
        return "·"
    return LEVELS[min(len(LEVELS) - 1, int(busy_percent / 100 * len(LEVELS)))]


def cell_text(
    c: CoreCell,
    p: Palette,
    job_colors: dict[int, str],
    selected: ProcessRow | None,
    selected_cpus: CpuSet,
    local_gpus: set[int] | None,
    measured: bool = True,
) -> Text:
    mask = selected.mask if selected is not None and selected.mask is not None else None
    allowed = c.allowed and (mask is None or c.cpu in mask)
    style = p.foreground if allowed else p.disabled
    if local_gpus is None or set(c.gpu_local) & local_gpus:
        style += " underline" if c.gpu_local else ""
    if c.cpu in selected_cpus:
        style += " reverse bold"
    text = Text(no_wrap=True)
    text.append(f"{c.cpu:>4}", style=style)
    glyph = level(c.busy_percent) if measured else " "
    if c.contended:
        color = p.shared
    elif c.job_pid is not None:
        color = job_colors.get(c.job_pid, p.foreground)
    else:
        color = p.muted
    text.append(glyph, style=color)
    text.append(" ")
    return text


def group_title(g: CoreGroup) -> str:
    node = "node ?" if g.numa_node is None else f"node {g.numa_node}"
    cache = f"L{g.cache_level}" if g.cache_level is not None else "no shared cache"
    cpus = fmt.cpus([c.cpu for c in g.cells])
    gpus = sorted({i for c in g.cells for i in c.gpu_local})
    local = f" · GPU{','.join(map(str, gpus))} local" if gpus else ""
    return f"{node} · {cache} · CPUs {cpus}{local}"


def core_map_lines(
    groups: Sequence[CoreGroup],
    p: Palette,
    job_colors: dict[int, str],
    selected: ProcessRow | None,
    width: int,
    measured: bool = True,
    training: frozenset[int] | None = None,
) -> list[Text]:
    """The map line by line (each cut with an ellipsis where the pane is narrower). The
    legend calls a root in ``training`` a job, any other a process (a watched process that
    is not training, as ``diagnose`` and the table say); None: every root a job."""
    per_line = max(1, width // CELL_WIDTH)
    selected_cpus = selected.ran_on_cpus if selected is not None else frozenset()
    local = set(selected.gpus) if selected is not None and selected.gpus else None
    lines: list[Text] = []

    def new_line() -> Text:
        line = Text(no_wrap=True, overflow="ellipsis")
        lines.append(line)
        return line

    for gi, g in enumerate(groups):
        if gi:
            new_line()
        new_line().append(group_title(g), style=f"bold {p.muted}")
        line = lines[-1]
        for i, c in enumerate(g.cells):
            if i % per_line == 0:
                line = new_line()
            line.append_text(cell_text(c, p, job_colors, selected, selected_cpus, local, measured))
    new_line()
    legend: list[list[tuple[str, str]]] = [
        [("▆", color), (f" {'job' if training is None or pid in training else 'process'} {pid}", p.muted)]
        for pid, color in job_colors.items()
    ]
    legend += [
        [("▆", p.shared), (" shared", p.muted)],
        [("▆", p.muted), (" others", p.muted)],
        [("CPU id:", p.muted), (" ran here", "reverse bold")],
        [("outside mask", p.disabled)],
    ]
    if any(c.gpu_local for g in groups for c in g.cells):  # no GPU (or no locality known): no such mark
        legend.append([("GPU-local", "underline")])
    used = 0
    line = new_line()
    for item in legend:
        size = sum(len(t) for t, _ in item) + 2
        if used and used + size > width:
            line = new_line()
            used = 0
        for part, style in item:
            line.append(part, style=style)
        line.append("  ")
        used += size
    return lines


def core_map_text(
    groups: Sequence[CoreGroup],
    p: Palette,
    job_colors: dict[int, str],
    selected: ProcessRow | None,
    width: int,
    measured: bool = True,
    training: frozenset[int] | None = None,
) -> Text:
    """The map as one text (a join keeps its separator's ``no_wrap`` and ``overflow``)."""
    return Text("\n", no_wrap=True, overflow="ellipsis").join(
        core_map_lines(groups, p, job_colors, selected, width, measured, training)
    )


class CoreMap(QuietStatic):
    """Laid out again when its width changes (cells per line follow the width); built
    again only when what it shows changed."""

    _last: (
        tuple[Sequence[CoreGroup], Palette, dict[int, str], ProcessRow | None, bool, frozenset[int] | None] | None
    ) = None
    _built: tuple[object, ...] | None = None

    def on_resize(self) -> None:
        if self._last is not None:
            self.show(*self._last)

    def show(
        self,
        groups: Sequence[CoreGroup],
        p: Palette,
        job_colors: dict[int, str],
        selected: ProcessRow | None,
        measured: bool = True,
        training: frozenset[int] | None = None,
    ) -> None:
        self._last = (groups, p, job_colors, selected, measured, training)
        width = max(CELL_WIDTH, self.size.width - 2) if self.size.width else 48
        inputs = (groups, p, job_colors, selected, measured, training, width)
        if inputs == self._built:
            return
        self._built = inputs
        self.put(core_map_lines(groups, p, job_colors, selected, width, measured, training))
