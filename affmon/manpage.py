"""affmon(1), written from the argument parser: every command and option with its help
text, so the manual cannot say other than ``--help``. ``python -m affmon.manpage`` prints
it; the package installs the copy in ``docs/affmon.1`` as ``share/man/man1/affmon.1``
(``man -M .venv/share/man affmon`` in a venv), and a test checks that copy is this output:
``python -m affmon.manpage > docs/affmon.1`` after a change to the options."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable

SEE_ALSO = "taskset(1), numactl(8), lstopo(1), htop(1), nvidia-smi(1)"
FILES = (
    (
        "$XDG_STATE_HOME/affmon/journal.jsonl",
        "the journal of every mask affmon changed, one per user (by default ~/.local/state/affmon/journal.jsonl); "
        "affmon undo reads it",
    ),
)
ENVIRONMENT = (
    ("AFFMON_READONLY", "1: change nothing (as --readonly): every action shows the command it would run"),
    ("XDG_STATE_HOME", "where the journal lives"),
)
EXIT = (
    ("0", "done; for diagnose and audit, nothing at warn or bad"),
    ("1", "diagnose or audit found something at warn or bad; an action failed and was rolled back"),
    ("2", "bad input (a one-line error says which)"),
)


def _roff(text: str) -> str:
    """Text for a roff line: backslashes doubled, a leading dot or quote escaped, dashes
    as minus signs (options copy and paste as typed)."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    if text.startswith((".", "'")):
        text = "\\&" + text
    return text


def _invocation(action: argparse.Action) -> str:
    if not action.option_strings:
        return action.metavar if isinstance(action.metavar, str) else action.dest.upper()
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return names
    metavar = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
    if action.nargs in ("+", "*"):
        return f"{names} {metavar} ..."
    return f"{names} {metavar}"


def _help(action: argparse.Action, prog: str) -> str:
    """The help text as ``--help`` prints it (``%(default)s`` and the like filled in)."""
    if not action.help:
        return ""
    return argparse.HelpFormatter(prog)._expand_help(action)


def _options(actions: Iterable[argparse.Action], prog: str) -> list[str]:
    lines = []
    for action in actions:
        if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
            continue
        if "--help" in action.option_strings:
            continue
        lines += [".TP", f".B {_roff(_invocation(action))}", _roff(_help(action, prog)) or "\\&"]
    return lines


def _usage(parser: argparse.ArgumentParser) -> str:
    """The usage line, unwrapped; the list of commands as COMMAND (each has its own line)."""
    usage = " ".join(parser.format_usage().split())[len("usage: ") :]
    return re.sub(r"\{[a-z,]+\} \.\.\.", "[COMMAND ...]", usage)


def render(parser: argparse.ArgumentParser) -> str:
    """The manual page, roff (man macros)."""
    subparsers = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    commands: dict[str, argparse.ArgumentParser] = dict(subparsers.choices) if subparsers else {}
    helps = {c.dest: c.help or "" for c in (subparsers._choices_actions if subparsers else [])}
    out = [
        '.TH AFFMON 1 "" "affmon" "User Commands"',
        ".nh",  # options are not hyphenated
        ".ad l",
        ".SH NAME",
        "affmon \\- " + _roff("where GPU training processes' threads run, and re-pin them"),
        ".SH SYNOPSIS",
        f".B {_roff(_usage(parser))}",
    ]
    for sub in commands.values():
        out += [".br", f".B {_roff(_usage(sub))}"]
    out += [".SH DESCRIPTION", _roff(parser.description or "")]
    out += [".SH OPTIONS", "Without a command: the monitor."]
    out += _options(parser._actions, parser.prog)
    out.append(".SH COMMANDS")
    for name, sub in commands.items():
        out += [".SS " + _roff(name), _roff(helps.get(name, ""))]
        out += _options(sub._actions, sub.prog)
    for title, rows in (("EXIT STATUS", EXIT), ("ENVIRONMENT", ENVIRONMENT), ("FILES", FILES)):
        out.append(f".SH {title}")
        for key, text in rows:
            out += [".TP", f".B {_roff(key)}", _roff(text)]
    out += [".SH SEE ALSO", _roff(SEE_ALSO)]
    return "\n".join(out) + "\n"


def main() -> int:
    from affmon.cli import build_parser

    sys.stdout.write(render(build_parser()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
