"""What an answer's body depends on, read from a request: its ``Shape``.

prometheus-client's app reads the method, path, query string, ``Accept`` and
``Accept-Encoding``, but the body it makes from them takes few forms: text or OpenMetrics,
gzipped or not, every family or those ``name[]`` names. A request is reduced to those three
facts, so that requests differing anywhere else (a new query key, a new ``Accept`` value,
a padded URL) are sent one shared body instead of each costing a render:

* **format**: the one prometheus-client's ``choose_encoder`` picks from ``Accept`` (its
  rules: the first entry that is ``application/openmetrics-text`` of version 1.0.0 or later,
  or of no version, gives OpenMetrics; anything else, text). The answer is then the body
  and ``Content-Type`` it gives for ``application/openmetrics-text;version=1.0.0`` or for no
  ``Accept`` at all: names escaped with underscores, which leaves every affmon name as it
  is (they are all legacy Prometheus names). An ``Accept`` it cannot read (a version such
  as ``1.a``, on which it raises) is answered as text.
* **gzip**: whether ``Accept-Encoding`` lists ``gzip`` (prometheus-client's
  ``gzip_accepted``).
* **names**: ``None`` without a non-empty ``name[]``; else the sorted ``name[]`` values that
  are names of samples the exporter serves (any other selects nothing, as in
  prometheus-client's restricted registry: ``()`` is an empty body).

A request that is not a ``GET`` of ``/metrics`` has no shape: ``affmon.export.render``
answers it without rendering (a landing page at ``/``, 404 elsewhere, prometheus-client's
app for another method on ``/metrics``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from urllib.parse import parse_qs

from prometheus_client.exposition import choose_encoder, gzip_accepted

OPENMETRICS_ACCEPT = "application/openmetrics-text;version=1.0.0"
METRICS_PATH = "/metrics"


@dataclass(frozen=True, slots=True)
class Shape:
    openmetrics: bool
    gzip: bool
    names: tuple[str, ...] | None = None  # None: every family

    @property
    def filtered(self) -> bool:
        return self.names is not None


def picks_openmetrics(accept: str) -> bool:
    """Whether prometheus-client answers this ``Accept`` in OpenMetrics."""
    try:
        _, content_type = choose_encoder(accept)
    except (TypeError, ValueError):  # it compares a version such as "1.a" with (1, 0, 0)
        return False
    return content_type.startswith("application/openmetrics-text")


def shape_of(environ: Mapping[str, object], served: Collection[str]) -> Shape | None:
    """The shape of a request's answer; ``served``: the sample names the exporter serves. None:
    not a request for metrics."""
    if environ.get("REQUEST_METHOD") != "GET" or environ.get("PATH_INFO") != METRICS_PATH:
        return None
    params = parse_qs(str(environ.get("QUERY_STRING", "")))
    wanted = params.get("name[]")
    return Shape(
        openmetrics=picks_openmetrics(str(environ.get("HTTP_ACCEPT", ""))),
        gzip=gzip_accepted(str(environ.get("HTTP_ACCEPT_ENCODING", ""))),
        names=None if wanted is None else tuple(sorted(set(wanted).intersection(served))),
    )
