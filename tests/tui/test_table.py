"""The process table's rows: tree order, sorting, filtering, the two toggles. Pure."""

from __future__ import annotations

import dataclasses
import random

import pytest

from affmon.core import fmt
from affmon.tui.model.table import SORTS, TableOptions, matches, next_sort, table_rows
from affmon.tui.model.views import shown_cpu
from tests.helpers.recordings import last_view


def keys(rows):
    return [r.key for r in rows]


def test_tree_puts_workers_under_their_rank_with_tree_lines():
    rows = table_rows(last_view("narrow"), TableOptions())
    assert keys(rows) == ["p:695", "p:725", "p:726", "p:729", "p:724"] or keys(rows)[0] == "p:695"
    assert rows[0].depth == 0 and rows[0].prefix == ""
    assert all(r.depth == 1 for r in rows[1:])
    assert [r.prefix for r in rows[1:]] == ["├─ "] * 3 + ["└─ "]


def test_findings_first_then_cpu_puts_the_starved_job_above_the_hogs():
    rows = table_rows(last_view("hogs"), TableOptions())
    assert rows[0].key == "p:608"
    assert {r.key for r in rows[1:5]} == {"p:659", "p:660", "p:661", "p:662"}  # its workers stay with it
    assert len(rows) == 21


def test_sort_by_cpu_puts_a_hog_first_and_keeps_workers_under_their_rank():
    rows = table_rows(last_view("hogs"), TableOptions(sort="cpu"))
    top = rows[0].process
    assert top is not None and top.pid != 608 and top.cpu_percent is not None and top.cpu_percent > 99
    index = keys(rows).index("p:608")
    assert {r.key for r in rows[index + 1 : index + 5]} == {"p:659", "p:660", "p:661", "p:662"}
    roots = [r.process for r in rows if r.depth == 0]
    cpu = [shown_cpu(p.cpu_percent) for p in roots if p is not None]  # as the CPU% column reads them
    assert cpu == sorted(cpu, reverse=True)


def test_sort_by_pid_and_wait():
    v = last_view("overlap")
    by_pid = [r.process.pid for r in table_rows(v, TableOptions(sort="pid")) if r.depth == 0 and r.process]
    assert by_pid == [830, 832]
    by_wait = [r.process for r in table_rows(v, TableOptions(sort="wait")) if r.depth == 0 and r.process]
    assert [p.wait_ratio for p in by_wait] == sorted((p.wait_ratio or 0 for p in by_wait), reverse=True)


def test_sort_cycles_through_every_key():
    seen = ["findings"]
    for _ in range(len(SORTS)):
        seen.append(next_sort(seen[-1]))
    assert seen[-1] == "findings" and set(seen) == set(SORTS)
    assert next_sort("nonsense") == "findings"


def test_filter_keeps_matches_and_their_ancestors():
    v = last_view("hogs")
    assert keys(table_rows(v, TableOptions(filter_text="660"))) == ["p:608", "p:660"]
    assert keys(table_rows(v, TableOptions(filter_text="no such thing"))) == []
    by_code = {r.key for r in table_rows(v, TableOptions(filter_text="contend"))}
    assert by_code == {"p:608", "p:659", "p:660", "p:661", "p:662"}  # workers inherit it


def test_all_shows_more_than_the_training_processes_but_no_kernel_threads():
    v = last_view("hogs")
    training = table_rows(v, TableOptions())
    everything = table_rows(v, TableOptions(training_only=False))
    assert len(everything) > len(training) and "p:1" in keys(everything) and "p:1" not in keys(training)
    kernel = {p.sample.pid for p in v.snapshot.processes if p.sample.kernel}
    assert kernel and not kernel & {r.pid for r in everything}


def test_thread_rows_follow_their_process():
    v = last_view("narrow")
    rows = table_rows(v, TableOptions(show_threads=True))
    assert rows[0].key == "p:695"
    threads_of_rank = [r for r in rows[1:10]]
    assert all(r.thread is not None and r.thread.pid == 695 for r in threads_of_rank)
    assert len([r for r in rows if r.thread]) == 9 + 4 * 3
    assert all(r.key.startswith("t:") for r in rows if r.thread)


@pytest.mark.parametrize(
    ("text", "expected"), [("", True), ("python", True), ("PYTHON", True), ("695", True), ("STARV", True), ("x", False)]
)
def test_matches(text, expected):
    row = last_view("narrow").process(695)
    assert row is not None and matches(row, text) is expected


@pytest.mark.parametrize(
    ("fn", "value", "text"),
    [
        (fmt.percent, None, "-"),
        (fmt.percent, 57, "57%"),
        (fmt.cpu_percent, 7.49, "7.5"),
        (fmt.cpu_percent, 812.4, "812"),
        (fmt.ratio_percent, 0.449, "45%"),
        (fmt.per_s, 312.4, "312"),
        (fmt.per_s, 4120.0, "4.1k"),
        (fmt.per_s, 12_400.0, "12k"),
        (fmt.per_s, 2_500_000.0, "2.5M"),
        (fmt.bytes_per_s, 1.62e9, "1.51 GiB/s"),
        (fmt.bytes_per_s, 148456808.8, "142 MiB/s"),
        (fmt.bytes_per_s, 0.0, "0 B/s"),
        (fmt.bytes_per_s, None, "-"),
        (fmt.node, None, "?"),
    ],
)
def test_formats(fn, value, text):
    assert fn(value) == text


def test_cpulists_are_cut_to_width():
    assert fmt.cpus({0, 1, 2, 3, 8, 10, 12, 14}) == "0-3,8,10,12,14"
    assert fmt.cpus({0, 1, 2, 3, 8, 10, 12, 14}, 9) == "0-3,8,10…"
    assert fmt.cpus(None) == "-" and fmt.short_code("MASK_TOO_NARROW") == "NARROW"


def _jittered(view, figures):
    """``view`` with the CPU% of the processes in ``figures`` (pid -> percent) replaced."""
    processes = tuple(
        dataclasses.replace(p, cpu_percent=figures[p.pid]) if p.pid in figures else p for p in view.processes
    )
    return dataclasses.replace(view, processes=processes)


def _roots(rows):
    """The processes' PIDs top to bottom (the hogs are siblings: children of one shell)."""
    return [r.process.pid for r in rows if r.process is not None]


def test_rows_whose_cpu_reads_alike_keep_their_places_from_the_last_tick():
    v = last_view("hogs")
    options = TableOptions(sort="cpu", training_only=False)
    hogs = [p.pid for p in v.processes if p.cpu_percent is not None and p.cpu_percent > 90 and p.pid != 608][:4]
    assert len(hogs) == 4
    ticks = [  # four hogs, their figures jittering by less than a point, as a real tick's do
        {hogs[0]: 97.2, hogs[1]: 97.6, hogs[2]: 97.0, hogs[3]: 97.9},
        {hogs[0]: 97.8, hogs[1]: 97.1, hogs[2]: 97.5, hogs[3]: 97.3},
        {hogs[0]: 97.0, hogs[1]: 97.9, hogs[2]: 97.7, hogs[3]: 97.2},
    ]
    shown = None
    orders = []
    for figures in ticks:
        rows = table_rows(_jittered(v, figures), options, shown)
        shown = {r.key: i for i, r in enumerate(rows)}
        orders.append([pid for pid in _roots(rows) if pid in hogs])
    assert orders[0] == sorted(hogs, key=lambda pid: -ticks[0][pid])  # the first tick: the sort's own order
    assert orders[1] == orders[0] and orders[2] == orders[0]  # then none trades places
    exact = [[pid for pid in _roots(table_rows(_jittered(v, f), options)) if pid in hogs] for f in ticks]
    assert exact[1] != exact[0] and exact[2] != exact[1]  # without the last tick's order they do


def test_a_row_passes_another_when_their_figures_differ_by_more_than_a_point_and_two_percent():
    v = last_view("hogs")
    options = TableOptions(sort="cpu", training_only=False)
    a, b = [p.pid for p in v.processes if p.cpu_percent is not None and p.cpu_percent > 90 and p.pid != 608][:2]
    first = table_rows(_jittered(v, {a: 50.0, b: 49.5}), options)
    assert _roots(first).index(a) < _roots(first).index(b)
    shown = {r.key: i for i, r in enumerate(first)}
    for figures, b_first in [
        ({a: 49.6, b: 50.5}, False),  # 0.9 points: alike, a stays above
        ({a: 49.0, b: 50.5}, True),  # 1.5 points, 3% of 50.5: b passes
        ({a: 5.0, b: 5.9}, False),
        ({a: 5.0, b: 6.1}, True),
        ({a: 90.0, b: 91.7}, False),  # 1.7 points, under 2% of 91.7
        ({a: 90.0, b: 92.0}, True),
    ]:
        roots = _roots(table_rows(_jittered(v, figures), options, shown))
        assert (roots.index(b) < roots.index(a)) is b_first, figures


def test_out_of_order_rows_always_read_alike_and_other_sorts_stay_exact():
    v = last_view("hogs")
    options = TableOptions(sort="cpu", training_only=False)
    pids = [p.pid for p in v.processes if p.cpu_percent is not None and p.cpu_percent > 90 and p.pid != 608][:8]
    rng = random.Random(7)
    shown = None
    for _ in range(40):
        figures = {pid: rng.uniform(60.0, 66.0) for pid in pids}
        rows = table_rows(_jittered(v, figures), options, shown)
        shown = {r.key: i for i, r in enumerate(rows)}
        order = [pid for pid in _roots(rows) if pid in pids]
        for i, x in enumerate(order):
            for y in order[i + 1 :]:
                if figures[x] < figures[y]:  # out of the sort's order: must read alike
                    assert figures[y] - figures[x] <= max(1.0, 0.02 * figures[y])
        by_pid = TableOptions(sort="pid", training_only=False)
        assert table_rows(_jittered(v, figures), by_pid, shown) == table_rows(_jittered(v, figures), by_pid)


def test_settling_a_thousand_alike_rows_is_bounded_and_keeps_its_promise(monkeypatch):
    """Under ``a`` a machine's idle processes all read alike (CPU under a point): putting
    back the last tick's order among them one swap at a time would cost a million
    comparisons a tick. The passes are bounded; what comes out still has only alike rows
    out of the sort's order."""
    from affmon.tui.model import table

    base = next(p for p in last_view("hogs").processes if p.cpu_percent is not None)
    rng = random.Random(3)
    rows = [dataclasses.replace(base, pid=10_000 + i, cpu_percent=rng.uniform(0.0, 0.9)) for i in range(1000)]
    rows.sort(key=lambda r: table.sort_key("cpu", r))
    last = list(range(len(rows)))
    rng.shuffle(last)  # the last tick's places: another order altogether
    previous = {table.process_key(r.pid): place for r, place in zip(rows, last, strict=True)}
    calls = 0
    alike = table.ALIKE["cpu"]

    def counting(a, b):
        nonlocal calls
        calls += 1
        return alike(a, b)

    monkeypatch.setitem(table.ALIKE, "cpu", counting)
    settled = list(rows)
    table.settle(settled, "cpu", previous)
    assert calls <= 16 * len(rows)  # at most 16 comparisons a row a tick
    assert sorted(r.pid for r in settled) == sorted(r.pid for r in rows)
    assert settled != rows  # it did move rows towards the last tick's order
    figures = [r.cpu_percent for r in settled]
    for i, x in enumerate(figures):
        assert all(y - x <= 1.0 for y in figures[i + 1 :])  # out of order only within a point
