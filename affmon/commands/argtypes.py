"""argparse types shared by every command: each refuses bad input with one line that
names the value (argparse turns ArgumentTypeError into the CLI's one-line error)."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value > 3600:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 3600 seconds: {text!r}")
    return value


def count(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not (text.isascii() and text.isdigit()) or not low <= int(text) <= high:
            raise argparse.ArgumentTypeError(f"must be a whole number from {low} to {high}: {text!r}")
        return int(text)

    return parse


def pid(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"not a process id: {text!r}")
    return int(text)


def speed(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.01 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"must be between 0.01 and 1000: {text!r}")
    return value
