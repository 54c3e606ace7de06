"""Peer benchmarks: affmon's cost next to a peer tool's (ps, htop), in the same run."""
