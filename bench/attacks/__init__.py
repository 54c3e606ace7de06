"""Hostile inputs: network attacks on the exporter, names that try to take over a terminal."""
