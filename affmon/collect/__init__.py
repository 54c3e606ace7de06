"""Collectors: the only code that reads ``/proc`` and ``/sys`` (under a root given as a
parameter, default ``/``, so tests and ``--root`` can point them at a recorded tree)."""
