"""Actions: the only code in affmon that changes the system (thread affinity), each with
a dry-run twin, a result value, and a write-ahead journal for undo.

The names below are loaded on first use (PEP 562): the monitor reads the journal at start
and must not pay for loading the pin, tune and migration code before its first frame. The
``pin`` and ``undo`` functions are imported from their modules (``affmon.actions.pin``,
``affmon.actions.undo``): a package attribute of that name is the module once it is loaded."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from affmon.actions.journal import (
        Journal,
        JournalEntry,
        JournalError,
        ThreadRecord,
        default_journal_path,
        expected_masks,
    )
    from affmon.actions.pin import PinResult
    from affmon.actions.threads import AffinityOps, DryRunAffinity, OsAffinity, ThreadResult
    from affmon.actions.undo import UndoResult

_HOME = {
    "AffinityOps": "threads",
    "DryRunAffinity": "threads",
    "Journal": "journal",
    "JournalEntry": "journal",
    "JournalError": "journal",
    "OsAffinity": "threads",
    "PinResult": "pin",
    "ThreadRecord": "journal",
    "ThreadResult": "threads",
    "UndoResult": "undo",
    "default_journal_path": "journal",
    "expected_masks": "journal",
}

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
]


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
