"""The command line's backstop against control characters in what it prints.

Text renderers escape each foreign string where they build a line (``text.term_safe``).
This catches what one of them missed, or what another module quotes (an OS error naming a
file, a pin's message): while a text command runs, ``sys.stdout`` and ``sys.stderr``
pass every write through ``text.term_safe_output``, which keeps "\\n" and "\\t" and turns
every other code point a terminal acts on into ``?``. affmon's own text holds no such
code point, and neither does its JSON (``json.dumps`` escapes them), so nothing of
affmon's changes. The monitor (Textual writes escape sequences on purpose) and the
commands whose output is data (``record``, ``export``) are not wrapped.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO, cast

from affmon.core.text import term_safe_output


class EscapingStream:
    """A text stream that escapes what is written, then hands it to ``stream``;
    everything else (flush, fileno, isatty, encoding) is the wrapped stream's."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(term_safe_output(text))

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _escaping(stream: TextIO | None) -> TextIO | None:
    if stream is None or isinstance(stream, EscapingStream):
        return stream
    return cast(TextIO, EscapingStream(stream))


@contextmanager
def escaped_streams() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` escape what is written, until the block ends."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _escaping(sys.stdout), _escaping(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
