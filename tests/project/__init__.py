"""The repository's contracts: the layers, the core's purity, the dependencies, the suite's own cleanup."""
