"""The monitor gives freed heap pages back once a minute (``affmon.tui.memory``): on this
machine's C library, for real, and on a clock."""

from __future__ import annotations

import subprocess
import sys

from affmon.tui.memory import Trimmer

FREED_AND_KEPT = """
from affmon.tui.memory import libc_trim

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024

trim = libc_trim()
assert trim is not None, "this C library has no malloc_trim"
blocks = [bytearray(1000) for _ in range(60_000)]  # 60 MB from malloc (over pymalloc's 512 bytes)
kept = blocks[99::100]  # one in a hundred stays, so the heap's top cannot shrink on its own
del blocks
before = rss_mib()
trim()
print(before, rss_mib())
"""


def test_a_trim_gives_back_the_pages_the_process_freed():
    # A fresh interpreter, so that nothing else this process did changes its heap.
    out = subprocess.run([sys.executable, "-c", FREED_AND_KEPT], capture_output=True, text=True, check=True, timeout=60)
    before, after = map(int, out.stdout.split())
    assert before - after >= 30, (before, after)  # most of the 59 MB freed came back


def test_a_trim_is_due_once_a_minute_from_the_start():
    now = [100.0]
    calls: list[float] = []
    t = Trimmer(lambda: calls.append(now[0]), every_s=60.0, clock=lambda: now[0])
    assert not t.due()  # not at the start
    now[0] = 159.9
    assert not t.due()
    now[0] = 160.0
    assert t.due() and calls == [160.0]
    now[0] = 200.0
    assert not t.due()  # the next one a minute after the last
    now[0] = 230.0
    assert t.due() and calls == [160.0, 230.0] and t.trims == 2


def test_without_malloc_trim_nothing_is_done():
    t = Trimmer(None, every_s=0.0, clock=lambda: 1.0)  # what a C library without malloc_trim gives
    assert not t.due() and t.trims == 0
