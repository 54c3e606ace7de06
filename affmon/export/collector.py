"""The prometheus-client side: a custom collector that formats the latest ``ExportState``.

``collect`` runs on the HTTP server's thread at every scrape. It reads the published
state once (one reference, so one consistent tick) and only formats it: no /proc, no
NVML, no lock shared with the sampler.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from affmon.export import MAX_THREADS
from affmon.export.catalogue import CATALOGUE, MetricSpec
from affmon.export.families import families
from affmon.export.state import ExportState


def _empty(spec: MetricSpec) -> CounterMetricFamily | GaugeMetricFamily:
    if spec.kind == "counter":  # it drops and re-adds _total
        return CounterMetricFamily(spec.name, spec.help, labels=spec.labels, unit=spec.unit)
    return GaugeMetricFamily(spec.name, spec.help, labels=spec.labels, unit=spec.unit)


class StateCollector:
    def __init__(
        self, latest: Callable[[], ExportState], *, threads: bool = False, max_threads: int = MAX_THREADS
    ) -> None:
        self._latest = latest
        self.threads = threads
        self.max_threads = max_threads

    def describe(self) -> Iterator[Metric]:
        """Names only, so registering never runs ``collect``."""
        for spec in CATALOGUE:
            if self.threads or not spec.per_thread:
                yield _empty(spec)

    def collect(self) -> Iterator[Metric]:
        for family in families(self._latest(), threads=self.threads, max_threads=self.max_threads):
            metric = _empty(family.spec)
            for labels, value in family.series:
                metric.add_metric(labels, value)
            yield metric
