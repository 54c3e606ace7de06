"""Colours for Rich text inside widgets, taken from the running Textual theme (never
hard-coded), so cells, the core map and the CSS agree and a theme change follows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.app import App
from textual.color import Color

from affmon.core.findings import Severity


@dataclass(frozen=True)
class Palette:
    error: str
    warning: str
    success: str
    accent: str
    muted: str
    disabled: str
    foreground: str
    jobs: tuple[str, ...]  # one colour per training job, cycled

    def severity(self, severity: Severity | None) -> str:
        if severity is None:
            return self.foreground
        return {Severity.BAD: self.error, Severity.WARN: self.warning}.get(severity, self.accent)

    def job(self, index: int) -> str:
        return self.jobs[index % len(self.jobs)]


def palette(app: App[Any]) -> Palette:
    v = app.theme_variables
    background = Color.parse(v.get("background", "#000000"))

    def solid(name: str, fallback: str) -> str:
        color = Color.parse(v.get(name, fallback))
        return (background + color).hex if color.a < 1 else color.hex

    return Palette(
        error=solid("error", "red"),
        warning=solid("warning", "yellow"),
        success=solid("success", "green"),
        accent=solid("accent", "cyan"),
        muted=solid("foreground-muted", "grey"),
        disabled=solid("foreground-disabled", "grey"),
        foreground=solid("foreground", "white"),
        jobs=(
            solid("primary-lighten-2", "blue"),
            solid("success", "green"),
            solid("primary-lighten-3", "cyan"),
            solid("secondary-lighten-2", "blue"),
        ),
    )
