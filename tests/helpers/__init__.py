"""Modules and scripts the tests import or start: workloads with a known shape, fakes, recordings."""
