"""``affmon.export.scale``: the series a node serves, counted from the catalogue, and the
fleet table of docs/export.md ("Scale") as the command prints it. The count is held against
what a real Prometheus ingested by tests/export/test_export_fleet.py."""

from __future__ import annotations

import contextlib
import importlib
import io
from dataclasses import replace

import pytest

import affmon.export.scale as scale
from affmon.export import catalogue as m
from affmon.export.families import families
from affmon.export.scale import (
    EXPORTER,
    PER_GPU,
    PER_PROBED,
    PER_PROCESS,
    PER_THREAD,
    NodeShape,
    fleet_cost,
    main,
    series_per_node,
    training_node,
)
from tests.helpers.export import REPO, hogs_feed, run

DOCS = (REPO / "docs" / "export.md").read_text()


def test_per_entity_counts_come_from_the_catalogue():
    assert (PER_PROCESS, PER_PROBED, PER_GPU, PER_THREAD, EXPORTER) == (10, 6, 10, 10, 13)


def test_a_new_metric_by_pid_is_counted(monkeypatch):
    extra = m.MetricSpec("affmon_process_new_ratio", "gauge", m.PROCESS_LABELS, "new")
    monkeypatch.setattr(m, "CATALOGUE", (*m.CATALOGUE, extra))
    try:
        assert importlib.reload(scale).PER_PROCESS == 11
    finally:
        monkeypatch.undo()
        importlib.reload(scale)


@pytest.mark.parametrize(
    ("shape", "series"),
    [
        (NodeShape(processes=0, gpus=0), 13),
        (NodeShape(processes=1, gpus=0, idle=1), 13 + 9),
        (NodeShape(processes=2, gpus=1, findings=3, replay=True), 13 + 20 + 10 + 3 + 2),
        (NodeShape(processes=1, gpus=0, threads=0), 13 + 10 + 1),
        (NodeShape(processes=1, gpus=0, threads=1000), 13 + 10 + 10_001),
        (training_node(8, 8, 2), 1024),  # docs/export.md, "Label cardinality": ~1,030
    ],
)
def test_series_per_node(shape, series):
    assert series_per_node(shape) == series


def test_fleet_cost_is_series_times_nodes_and_one_sample_a_series_a_scrape():
    cost = fleet_cost(training_node(), 1000, 15.0)
    assert (cost.series_per_node, cost.series) == (1024, 1_024_000)
    assert cost.samples_per_s == pytest.approx(1_024_000 / 15)


def test_a_replayed_node_serves_what_its_shape_says():
    """The exporter's own families for a recording (hogs: 21 processes, a GPU, 3 findings),
    counted, against the arithmetic, replay series included."""
    feed = hogs_feed()
    samples = [s for s in (feed.sample() for _ in range(5)) if s is not None]
    state = replace(run(*samples, topo=feed.topology), replay=feed.status)
    served = sum(len(f.series) for f in families(state))
    self_series = len(m.SELF)  # read only by a running exporter: none in a state made here
    snap = state.snapshot
    assert snap is not None
    watched = [p for p in snap.processes if p.sample.watched and not p.sample.kernel]
    shape = NodeShape(
        processes=len(watched),
        gpus=len(snap.gpus),
        idle=sum(1 for p in watched if p.wait_ratio is None),
        findings=len(state.findings),
        replay=True,
    )
    assert (shape.processes, shape.gpus, shape.findings) == (21, 1, 3)
    assert served + self_series == series_per_node(shape)


def test_the_docs_table_is_what_the_command_prints():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([]) == 0
    printed = out.getvalue().splitlines()
    assert printed[0] in DOCS
    rows = [line for line in printed[1:] if line.startswith("| ")]
    assert len(rows) == 6 and all(row in DOCS for row in rows), rows
