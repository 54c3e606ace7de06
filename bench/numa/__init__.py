"""Proofs that need a machine with several NUMA nodes."""
