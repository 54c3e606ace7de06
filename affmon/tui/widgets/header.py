"""The header line: host, CPUs / cores / NUMA nodes / GPUs, interval, NVML, source,
paused. Segments that do not fit the width are dropped, least important first. The host
name, NVML's status and the replayed file's name come from outside (a recording is any
JSON) and are shown through ``term_safe``."""

from __future__ import annotations

import dataclasses
import time

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal

from affmon.core.fmt import term_safe
from affmon.tui.model.views import HeaderView
from affmon.tui.palette import Palette
from affmon.tui.widgets.quiet import QuietStatic

SEPARATOR = "  │  "
CLOCK = "clock"  # the clock segment's role
READING = "reading"  # the role of what the last sample read (muted)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def nvml_ok(status: str | None) -> bool:
    return bool(status) and str(status).startswith("NVML:")


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
    segments.append((6 if h.source != "live" else 3, source, "warning" if h.finished else "muted"))
    # Live, the clock outranks the interval: it is the one sign that the screen is live (at
    # 140 columns without NVML its warning leaves room for one of them). A replay's position
    # says more than its recorded time.
    segments.append((6 if h.source == "live" else 4, clock_text, CLOCK))
    segments.append((1, reading(h), READING))
    if paused:
        segments.append((10, "PAUSED", "error"))
    return segments


def fit(segments: list[tuple[int, str, str]], width: int, sep: str = SEPARATOR) -> list[tuple[int, str, str]]:
    """Drop the least important segments until the line fits ``width``."""
    kept = list(segments)
    while kept and len(sep.join(s[1] for s in kept)) > width:
        kept.remove(min(kept, key=lambda s: s[0]))
    return kept


class HeaderBar(Horizontal):
    """One line at the top; laid out again when its width changes. The line is drawn by
    three text widgets side by side: what comes before the clock, the clock, and what comes
    after it. A tick that moves only the clock (most ticks of a quiet machine) so redraws
    its eight cells, not the whole line: Textual renders a changed widget's line in full,
    and the header's line with its ten styled pieces costs the UI thread about half a
    millisecond a tick to render and lay out on a two-core VM."""

    DEFAULT_CSS = """
    HeaderBar > QuietStatic { width: auto; height: 1; }
    HeaderBar > #header-tail { width: 1fr; }
    """

    _last: tuple[HeaderView | None, bool, Palette, str] | None = None
    _laid_out: tuple[HeaderView, str | int, bool, Palette, int] | None = None  # what the pieces were laid out for
    _clock_shown = False
    _reading_shown = False

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._pieces = (QuietStatic(id="header-head"), QuietStatic(id="header-clock"), QuietStatic(id="header-tail"))

    def compose(self) -> ComposeResult:
        yield from self._pieces

    def on_resize(self) -> None:
        if self._last is not None:
            header, paused, palette, loading = self._last
            self.show(header, paused=paused, palette=palette, loading=loading)

    @property
    def text(self) -> Text:
        """The whole line as shown."""
        return Text("").join(piece.render() for piece in self._pieces)

    def show(self, header: HeaderView | None, *, paused: bool, palette: Palette, loading: str = "") -> None:
        self._last = (header, paused, palette, loading)
        head, clock, tail = self._pieces
        if header is None:
            self._laid_out = None
            head.put(Text.assemble(("affmon", "bold"), "  " + loading))
            clock.put(Text(""))
            tail.put(Text(""))
            return
        clock_text = time.strftime("%H:%M:%S", time.localtime(header.wall_time_s))
        width = max(20, self.size.width - 2)
        # All but the clock as at the last tick (a quiet machine's usual tick): only the clock
        # is new. What the sample read changes most ticks (its cost in ms, the count of
        # threads); where it did not fit the line, only its length can change what fits.
        read = reading(header)
        rest = dataclasses.replace(header, wall_time_s=0.0, sample_cost_s=0.0, threads=0, processes=0)
        if self._laid_out == (rest, read if self._reading_shown else len(read), paused, palette, width):
            if self._clock_shown:
                clock.put(Text(clock_text, style=palette.muted))
            return
        segments = fit(header_segments(header, paused=paused, clock_text=clock_text), width)
        self._reading_shown = any(role == READING for _, _, role in segments)
        self._laid_out = (rest, read if self._reading_shown else len(read), paused, palette, width)
        styles = {
            "title": "bold",
            "muted": palette.muted,
            "warning": f"bold {palette.warning}",
            "error": f"bold reverse {palette.error}",
            READING: palette.muted,
            "": "",
        }
        texts = [Text(), Text(), Text()]  # before the clock, the clock, after it
        piece = 0
        for i, (_, part, role) in enumerate(segments):
            if i:
                texts[piece].append(SEPARATOR, style=palette.disabled)  # the clock's goes before it
            if role == CLOCK:
                texts[1].append(part, style=palette.muted)
                piece = 2
            else:
                texts[piece].append(part, style=styles[role])
        self._clock_shown = piece == 2
        for widget, text in zip(self._pieces, texts, strict=True):
            widget.put(text)
