"""How text from other users (process and thread names, command lines, users, GPU names,
host and file names) reaches a terminal: ``term_safe``; and ``cut``, a text cut to a width.
Pure string functions, below the rest of the core."""

from __future__ import annotations

import re

# Code points a terminal acts on instead of showing. Any user can put them in a process or
# thread name (/proc/self/comm, prctl) or a command line, and a recording is JSON that may
# hold any code point:
# - C0 controls: ESC starts the sequences that set the window title ("\x1b]0;...\x07")
#   or wipe the screen ("\x1b[2J"); "\n" and "\r" forge lines;
# - DEL, and the C1 controls (U+009B is a one-character CSI where 8-bit controls are on);
# - U+2028/U+2029 (line and paragraph separators);
# - the bidirectional marks, embeddings, overrides and isolates (U+061C, U+200E/F,
#   U+202A-202E, U+2066-2069): they reorder what follows them on the line;
# - lone surrogates (U+D800-DFFF): no UTF-8 encoding exists, so printing one raises.
# As character classes (a translation table of its 2,100 code points held 0.2 MiB):
_TERMINAL_ACTIVE = r"\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_ACTIVE = re.compile(f"[{_TERMINAL_ACTIVE}]")
# affmon's own layout, the lines and tabs it writes itself, stays in its output.
_ACTIVE_OUTPUT = re.compile(f"(?![\\n\\t])[{_TERMINAL_ACTIVE}]")


def term_safe(text: str) -> str:
    """``text`` as a terminal may show it: each code point a terminal would act on (see
    ``_TERMINAL_ACTIVE``; "\\n" and "\\t" included) becomes ``?``, as ``ps`` shows such names.
    One code point in, one out, so lengths and cuts stay where they were. For every foreign
    string made into display text: process and thread names, command lines, users, GPU
    names, PCI ids, host and file names. JSON keeps the raw value (``json.dumps`` escapes)."""
    if text.isascii() and text.isprintable():  # nearly every name: no table walk
        return text
    return _ACTIVE.sub("?", text)


def term_safe_output(text: str) -> str:
    """``term_safe`` for whole lines of affmon's own output: "\\n" and "\\t" stay (the
    layout), every other code point a terminal would act on becomes ``?``."""
    return _ACTIVE_OUTPUT.sub("?", text)


# Finding codes as the process table shows them (full codes in the detail pane).


def cut(text: str, width: int) -> str:
    """``text``, cut with ``…`` when longer than ``width`` (at least 1)."""
    return text if len(text) <= width else text[: width - 1] + "…"
