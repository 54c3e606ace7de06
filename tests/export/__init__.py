"""Tests of affmon.export, the Prometheus exporter, and its alert rules and dashboard."""
