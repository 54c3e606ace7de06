"""The processes the benchmarks and harnesses measure: waking threads and training jobs."""
