"""``affmon fleet``: the fleet as the exporters' Prometheus knows it (docs/fleet.md).

``queries`` (the PromQL, one query per panel) and ``model`` (answers -> nodes, jobs,
findings with their age, one node's processes) are pure; ``client`` is the only code that
talks to Prometheus (HTTP, standard library); ``source`` runs one refresh; ``text`` words it
(``--once``, ``--json``); ``app`` is the Textual view; ``command`` the command line.
"""
