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
from affmon.actions.pin import (
    AffinityOps,
    DryRunAffinity,
    OsAffinity,
    PinResult,
    ThreadResult,
    UndoResult,
    pin,
    undo,
)

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
