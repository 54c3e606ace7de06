"""Tests of affmon.actions: pin, undo, isolate, tune and the journal, in private PID namespaces."""
