"""Short, aligned text for numbers with units: what every cell of the TUI shows, and
``term_safe``: how text from other users (names, command lines) reaches a terminal.

Pure string functions. Unknown values (``None``) are shown as ``-``, never as a made-up
zero. Widths are fixed per kind so columns line up (right-aligned by the caller).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from affmon.core.cpuset import format_cpulist

UNKNOWN = "-"

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
SHORT_CODES = {
    "STARVED": "STARV",
    "MASK_TOO_NARROW": "NARROW",
    "CONTENDED": "CONTEND",
    "CROSS_NUMA": "XNUMA",
    "GPU_STARVED": "GPUSTV",
    "PCIE_DEGRADED": "PCIE",
    "AFFINITY_DRIFT": "DRIFT",
    "OVERSUBSCRIBED": "OVERSUB",
    "CONFINED_THREAD": "CONFINE",
    "STALLED": "STALLED",
    "GIL_BOUND": "GIL",
}


def short_code(code: str) -> str:
    return SHORT_CODES.get(code, code[:7])


def percent(value: float | None, digits: int = 0) -> str:
    """``57%``; ``-`` when unknown."""
    return UNKNOWN if value is None else f"{value:.{digits}f}%"


def cpu_percent(value: float | None) -> str:
    """CPU use, 100 = one CPU: one decimal below 100, none above (``7.5``, ``812``)."""
    if value is None:
        return UNKNOWN
    return f"{value:.1f}" if value < 99.95 else f"{value:.0f}"


def ratio_percent(value: float | None) -> str:
    """A 0..1 ratio as a percentage (``45%``)."""
    return UNKNOWN if value is None else f"{value * 100:.0f}%"


def per_s(value: float | None) -> str:
    """Events per second in at most five characters: ``7``, ``312``, ``4.1k``, ``12k``."""
    if value is None:
        return UNKNOWN
    if value < 999.5:
        return f"{value:.0f}"
    if value < 9_950:
        return f"{value / 1000:.1f}k"
    if value < 999_500:
        return f"{value / 1000:.0f}k"
    return f"{value / 1e6:.1f}M"


def bytes_per_s(value: float | None) -> str:
    """Binary units, three significant digits: ``1.51 GiB/s``, ``142 MiB/s``."""
    if value is None:
        return UNKNOWN
    for unit in ("B/s", "KiB/s", "MiB/s", "GiB/s", "TiB/s"):
        if value < 999.5 or unit == "TiB/s":
            if unit == "B/s":
                return f"{value:.0f} {unit}"
            return f"{value:.2f} {unit}" if value < 9.995 else f"{value:.3g} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def gib(value: int | None) -> str:
    return UNKNOWN if value is None else f"{value / 2**30:.1f}"


def cut(text: str, width: int) -> str:
    """``text``, cut with ``…`` when longer than ``width`` (at least 1)."""
    return text if len(text) <= width else text[: width - 1] + "…"


def cpus(value: Iterable[int] | None, width: int = 0) -> str:
    """A cpulist, cut with ``…`` when longer than ``width`` (0: never cut)."""
    if value is None:
        return UNKNOWN
    text = format_cpulist(value) or UNKNOWN
    return cut(text, width) if width else text


def nodes(value: Iterable[int]) -> str:
    return ",".join(str(n) for n in value) or UNKNOWN


def node(value: int | None) -> str:
    return "?" if value is None else str(value)
