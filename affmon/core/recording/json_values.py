"""Readers of one JSON value each, for the recording format: the value as written, or a
``ParseError``. Nothing is converted (``int("7")``, ``bool("no")``, ``int(1.5)`` and
``int(Infinity)`` would make up a value or raise something else), so a sample read is
exactly what the file says, with the types ``Sample`` declares: a hand-edited or damaged
file cannot crash the rates, the rules or the monitor later on. Pure."""

from __future__ import annotations

import math
from typing import Any

from affmon.core.errors import ParseError


def read_int(value: Any, what: str) -> int:
    if type(value) is not int:  # bool is a subclass of int; 1.0 is not a count
        raise ParseError(f"{what}: expected a whole number, got {read_kind(value)}")
    return value


def read_opt_int(value: Any, what: str) -> int | None:
    return None if value is None else read_int(value, what)


def read_float(value: Any, what: str) -> float:
    if type(value) not in (int, float) or not math.isfinite(value):
        raise ParseError(f"{what}: expected a finite number, got {read_kind(value)}")
    return float(value)


def read_opt_float(value: Any, what: str) -> float | None:
    return None if value is None else read_float(value, what)


def read_str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ParseError(f"{what}: expected text, got {read_kind(value)}")
    return value


def read_opt_str(value: Any, what: str) -> str | None:
    return None if value is None else read_str(value, what)


def read_bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise ParseError(f"{what}: expected true or false, got {read_kind(value)}")
    return value


def read_list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise ParseError(f"{what}: expected a list, got {read_kind(value)}")
    return value


def read_dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ParseError(f"{what}: expected an object, got {read_kind(value)}")
    return value


def read_kind(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return "null" if value is None else type(value).__name__
