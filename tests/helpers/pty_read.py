"""Reading what a program writes to a pseudo-terminal that a test holds (``pty.fork``)."""

from __future__ import annotations

import os
import select
import time


def read_pty(fd: int, until: float, want: bytes | None = None, keep: int = 1 << 20) -> bytes:
    """What the program writes to the terminal ``fd`` until the monotonic time ``until``,
    until it closes its side (EOF, or EIO once every descriptor of it is closed), or until
    ``want`` has been seen; the last ``keep`` bytes of it."""
    seen = b""
    while time.monotonic() < until:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen = (seen + chunk)[-keep:]
        if want is not None and want in seen:
            break
    return seen
