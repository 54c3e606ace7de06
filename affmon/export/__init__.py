"""``affmon export``: the latest placement state as Prometheus metrics.

Pure, importing nothing that touches the system or prometheus-client:

* ``catalogue``: every metric, its type, unit-bearing name, labels and help text;
* ``state``: ``ExportState``, the frozen state one tick produces, and ``step``, which
  advances the tick the monitor and ``diagnose`` run too (``affmon.core.rules.tick``:
  rates, every rule, findings debounced) by a new ``Sample`` and integrates the counters
  (exited processes dropped);
* ``families``: ``ExportState`` -> metric families (plain values, testable without HTTP);
* ``scale``: the series a node of a given shape serves, counted from the catalogue, and
  what a fleet of them costs Prometheus.

Impure, kept thin:

* ``collector``: hands those families to prometheus-client at scrape time;
* ``shapes``: what a request's body depends on (format, gzip, ``name[]``), as
  prometheus-client's content negotiation reads it;
* ``render``: each state's bodies, formatted once per family and shared by every request
  of their shape;
* ``service`` and ``server``: the sampling thread and the HTTP server;
* ``replay``: a recording's samples as the sampling thread's, paced as recorded and
  looping (``affmon export --replay``).
"""

# Threads given per-thread series by default: 9 series each, about 0.75 MB of text for all
# of them (docs/export.md, "Cost"). Here, not in ``families``, so that building the
# command line's parser does not load the exporter (and the findings under it).
MAX_THREADS = 1000
