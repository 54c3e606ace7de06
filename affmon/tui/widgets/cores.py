"""The core map: every CPU as a cell, grouped by NUMA node and shared cache, showing
which training job ran there in the last interval and how busy it was.

A cell is the CPU id and a bar (▁ to █, how busy; · idle) coloured by who ran there: a
job's colour, on the error colour's background where two jobs or a job and another busy
process shared the CPU (contention), muted for other processes. The CPU id is reversed
where the selected process ran, dimmed outside its mask (or the machine's allowed set),
and underlined where it is local to the selected process's GPU (every GPU's when none is selected).
Before the first interval closes (one sample, no rates) the bars are left blank.

The legend shows each style on the words it explains ("ran here" reversed, "outside mask"
dimmed, "GPU-local" underlined): a sample digit such as "7" read as a count of CPUs.

On a machine of several NUMA nodes whose memory or distances are known, a line under each
node's first title gives its memory and its row of the distance matrix as ``numactl -H``
prints it, read across the nodes with CPUs ("mem 64.0 GiB · dist 21/10"; the legend
names the nodes the row reads across): what a REMOTE_MEMORY or CROSS_NUMA finding is
weighed against. Nodes without CPUs (a GPU's memory, HBM, CXL) follow the CPUs, a line
per run of alike ones. On one node its memory joins its title where the line has room,
and the map grows by no line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rich.text import Text

from affmon.core import fmt
from affmon.core.model.cpuset import CpuSet, format_cpulist
from affmon.core.model.topology import Topology, format_gib
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


@dataclass(frozen=True, slots=True)
class NodeSummary:
    """What the map says of the NUMA nodes beside their CPUs, from the topology: each
    node's memory ("64.0 GiB", where known) and its distances to the nodes with CPUs
    (``columns``, in id order: "21/10"), and the nodes without CPUs, alike ones in one
    run ("3-9", "0 GiB", "80/120"). ``several``: more than one node, so each node with
    CPUs gets a line of its facts; else only the memory of the one node, in its title."""

    several: bool
    columns: tuple[int, ...]
    memory: Mapping[int, str]
    distances: Mapping[int, str]
    without_cpus: tuple[tuple[str, str | None, str | None], ...]

    def facts(self, node: int, width: int) -> list[list[str]]:
        """The line under a node's first title, "mem 64.0 GiB · dist 21/10" (two lines
        where one is narrower), as (label, value) pairs."""
        parts = [["mem ", self.memory[node]]] if node in self.memory else []
        if node in self.distances:
            parts.append(["dist ", self.distances[node]])
        if sum(len(a) + len(b) for a, b in parts) + 3 * (len(parts) - 1) <= width:
            return [[x for part in parts for x in part]] if parts else []
        return parts

    def columns_text(self) -> str:
        """Which node each figure of a ``dist`` row is: "to node 0/1", "to nodes 0-7"."""
        if len(self.columns) <= 4:
            return "to node " + "/".join(map(str, self.columns))
        return f"to nodes {format_cpulist(self.columns)} in turn"


def node_summary(topology: Topology | None) -> NodeSummary | None:
    """None where there is nothing to add: no topology, or neither a node's memory nor
    the distances known."""
    if topology is None:
        return None
    memory = {n.id: format_gib(n.memory_bytes) for n in topology.numa_nodes if n.memory_bytes is not None}
    columns = tuple(n.id for n in topology.cpu_numa_nodes)
    distances: dict[int, str] = {}
    if topology.node_distances is not None and columns:
        for n in topology.numa_nodes:
            row = [topology.distance(n.id, c) for c in columns]
            distances[n.id] = "/".join("?" if d is None else str(d) for d in row)
    if not memory and not distances:
        return None
    runs: list[tuple[list[int], str | None, str | None]] = []
    for n in topology.numa_nodes:
        if n.cpus:
            continue
        facts = (memory.get(n.id), distances.get(n.id))
        if runs and runs[-1][1:] == facts:
            runs[-1][0].append(n.id)
        else:
            runs.append(([n.id], *facts))
    without = tuple((format_cpulist(ids), mem, dist) for ids, mem, dist in runs)
    return NodeSummary(len(topology.numa_nodes) > 1, columns, memory, distances, without)


def core_map_lines(
    groups: Sequence[CoreGroup],
    p: Palette,
    job_colors: dict[int, str],
    selected: ProcessRow | None,
    width: int,
    measured: bool = True,
    training: frozenset[int] | None = None,
    nodes: NodeSummary | None = None,
) -> list[Text]:
    """The map line by line (each cut with an ellipsis where the pane is narrower). The
    legend calls a root in ``training`` a job, any other a process (a watched process that
    is not training, as ``diagnose`` and the table say); None: every root a job.
    ``nodes``: the nodes' memory and distances (``node_summary``), None: not shown."""
    per_line = max(1, width // CELL_WIDTH)
    selected_cpus = selected.ran_on_cpus if selected is not None else frozenset()
    local = set(selected.gpus) if selected is not None and selected.gpus else None
    lines: list[Text] = []

    def new_line() -> Text:
        line = Text(no_wrap=True, overflow="ellipsis")
        lines.append(line)
        return line

    several = nodes is not None and nodes.several
    told: set[int] = set()  # the nodes whose memory and distances are shown
    for gi, g in enumerate(groups):
        if gi:
            new_line()
        title = group_title(g)
        memory = nodes.memory.get(g.numa_node) if nodes is not None and g.numa_node is not None else None
        if memory is not None and not several and gi == 0:  # one node: its memory where the title has room
            with_memory = title.replace(" · ", f" · {memory} · ", 1)
            title = with_memory if len(with_memory) <= width else title
        new_line().append(title, style=f"bold {p.muted}")
        if several and nodes is not None and g.numa_node is not None and g.numa_node not in told:
            told.add(g.numa_node)
            for facts in nodes.facts(g.numa_node, width):
                line = new_line()
                for i in range(0, len(facts), 2):
                    line.append(" · " if i else "", style=p.muted)
                    line.append(facts[i], style=p.muted)
                    line.append(facts[i + 1])
        line = lines[-1]
        for i, c in enumerate(g.cells):
            if i % per_line == 0:
                line = new_line()
            line.append_text(cell_text(c, p, job_colors, selected, selected_cpus, local, measured))
    if several and nodes is not None and nodes.without_cpus:
        new_line()
        new_line().append("memory only (no CPUs)", style=f"bold {p.muted}")
        for ids, memory, dist in nodes.without_cpus:
            word = "nodes" if "-" in ids or "," in ids else "node"
            facts = [f"{word} {ids}", *([memory] if memory else []), *([f"dist {dist}"] if dist else [])]
            new_line().append(" · ".join(facts), style=p.muted)
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
    if several and nodes is not None and nodes.distances:
        legend.append([("dist", "bold"), (f" {nodes.columns_text()}", p.muted)])
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
    nodes: NodeSummary | None = None,
) -> Text:
    """The map as one text (a join keeps its separator's ``no_wrap`` and ``overflow``)."""
    return Text("\n", no_wrap=True, overflow="ellipsis").join(
        core_map_lines(groups, p, job_colors, selected, width, measured, training, nodes)
    )


class CoreMap(QuietStatic):
    """Laid out again when its width changes (cells per line follow the width); built
    again only when what it shows changed. The nodes' memory and distances are summed up
    once per topology (``node_summary``), not every tick."""

    _last: (
        tuple[Sequence[CoreGroup], Palette, dict[int, str], ProcessRow | None, bool, frozenset[int] | None] | None
    ) = None
    _built: tuple[object, ...] | None = None
    _topology: Topology | None = None
    _node_summary: NodeSummary | None = None

    def on_resize(self) -> None:
        if self._last is not None:
            self.show(*self._last, topology=self._topology)

    def show(
        self,
        groups: Sequence[CoreGroup],
        p: Palette,
        job_colors: dict[int, str],
        selected: ProcessRow | None,
        measured: bool = True,
        training: frozenset[int] | None = None,
        topology: Topology | None = None,
    ) -> None:
        self._last = (groups, p, job_colors, selected, measured, training)
        if topology is not self._topology:
            self._topology, self._node_summary = topology, node_summary(topology)
        width = max(CELL_WIDTH, self.size.width - 2) if self.size.width else 48
        inputs = (groups, p, job_colors, selected, measured, training, width, self._node_summary)
        if inputs == self._built:
            return
        self._built = inputs
        self.put(core_map_lines(groups, p, job_colors, selected, width, measured, training, self._node_summary))
