"""Harnesses and probes for a machine with NVIDIA GPUs (and torch)."""
