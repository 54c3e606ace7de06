"""Series per process, counted on what the exporter serves and held against the table in
docs/export.md ("Label cardinality"): a rank (placed by Slurm, pages on two NUMA nodes, its
loop probed), a DataLoader worker (placed, pages on one node) and a process nothing placed
(its environment read, every context value unknown: no context series at all). With
``--threads``, the series per thread."""

from __future__ import annotations

import re

from affmon.export.families import families
from affmon.export.state import ExportState
from tests.helpers.export import DOCS, state


def fleet_table() -> dict[str, int]:
    """The count column of the docs' per-process rows, by their first words."""
    text = DOCS.read_text()
    rows = dict(re.findall(r"^\| (always|placed|pages|loop|thread)\b[^|]*\| (\d+) ", text, re.MULTILINE))
    return {k: int(v) for k, v in rows.items()}


def per_pid(st: ExportState, pid: int, *, threads: bool = False) -> dict[str, int]:
    counted: dict[str, int] = {}
    for family in families(st, threads=threads):
        if "pid" not in family.spec.labels or "tid" in family.spec.labels:
            continue
        at = family.spec.labels.index("pid")
        n = sum(1 for labels, _ in family.series if labels[at] == str(pid))
        if n:
            counted[family.name] = n
    return counted


def test_series_per_process_are_those_of_the_docs_table():
    table = fleet_table()
    assert set(table) == {"always", "placed", "pages", "loop", "thread"}
    st, rank, worker, plain = state()
    always = sum(per_pid(st, plain).values())
    assert always == table["always"]
    assert "affmon_process_context_info" not in per_pid(st, plain)  # nothing placed it: no all-empty series
    assert sum(per_pid(st, worker).values()) == table["always"] + table["placed"] + 1 * table["pages"]
    assert sum(per_pid(st, rank).values()) == table["always"] + table["placed"] + 2 * table["pages"] + table["loop"]


def test_series_per_thread_are_those_of_the_docs_table():
    st, _, _, _ = state()
    counted: dict[tuple[str, str], int] = {}
    for family in families(st, threads=True):
        if "tid" in family.spec.labels:
            for labels, _ in family.series:
                key = (labels[family.spec.labels.index("pid")], labels[family.spec.labels.index("tid")])
                counted[key] = counted.get(key, 0) + 1
    # at most: a thread that neither ran nor waited in the interval has no wait ratio
    assert counted and max(counted.values()) == fleet_table()["thread"]
    assert min(counted.values()) >= fleet_table()["thread"] - 1


def test_no_label_of_a_counter_or_a_gauge_can_change_while_the_process_lives():
    """Only ``_info`` series carry names; every other per-process or per-thread series is
    keyed by pid (and tid) and what cannot change (a NUMA node, a share's name)."""
    st, _, _, _ = state()
    for family in families(st, threads=True):
        if family.name.endswith("_info"):
            continue
        assert not {"name", "thread", "gpu", "job_pid", "user"} & set(family.spec.labels) or family.name.startswith(
            "affmon_gpu_"
        ), family.name
