"""Tests of affmon.sources: live and replayed samples."""
