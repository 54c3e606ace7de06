"""Actions: the only code in affmon that changes the system (thread affinity), each with
a dry-run twin, a result value, and a write-ahead journal for undo."""

from affmon.actions.journal import (
    Journal,
    JournalEntry,
    JournalError,
    ThreadRecord,
    default_journal_path,
    expected_masks,
)
from affmon.actions.pin import PinResult, pin
from affmon.actions.threads import AffinityOps, DryRunAffinity, OsAffinity, ThreadResult
from affmon.actions.undo import UndoResult, undo

__all__ = [
    "AffinityOps",
    "DryRunAffinity",
    "Journal",
    "JournalEntry",
    "JournalError",
    "OsAffinity",
    "PinResult",
    "ThreadRecord",
    "ThreadResult",
    "UndoResult",
    "default_journal_path",
    "expected_masks",
    "pin",
    "undo",
]
