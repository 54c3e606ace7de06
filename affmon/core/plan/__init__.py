"""What to do about it: the planner and its core units and L3 shares, how many CPUs a job
needs, the advice a finding carries, placements, tuning, the audit of a placement, isolation
of other tenants, the GPUs a process may see. Imports the model and the rules."""
