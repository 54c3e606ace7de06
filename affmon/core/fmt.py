"""Short, aligned text for numbers with units: what every cell of the monitor shows, as the
fleet view and ``affmon report`` spell them too.

Pure string functions. Unknown values (``None``) are shown as ``-``, never as a made-up
zero. Widths are fixed per kind so columns line up (right-aligned by the caller).
"""

from __future__ import annotations

from collections.abc import Iterable

from affmon.core.model.cpuset import format_cpulist
from affmon.core.text import cut

UNKNOWN = "-"

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
