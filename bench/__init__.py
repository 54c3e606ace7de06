"""affmon's benchmarks, probes and harnesses; run from the repository root as modules (bench/README.md)."""
