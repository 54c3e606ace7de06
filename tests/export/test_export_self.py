"""What the exporter says about itself and how it names units: ``process_*`` read by the
sampling thread with each sample (prometheus-client's ProcessCollector) and served like
every other family, ``affmon_build_info``, and OpenMetrics' ``# UNIT`` for every name that
ends in a base unit (none in the text format, which has no such line)."""

from __future__ import annotations

import platform

from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.parser import text_string_to_metric_families

import affmon
from affmon.export import catalogue as m
from affmon.export.catalogue import CATALOGUE
from affmon.export.collector import StateCollector
from affmon.export.service import Exporter
from affmon.export.state import ExportState
from tests.helpers.export import exposition, process, recorded, run, sample, thread, topology


def test_a_tick_reads_the_exporters_own_process_and_serves_it():
    samples = iter([sample(0, process(10, thread(10, 100))), sample(1, process(10, thread(10, 200)))])
    exporter = Exporter(lambda: next(samples), topology())
    exporter.tick()
    exporter.tick()
    got = {s.name: s for f in text_string_to_metric_families(exposition(exporter.state)) for s in f.samples}
    for spec in m.SELF:
        assert spec.name in got, spec.name
    assert got["process_resident_memory_bytes"].value > 1 << 20
    assert 2 < got["process_open_fds"].value <= got["process_max_fds"].value
    assert got["affmon_build_info"].labels == {
        "version": affmon.__version__,
        "python_version": platform.python_version(),
    }


def test_a_state_without_them_serves_none_rather_than_zeros():
    got = {s.name for f in text_string_to_metric_families(exposition(ExportState())) for s in f.samples}
    assert not {spec.name for spec in m.SELF} & got
    assert "affmon_build_info" in got


def test_openmetrics_gives_the_unit_of_every_name_that_ends_in_one():
    topo, samples = recorded("narrow")
    state = run(*samples, topo=topo)
    registry = CollectorRegistry()
    registry.register(StateCollector(lambda: state, threads=True))
    text = openmetrics_latest(registry).decode()
    units = dict(line.split()[2:4] for line in text.splitlines() if line.startswith("# UNIT "))
    expected = {s.name.removesuffix("_total"): s.unit for s in CATALOGUE if s.unit}
    assert units == expected
    assert {"seconds", "bytes", "ratio"} == set(units.values())
    assert units["affmon_loop_share_ratio"] == "ratio" and units["affmon_process_cpu_seconds"] == "seconds"
    assert "# UNIT" not in exposition(state, threads=True)
