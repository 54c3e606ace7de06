"""Makers of the recordings committed to the repository."""
