"""Actions: the only code in affmon that changes the system (thread affinity), each with
a dry-run twin, a result value, and a write-ahead journal for undo.

Each name is imported from its module (``affmon.actions.pin``, ``affmon.actions.journal``,
...); the package itself loads none of them, so the monitor, which reads the journal at
start, does not pay for loading the pin, tune and migration code before its first frame."""
