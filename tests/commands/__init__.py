"""Tests of the command line (affmon.cli, affmon.commands) as a user runs it."""
