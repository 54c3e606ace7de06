"""Whole-program tests: a shared machine, an unprivileged user, the remedies live, NUMA guests."""
