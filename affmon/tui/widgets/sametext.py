"""``same_text``: whether two Rich ``Text`` values draw the same.

``Text.__eq__`` compares the characters and the spans only: ``Text("3", style="dim")``
equals ``Text("3")``. A widget that skips a cell or a line because it is "equal" to what
is shown would then keep the old colour (a PID that turns red with a finding, a mask that
turns dim). This compares everything that changes what is drawn.
"""

from __future__ import annotations

from rich.text import Text


def same_text(a: Text | str, b: Text | str) -> bool:
    if a is b:
        return True
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    return (
        a.plain == b.plain
        and a.spans == b.spans
        and a.style == b.style
        and a.justify == b.justify
        and a.overflow == b.overflow
        and a.no_wrap == b.no_wrap
        and a.end == b.end
        and a.tab_size == b.tab_size
    )


def same_cells(a: tuple[Text, ...], b: tuple[Text, ...]) -> bool:
    return a is b or (len(a) == len(b) and all(same_text(x, y) for x, y in zip(a, b, strict=True)))
