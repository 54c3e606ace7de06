"""Tests of affmon.fleet, the fleet view over Prometheus."""
