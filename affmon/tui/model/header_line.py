"""The header line's text, without a terminal: host, CPUs / cores / NUMA nodes / GPUs,
interval, NVML, source, clock, paused, as segments that ``fit`` drops least important
first. The header widget draws them; so does the first frame, before Textual has loaded.
The host name, NVML's status and the replayed file's name come from outside (a recording
is any JSON) and go through ``term_safe``."""

from __future__ import annotations

import time

from affmon.core.text import term_safe
from affmon.tui.model.views import HeaderView

SEPARATOR = "  │  "
CLOCK = "clock"  # the clock segment's role
READING = "reading"  # the role of what the last sample read (muted)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def nvml_ok(status: str | None) -> bool:
    return bool(status) and str(status).startswith("NVML:")


def clock_text(h: HeaderView) -> str:
    """When the newest sample was taken, as the header shows it."""
    return time.strftime("%H:%M:%S", time.localtime(h.wall_time_s))


def reading(h: HeaderView) -> str:
    """What the last sample read and what it cost (the segment dropped first)."""
    return f"{h.threads} threads in {h.processes} processes, read in {h.sample_cost_s * 1000:.0f} ms"


def header_segments(h: HeaderView, *, paused: bool, clock_text: str) -> list[tuple[int, str, str]]:
    """(priority, text, style role) segments, in screen order; lower priority is dropped
    first. Roles: "title", "", "muted", "warning", "error", ``READING`` (muted) and
    ``CLOCK`` (muted, drawn by a widget of its own)."""
    segments: list[tuple[int, str, str]] = [(9, "affmon", "title"), (8, term_safe(h.host), "")]
    segments.append(
        (
            7,
            f"{_plural(h.cpus, 'CPU')} · {_plural(h.cores, 'core')} · {_plural(h.numa_nodes, 'NUMA node')}"
            f" · {_plural(h.gpus, 'GPU')}",
            "",
        )
    )
    if h.lagging_interval_s is not None:
        segments.append((9, f"every {h.lagging_interval_s:.1f} s, not {h.interval_s:g} s: falling behind", "warning"))
    else:
        segments.append((5, f"every {h.interval_s:g} s", "muted"))
    if nvml_ok(h.nvml_status):
        segments.append((2, term_safe(str(h.nvml_status)), "muted"))
    else:
        segments.append((8, term_safe(h.nvml_status or "no NVML: running CPU-only"), "warning"))
    if h.notice:
        segments.append((8, "other users' processes are hidden (/proc hidepid)", "warning"))
    source = term_safe(h.source) + (f" {h.position}" if h.position else "")
    if h.finished:
        source += " (ended)"
    # What the screen is outranks everything but the name, at every width: a replay says
    # so with its position; live, the clock is the sign that it is live.
    segments.append((9 if not h.live else 3, source, "warning" if h.finished else "muted"))
    segments.append((9 if h.live else 4, clock_text, CLOCK))
    segments.append((1, reading(h), READING))
    if paused:
        segments.append((10, "PAUSED", "error"))
    return segments


CPU_ONLY_SHORT = "no NVML: CPU-only"


def shorter(text: str) -> str | None:
    """The short form a segment takes before it is dropped, where it has one: the one line
    that says the monitor runs without NVML stays at every width."""
    if text.startswith("no NVML") and text != CPU_ONLY_SHORT:
        return CPU_ONLY_SHORT
    return None


def fit(segments: list[tuple[int, str, str]], width: int, sep: str = SEPARATOR) -> list[tuple[int, str, str]]:
    """Drop the least important segments until the line fits ``width`` (a segment with a
    short form takes it first)."""
    kept = list(segments)
    while kept and len(sep.join(s[1] for s in kept)) > width:
        least = min(kept, key=lambda s: s[0])
        short = shorter(least[1])
        if short is not None:
            kept[kept.index(least)] = (least[0], short, least[2])
        else:
            kept.remove(least)
    return kept
