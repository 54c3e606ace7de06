"""Tests of affmon.core: the model, the rules, the planner, the recording format (pure)."""
