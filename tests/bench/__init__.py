"""Tests of the benchmarks' own parts (bench/): workloads and clients, not timings."""
