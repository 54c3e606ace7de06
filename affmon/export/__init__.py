"""``affmon export``: the latest placement state as Prometheus metrics.

Pure, importing nothing that touches the system or prometheus-client:

* ``catalogue``: every metric, its type, unit-bearing name, labels and help text;
* ``state``: ``ExportState``, the frozen state one tick produces, and ``step``, which
  turns the previous state and a new ``Sample`` into the next one (counters integrated,
  findings debounced, exited processes dropped);
* ``families``: ``ExportState`` -> metric families (plain values, testable without HTTP).

Impure, kept thin:

* ``collector``: hands those families to prometheus-client at scrape time;
* ``service``: the sampling thread and the HTTP server.
"""
