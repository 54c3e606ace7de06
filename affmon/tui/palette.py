"""Colours for Rich text inside widgets, taken from the running Textual theme (never
hard-coded), so cells, the core map and the CSS agree and a theme change follows.

Job colours: eight hues spaced evenly round the colour wheel from the theme's primary
colour, at one saturation and a lightness that reads on the theme's background. An
8-GPU node runs eight ranks: with four colours cycling, ranks 0 and 4 looked the same. The
hue nearest the theme's error colour comes last, so a node of fewer jobs never shows a
job in the colour of a bad finding. A shared CPU is not a ninth hue: it is drawn on a
background of the error colour, which no job colour and no severity text uses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.app import App
from textual.color import Color

from affmon.core.rules.base import Severity

JOB_COLOURS = 8


@dataclass(frozen=True)
class Palette:
    error: str
    warning: str
    success: str
    accent: str
    muted: str
    disabled: str
    foreground: str
    jobs: tuple[str, ...]  # one colour per training job, cycled after JOB_COLOURS
    shared: str = "reverse"  # a CPU two jobs (or a job and another busy process) shared

    def severity(self, severity: Severity | None) -> str:
        if severity is None:
            return self.foreground
        return {Severity.BAD: self.error, Severity.WARN: self.warning}.get(severity, self.accent)

    def job(self, index: int) -> str:
        return self.jobs[index % len(self.jobs)]


def _hue_distance(a: float, b: float) -> float:
    d = abs(a - b) % 1.0
    return min(d, 1.0 - d)


def job_hues(primary: Color, error: Color, background: Color, count: int = JOB_COLOURS) -> tuple[str, ...]:
    """``count`` colours of distinct hue, the one closest to ``error`` last."""
    start = primary.hsl.h
    lightness = 0.68 if background.brightness < 0.5 else 0.38
    hues = [(start + i / count) % 1.0 for i in range(count)]
    nearest = min(hues, key=lambda h: _hue_distance(h, error.hsl.h))
    hues.remove(nearest)
    hues.append(nearest)
    return tuple(Color.from_hsl(h, 0.75, lightness).hex for h in hues)


def palette(app: App[Any]) -> Palette:
    v = app.theme_variables
    background = Color.parse(v.get("background", "#000000"))

    def solid(name: str, fallback: str) -> str:
        color = Color.parse(v.get(name, fallback))
        return (background + color).hex if color.a < 1 else color.hex

    error = Color.parse(solid("error", "red"))
    foreground = solid("foreground", "white")
    return Palette(
        error=error.hex,
        warning=solid("warning", "yellow"),
        success=solid("success", "green"),
        accent=solid("accent", "cyan"),
        muted=solid("foreground-muted", "grey"),
        disabled=solid("foreground-disabled", "grey"),
        foreground=foreground,
        jobs=job_hues(Color.parse(solid("primary", "blue")), error, background),
        shared=f"bold {foreground} on {background.blend(error, 0.7).hex}",
    )
