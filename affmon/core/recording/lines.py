"""JSON-lines framing for recordings: numbered, non-blank lines out of a stream of byte
chunks, one line at a time and none longer than a cap.

A reader that splits a whole file in memory holds the file and a list of every line
(a 500 MB gzip recording of newlines took 7.9 GB that way). Here only the line being
read is held: runs of blank lines are skipped a chunk at a time without being kept, and
a line that grows past ``max_line_bytes`` is refused with a ``ParseError`` naming it,
so memory is bounded by the cap plus a chunk whatever the stream holds. No I/O: the
caller hands in the chunks (``affmon.sources.stream.read_lines`` reads them from a file).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from affmon.core.errors import ParseError

# A sample line of a 16-core machine with ~600 threads is 70 KB; a machine with 100,000
# threads would write about 12 MB. 64 MiB is far above any real line and still bounded.
MAX_LINE_BYTES = 64 << 20

_NON_BLANK = re.compile(rb"\S")  # bytes: not one of " \t\n\r\v\f", as bytes.strip removes


def split_lines(chunks: Iterable[bytes], name: str, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` for each line that is not blank, counting from 1 as an
    editor does (lines end at ``\\n``), with the surrounding whitespace removed. A line
    that is not UTF-8, or longer than ``max_line_bytes``, is one ``ParseError``."""
    number = 0  # lines ended so far
    partial: bytearray | None = None  # a non-blank line begun in an earlier chunk
    for chunk in chunks:
        pos = 0
        while pos < len(chunk):
            if partial is None:
                found = _NON_BLANK.search(chunk, pos)
                if found is None:  # the rest of the chunk is blank: count its lines, keep nothing
                    number += chunk.count(b"\n", pos)
                    break
                start = chunk.rfind(b"\n", pos, found.start()) + 1
                if start:  # blank lines before this one, all in this chunk
                    number += chunk.count(b"\n", pos, start)
                else:
                    start = pos
                end = chunk.find(b"\n", found.start())
                if end < 0:
                    partial = bytearray(chunk[start:])
                    _check_length(len(partial), number + 1, name, max_line_bytes)
                    break
                number += 1
                _check_length(end - start, number, name, max_line_bytes)
                yield number, _text(chunk[start:end], number, name)
            else:
                end = chunk.find(b"\n", pos)
                partial += chunk[pos : len(chunk) if end < 0 else end]
                _check_length(len(partial), number + 1, name, max_line_bytes)
                if end < 0:
                    break
                number += 1
                line, partial = bytes(partial), None
                yield number, _text(line, number, name)
            pos = end + 1
    if partial is not None:  # the last line, with no newline after it
        yield number + 1, _text(bytes(partial), number + 1, name)


def _check_length(length: int, number: int, name: str, max_line_bytes: int) -> None:
    if length > max_line_bytes:
        raise ParseError(
            f"{name}, line {number}: longer than {max_line_bytes:,} bytes, not a line of an affmon recording"
        )


def _text(line: bytes, number: int, name: str) -> str:
    try:
        return line.strip().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParseError(f"{name}, line {number}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
