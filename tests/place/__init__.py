"""Tests of affmon.place, the in-script placement API."""
