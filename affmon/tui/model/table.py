"""The process table's rows: which processes, in which order, as a tree. Pure.

Processes are shown as a tree (launcher -> ranks -> DataLoader workers, or any parent
and child that are both shown); siblings are ordered by the sort key, so a sort never
tears a worker away from its rank. A filter keeps the rows that match and their
ancestors (the tree stays readable). Thread rows, when on, follow their process.

Given the order shown at the last tick, siblings whose sorted figures read alike (CPU% or
wait% within ``ALIKE_POINTS`` points or ``ALIKE_SHARE`` of the larger; the same findings)
keep that order (``settle``): four ranks at 23.4-23.8% each no longer trade places every
tick by their jitter, taking their workers' rows with them. A row passes another only
when their figures differ by more than that.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from affmon.core.fmt import short_code
from affmon.core.model.tree import ancestors
from affmon.tui.model.views import ProcessRow, ThreadRow, View, shown_cpu, shown_wait, thread_rows

# Sort keys in the order `s` cycles through them (F6 lists them all, as htop does), with
# what the status line says.
SORTS = {
    "findings": "findings, then CPU",
    "cpu": "CPU %",
    "wait": "wait %",
    "pid": "PID",
    "command": "command",
    "ran": "CPUs it ran on",
    "mask": "mask",
    "gpu": "GPU",
    "thr": "threads",
    "sw": "switches/s",
    "mig": "migrations/s",
    "nodes": "NUMA nodes",
    "user": "user",
}


# The column each sort orders by: its header carries the marker (▼, or ▲ reversed).
SORT_COLUMNS = {key: key for key in SORTS}


def next_sort(current: str) -> str:
    keys = list(SORTS)
    return keys[(keys.index(current) + 1) % len(keys)] if current in SORTS else keys[0]


@dataclass(frozen=True)
class TableOptions:
    sort: str = "findings"
    training_only: bool = True  # only watched processes (training ones, or --pid's tree)
    show_threads: bool = False
    filter_text: str = ""
    reverse: bool = False  # the sort's order turned round (htop's I): the least first

    def describe_sort(self) -> str:
        """What the status line says: "CPU %", "CPU %, reversed"."""
        return SORTS.get(self.sort, self.sort) + (", reversed" if self.reverse else "")


@dataclass(frozen=True, slots=True)
class TableRow:
    key: str  # "p:PID" or "t:PID:TID": stable across ticks, the DataTable row key
    depth: int
    prefix: str  # tree drawing before the name ("├─ ", "│  └─ ")
    process: ProcessRow | None = None
    thread: ThreadRow | None = None

    @property
    def pid(self) -> int:
        if self.process is not None:
            return self.process.pid
        assert self.thread is not None
        return self.thread.pid


def process_key(pid: int) -> str:
    return f"p:{pid}"


def _num(value: float | None) -> float:
    return -1.0 if value is None else value


def _first(cpus: Iterable[int] | None) -> float | None:
    return float(min(cpus)) if cpus else None


# Columns of text sort A to Z; of CPUs, GPUs and nodes, by the lowest one; counts and
# rates, the most first. Unknown values go last.
TEXT_SORTS: dict[str, Callable[[ProcessRow], str]] = {"command": lambda r: r.name, "user": lambda r: r.user or "~"}
NUMBER_SORTS: dict[str, tuple[Callable[[ProcessRow], float | None], bool]] = {
    "ran": (lambda r: _first(r.ran_on_cpus), False),
    "mask": (lambda r: _first(r.mask), False),
    "gpu": (lambda r: _first(r.gpus), False),
    "nodes": (lambda r: _first(r.ran_on_nodes), False),
    "thr": (lambda r: float(r.threads), True),
    "sw": (lambda r: r.switches_per_s, True),
    "mig": (lambda r: r.migrations_per_s, True),
}


def sort_key(sort: str, row: ProcessRow) -> tuple[float, ...]:
    """Ascending order puts the row to show first first. Rates sort as the table shows
    them (``shown_cpu``, ``shown_wait``): rows whose figures read the same stay in PID
    order instead of trading places every tick by a difference no one can see."""
    if sort == "pid":
        return (row.pid,)
    text = TEXT_SORTS.get(sort)
    if text is not None:
        return (*(float(ord(c)) for c in text(row).lower()[:32]), float("inf"), row.pid)
    number = NUMBER_SORTS.get(sort)
    if number is not None:
        get, most_first = number
        value = get(row)
        if value is None:
            return (1.0, 0.0, row.pid)
        return (0.0, -value if most_first else value, row.pid)
    if sort == "wait":
        return (-shown_wait(row.wait_ratio), -shown_cpu(row.cpu_percent), row.pid)
    if sort == "cpu":
        return (-shown_cpu(row.cpu_percent), row.pid)
    worst = row.worst
    return (-(worst + 1 if worst is not None else 0), -len(row.findings), -shown_cpu(row.cpu_percent), row.pid)


ALIKE_POINTS = 1.0  # percentage points: two CPU% (or wait%) figures this close read alike
ALIKE_SHARE = 0.02  # ... or this share of the larger one


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= max(ALIKE_POINTS, ALIKE_SHARE * max(abs(a), abs(b)))


def _percent(ratio: float | None) -> float | None:
    return None if ratio is None else 100.0 * ratio


# The sorts whose figures jitter from tick to tick, and when two rows read alike for them.
ALIKE: dict[str, Callable[[ProcessRow, ProcessRow], bool]] = {
    "findings": lambda a, b: (
        a.worst == b.worst and len(a.findings) == len(b.findings) and _close(a.cpu_percent, b.cpu_percent)
    ),
    "cpu": lambda a, b: _close(a.cpu_percent, b.cpu_percent),
    "wait": lambda a, b: _close(_percent(a.wait_ratio), _percent(b.wait_ratio)),
}


SETTLE_PASSES = 8  # passes over one list of siblings, a tick


def settle(rows: list[ProcessRow], sort: str, previous: Mapping[str, int]) -> None:
    """Put back, in place, the order of ``previous`` (row key -> its place at the last
    tick) between neighbours of the sorted ``rows`` that read alike for ``sort``. Only
    alike neighbours are swapped, so any two rows out of the sort's order read alike. At
    most ``SETTLE_PASSES`` passes: a jittering row is a place or two off, while a thousand
    idle processes under ``a``, all alike, would otherwise be bubbled back into the last
    tick's order one swap at a time (a million comparisons a tick)."""
    alike = ALIKE.get(sort)
    if alike is None or not previous or len(rows) < 2:
        return
    place = [previous.get(process_key(r.pid)) for r in rows]
    for _ in range(SETTLE_PASSES):
        swapped = False
        for i in range(len(rows) - 1):
            a, b = place[i], place[i + 1]
            if a is not None and b is not None and b < a and alike(rows[i], rows[i + 1]):
                rows[i], rows[i + 1] = rows[i + 1], rows[i]
                place[i], place[i + 1] = b, a
                swapped = True
        if not swapped:
            return


def matches(row: ProcessRow, text: str) -> bool:
    """Case-insensitive: PID, name, command line, user, the scheduler that placed it (a
    ``DetailedRow``'s context: "slurm 4242"), finding codes (long or short)."""
    needle = text.strip().lower()
    if not needle:
        return True
    hay = [str(row.pid), row.name, row.cmdline or "", row.user or "", row.role, getattr(row, "context", None) or ""]
    hay += [m.code for m in row.findings] + [short_code(m.code) for m in row.findings]
    return any(needle in h.lower() for h in hay)


def visible_processes(view: View, options: TableOptions) -> list[ProcessRow]:
    rows = [p for p in view.processes if p.watched or not options.training_only]
    if not options.filter_text.strip():
        return rows
    parents = {p.pid: p.ppid for p in rows}
    keep: set[int] = set()
    for p in rows:
        if matches(p, options.filter_text):  # the match and the rows above it
            keep.add(p.pid)
            keep.update(ancestors(p.pid, parents))
    return [p for p in rows if p.pid in keep]


def table_rows(view: View, options: TableOptions, previous: Mapping[str, int] | None = None) -> tuple[TableRow, ...]:
    """The rows of the process table, top to bottom; ``previous``: each row key's place in
    the rows shown at the last tick, under the same options (``settle``)."""
    shown = visible_processes(view, options)
    shown_pids = {p.pid for p in shown}
    parents = {p.pid: p.ppid for p in view.processes}
    children: dict[int | None, list[ProcessRow]] = {}
    for p in shown:
        # the nearest ancestor shown, through hidden ones (a shell between a launcher and
        # its ranks); None makes the row a root
        parent = next((up for up in ancestors(p.pid, parents) if up in shown_pids), None)
        children.setdefault(parent, []).append(p)
    for siblings in children.values():
        siblings.sort(key=lambda r: sort_key(options.sort, r), reverse=options.reverse)
        if previous:
            settle(siblings, options.sort, previous)
    out: list[TableRow] = []
    visited: set[int] = set()

    def walk(rows: Iterable[ProcessRow], depth: int, lead: str, is_child: bool) -> None:
        items = list(rows)
        for i, p in enumerate(items):
            if p.pid in visited:
                continue
            visited.add(p.pid)
            last = i == len(items) - 1
            branch = ("└─ " if last else "├─ ") if is_child else ""
            out.append(TableRow(process_key(p.pid), depth, lead + branch, process=p))
            below = lead + (("   " if last else "│  ") if is_child else "")
            kids = children.get(p.pid, [])
            if options.show_threads:
                threads = _threads(view, p.pid, options.sort, options.reverse)
                for j, t in enumerate(threads):
                    t_last = j == len(threads) - 1 and not kids
                    out.append(
                        TableRow(f"t:{p.pid}:{t.tid}", depth + 1, below + ("╰╴ " if t_last else "┊  "), thread=t)
                    )
            walk(kids, depth + 1, below, True)

    walk(children.get(None, []), 0, "", False)
    return tuple(out)


def _threads(view: View, pid: int, sort: str, reverse: bool = False) -> tuple[ThreadRow, ...]:
    rows = thread_rows(view.snapshot, pid, view.thresholds)
    if sort == "pid":
        rows = tuple(sorted(rows, key=lambda r: r.tid))
    elif sort == "wait":
        rows = tuple(sorted(rows, key=lambda r: (-shown_wait(r.wait_ratio), r.tid)))
    return rows[::-1] if reverse else rows
