"""Reading Python stacks from outside: the ELF and string decoding on bytes built here, then
real child interpreters (this test's own Python) spinning, sleeping, in a second thread,
in a data-loading file, exiting, and read without permission. Reads race with a running
thread and the machine may be loaded: waits are polls bounded by generous timeouts."""

from __future__ import annotations

import ctypes
import json
import os
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from affmon.collect.cpython_layout import NO_MEMORY, debug_layout, elf_image, interpreter_mapping, unicode_data
from affmon.collect.pyframes import DATA_LOADING_FILES, EXITED, PERMISSION, Frame, PythonStacks, in_frames

TIMEOUT_S = 10.0
NOBODY = 65534

CHILD = """\
import importlib.util, sys, threading, time

def inner(mode):
    print("ready", flush=True)
    if mode == "sleep":
        while True:
            time.sleep(1)
    x = 0
    while True:
        x += 1

def middle(mode):
    inner(mode)

def outer(mode):
    middle(mode)

def side_work(stop):
    print(threading.get_native_id(), flush=True)
    stop.wait()

mode = sys.argv[1]
if mode == "thread":
    stop = threading.Event()
    worker = threading.Thread(target=side_work, args=(stop,))
    worker.start()
    sys.stdin.readline()
    stop.set()
    worker.join()
    print("stopped", flush=True)
    outer("sleep")
elif mode == "data":
    spec = importlib.util.spec_from_file_location("fake", sys.argv[2])
    fake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake)
    fake.fetch(inner)
else:
    outer(mode)
"""

FAKE_DATA = """\
def fetch(inner):
    inner("sleep")
"""


class Child:
    def __init__(self, proc: subprocess.Popen[str], script: Path) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.script = str(script)

    def line(self) -> str:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], TIMEOUT_S)
        assert ready, "the child printed nothing in time"
        return self.proc.stdout.readline().strip()

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()


@contextmanager
def child(tmp_path: Path, *args: str) -> Iterator[Child]:
    """The child script run with ``args``; killed after."""
    script = tmp_path / "nest.py"
    script.write_text(CHILD)
    proc = subprocess.Popen(
        [sys.executable, str(script), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        yield Child(proc, script)
    finally:
        proc.kill()
        proc.wait()


def names(stack: tuple[Frame, ...] | None) -> list[str]:
    return [frame.name for frame in stack or ()]


def nested(stack: tuple[Frame, ...] | None, script: str) -> bool:
    """Whether the innermost frames are inner, middle and outer of ``script``."""
    top = (stack or ())[:3]
    return [f.name for f in top] == ["inner", "middle", "outer"] and all(f.filename == script for f in top)


def poll(read: Callable[[], tuple[Frame, ...] | None], found: Callable[[tuple[Frame, ...] | None], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        stack = read()
        if found(stack):
            return
        assert time.monotonic() < deadline, f"not found in time; last read: {stack}"
        time.sleep(0.01)


# Bytes built here.


def build_elf(
    dynsym: list[tuple[str, int, int]], symtab: list[tuple[str, int, int]], loads: list[tuple[int, int]]
) -> bytes:
    """An ELF64 LE file with those symbols (name, value, section index) and PT_LOAD
    headers (vaddr, align)."""

    def strings_and_symbols(symbols: list[tuple[str, int, int]]) -> tuple[bytes, bytes]:
        strings = b"\0"
        table = struct.pack("<IBBHQQ", 0, 0, 0, 0, 0, 0)
        for name, value, index in symbols:
            table += struct.pack("<IBBHQQ", len(strings), 0x11, 0, index, value, 8)
            strings += name.encode() + b"\0"
        return strings, table

    dynstr, dyn = strings_and_symbols(dynsym)
    strtab, sym = strings_and_symbols(symtab)
    phoff = 64
    body = bytearray(b"\0" * (phoff + 56 * len(loads)))
    for i, (vaddr, align) in enumerate(loads):
        struct.pack_into("<IIQQQQQQ", body, phoff + 56 * i, 1, 5, 0, vaddr, vaddr, 0, 0, align)
    placed = []
    for blob in (dynstr, dyn, strtab, sym):
        placed.append((len(body), len(blob)))
        body += blob
    shoff = len(body)
    sections = [(0, 0, 0, 0), (3, *placed[0], 0), (11, *placed[1], 1), (3, *placed[2], 0), (2, *placed[3], 3)]
    for sh_type, offset, size, link in sections:
        body += struct.pack("<IIQQQQIIQQ", 0, sh_type, 0, 0, offset, size, link, 0, 8, 24)
    header = (b"\x7fELF", 2, 1, 1, 3, 62, 1, 0, phoff, shoff, 0, 64, 56, len(loads), 64, len(sections), 0)
    struct.pack_into("<4sBBB9xHHIQQQIHHHHHH", body, 0, *header)
    return bytes(body)


def reader_of(data: bytes) -> Callable[[int, int], bytes]:
    return lambda offset, size: data[offset : offset + size]


def test_symbols_come_from_dynsym_then_symtab() -> None:
    data = build_elf(
        dynsym=[("_PyRuntime", 0x5000, 20), ("PyCode_Type", 0, 0)],  # PyCode_Type undefined here
        symtab=[("PyCode_Type", 0x3000, 18), ("x_PyRuntime", 0x9000, 20)],
        loads=[(0x401234, 0x1000), (0x600000, 0x1000)],
    )
    image = elf_image(reader_of(data), ["_PyRuntime", "PyCode_Type", "Py_Version"])
    assert not isinstance(image, str)
    assert dict(image.symbols) == {"_PyRuntime": 0x5000, "PyCode_Type": 0x3000}
    assert image.first_load == 0x401000
    assert image.machine == 62


def test_a_name_that_is_the_tail_of_another_is_matched_exactly() -> None:
    data = build_elf(dynsym=[("my_PyRuntime", 0x10, 5)], symtab=[], loads=[(0, 0x1000)])
    image = elf_image(reader_of(data), ["_PyRuntime"])
    assert not isinstance(image, str) and dict(image.symbols) == {}
    # A linker shares tails: a symbol named "_PyRuntime" may point into "my_PyRuntime".
    shared = data.replace(
        struct.pack("<IBBHQQ", 1, 0x11, 0, 5, 0x10, 8), struct.pack("<IBBHQQ", 3, 0x11, 0, 5, 0x10, 8)
    )
    image = elf_image(reader_of(shared), ["_PyRuntime"])
    assert not isinstance(image, str) and dict(image.symbols) == {"_PyRuntime": 0x10}


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"#!/bin/sh\n" + b"\0" * 60, "not an ELF"),
        (b"\x7fELF\x01\x01" + b"\0" * 58, "64-bit"),
        (b"\x7fELF\x02\x02" + b"\0" * 58, "64-bit"),
        (b"\x7fELF", "not an ELF"),
    ],
)
def test_what_is_not_a_64_bit_little_endian_elf_says_so(data: bytes, why: str) -> None:
    image = elf_image(reader_of(data), ["_PyRuntime"])
    assert isinstance(image, str) and why in image


def test_a_truncated_elf_says_so() -> None:
    data = build_elf(dynsym=[("_PyRuntime", 0x10, 5)], symtab=[], loads=[(0, 0x1000)])
    image = elf_image(reader_of(data[:200]), ["_PyRuntime"])
    assert isinstance(image, str) and "truncated" in image


def unicode_head(length: int, kind: int, compact: int, is_ascii: int, size: int = 72) -> bytes:
    head = bytearray(size)
    struct.pack_into("<qqqqI", head, 0, 1, 0xDEAD0, length, -1, (kind << 2) | (compact << 5) | (is_ascii << 6))
    return bytes(head)


@pytest.mark.parametrize(
    ("head", "where"),
    [
        (unicode_head(5, 1, 1, 1), (48, 5, "ascii")),
        (unicode_head(0, 1, 1, 1), (48, 0, "ascii")),
        (unicode_head(5, 1, 1, 0), (72, 5, "latin-1")),
        (unicode_head(5, 2, 1, 0), (72, 10, "utf-16-le")),
        (unicode_head(5, 4, 1, 0), (72, 20, "utf-32-le")),
        (unicode_head(4096, 1, 1, 1), (48, 4096, "ascii")),
        (unicode_head(4097, 1, 1, 1), None),  # longer than any name: garbage
        (unicode_head(-1, 1, 1, 1), None),
        (unicode_head(5, 1, 0, 0), None),  # not compact
        (unicode_head(5, 2, 1, 1), None),  # ASCII is one byte a character
        (unicode_head(5, 3, 1, 0), None),  # no such kind
        (unicode_head(5, 0, 1, 0), None),
    ],
)
def test_where_a_strings_characters_are(head: bytes, where: tuple[int, int, str] | None) -> None:
    assert unicode_data(head, 48, 72) == where


@pytest.mark.parametrize("text", ["plain", "", "é-latin", "ドキュメント", "emoji 🐍"])
def test_unicode_data_reads_this_interpreters_strings(text: str) -> None:
    ascii_size, compact_size = (48, 72) if sys.version_info < (3, 12) else (40, 56)
    head = ctypes.string_at(id(text), compact_size)
    where = unicode_data(head, ascii_size, compact_size)
    assert where is not None
    offset, size, codec = where
    assert ctypes.string_at(id(text) + offset, size).decode(codec) == text


def debug_offsets(version: int = 0x030D00F0, free_threaded: int = 0, cookie: bytes = b"xdebugpy") -> bytes:
    data = bytearray(568)
    data[:8] = cookie
    struct.pack_into("<QQ", data, 8, version, free_threaded)
    for at, value in {40: 1, 64: 2, 72: 3, 160: 12, 168: 4, 184: 5, 200: 6, 232: 7, 240: 8, 264: 9, 280: 10}.items():
        struct.pack_into("<Q", data, at, value)
    struct.pack_into("<Q", data, 288, 11)
    struct.pack_into("<Q", data, 560, 40)
    return bytes(data)


def test_3_13s_debug_offsets_give_the_layout() -> None:
    layout = debug_layout(debug_offsets())
    assert not isinstance(layout, str)
    assert (layout.interpreters_head, layout.interpreter_next, layout.threads_head) == (1, 2, 3)
    assert (layout.thread_prev, layout.thread_next, layout.pthread_id) == (12, 4, None)
    assert (layout.current_frame, layout.native_thread_id, layout.cframe) == (5, 6, None)
    assert (layout.frame_previous, layout.frame_code, layout.frame_owner) == (7, 8, 9)
    assert (layout.code_filename, layout.code_name, layout.ascii_size, layout.compact_size) == (10, 11, 40, 56)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (debug_offsets(cookie=b"xdebugpz"), "_Py_DebugOffsets"),
        (debug_offsets()[:100], "_Py_DebugOffsets"),
        (debug_offsets(version=0x030E00F0), "3.14"),
        (debug_offsets(free_threaded=1), "free-threaded"),
    ],
)
def test_debug_offsets_that_cannot_be_used_say_why(data: bytes, why: str) -> None:
    layout = debug_layout(data)
    assert isinstance(layout, str) and why in layout


LIB = "/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0"
MAPS_PYENV = f"""\
55d0c0a00000-55d0c0a01000 r--p 00000000 fd:01 1001 /root/.pyenv/versions/3.11.7/bin/python3.11
55d0c0a01000-55d0c0a02000 r-xp 00001000 fd:01 1001 /root/.pyenv/versions/3.11.7/bin/python3.11
7f1c2a000000-7f1c2a0f5000 r--p 00000000 fd:01 1002 {LIB}
7f1c2a0f5000-7f1c2a331000 r-xp 000f5000 fd:01 1002 {LIB}
7f1c2b000000-7f1c2b001000 r--p 00000000 fd:01 1002 {LIB}
7ffd1c000000-7ffd1c021000 rw-p 00000000 00:00 0 [stack]
"""


@pytest.mark.parametrize(
    ("maps", "found"),
    [
        (MAPS_PYENV, (LIB, 0x7F1C2A000000, (3, 11))),  # libpython over the executable; its lowest offset 0
        ("00400000-0041f000 r--p 00000000 08:01 7 /usr/bin/python3.11\n", ("/usr/bin/python3.11", 0x400000, (3, 11))),
        (
            "00400000-0041f000 r--p 00000000 08:01 7 /opt/my dir/python3.13 (deleted)\n",
            ("/opt/my dir/python3.13", 0x400000, (3, 13)),
        ),
        ("00400000-0041f000 r--p 00000000 08:01 7 /usr/bin/python2.7\n", ("/usr/bin/python2.7", 0x400000, (2, 7))),
        ("00400000-0041f000 r--p 00000000 08:01 7 /usr/bin/sleep\n", "not CPython"),
        ("00400000-0041f000 r--p 00001000 08:01 7 /usr/bin/python3.11\n", "not CPython"),  # no offset 0
        ("00400000-0041f000 r--p 00000000 08:01 7 /usr/bin/python3.11-config\n", "not CPython"),
        ("7f00000000-7f00001000 r--p 00000000 08:01 7 /usr/lib/libpython3.13t.so.1.0\n", "'t' build"),
        ("", "no memory"),
    ],
)
def test_the_interpreter_is_found_in_the_memory_map(maps: str, found: tuple[str, int, tuple[int, int]] | str) -> None:
    result = interpreter_mapping(maps)
    if isinstance(found, str):
        assert isinstance(result, str) and found in result
    else:
        assert result == found


def test_in_frames_is_a_substring_match() -> None:
    stack = (Frame("/x/site-packages/torch/utils/data/dataloader.py", "__next__"), Frame("/train.py", "main"))
    assert in_frames(stack, DATA_LOADING_FILES)
    assert not in_frames(stack[1:], DATA_LOADING_FILES)
    assert not in_frames((), DATA_LOADING_FILES)


# Real processes.


def test_this_process_reads_its_own_stack() -> None:
    reader = PythonStacks(os.getpid(), threading.get_native_id())
    stack = reader.stack()
    assert reader.unavailable is None, reader.unavailable
    assert reader.version == sys.version_info[:2]
    assert "test_this_process_reads_its_own_stack" in names(stack)


def test_a_spinning_loop_is_read_innermost_first(tmp_path: Path) -> None:
    with child(tmp_path, "spin") as proc:
        assert proc.line() == "ready"
        reader = PythonStacks(proc.pid)
        poll(reader.stack, lambda stack: nested(stack, proc.script))
        good = sum(nested(reader.stack(), proc.script) for _ in range(50))
        reader.forget_code()
        good_after = sum(nested(reader.stack(), proc.script) for _ in range(10))
    assert good >= 40, f"{good} of 50 reads found inner, middle, outer"
    assert good_after >= 5
    assert reader.version == sys.version_info[:2]
    assert reader.unavailable is None


def test_a_sleeping_loop_is_read_every_time(tmp_path: Path) -> None:
    with child(tmp_path, "sleep") as proc:
        assert proc.line() == "ready"
        reader = PythonStacks(proc.pid)
        poll(reader.stack, lambda stack: nested(stack, proc.script))
        stacks = [reader.stack() for _ in range(50)]
    assert all(nested(stack, proc.script) for stack in stacks), [names(s) for s in stacks]
    assert all(names(stack)[-1] == "<module>" for stack in stacks)
    assert not any(in_frames(stack or (), DATA_LOADING_FILES) for stack in stacks)


def test_another_thread_is_read_by_its_tid_until_it_ends(tmp_path: Path) -> None:
    with child(tmp_path, "thread") as proc:
        tid = int(proc.line())
        reader = PythonStacks(proc.pid, tid)
        main = PythonStacks(proc.pid)
        poll(reader.stack, lambda stack: names(stack)[:1] == ["wait"] and "side_work" in names(stack))
        assert "side_work" not in names(main.stack())
        proc.send("stop")
        assert proc.line() == "stopped"
        stacks = [reader.stack() for _ in range(5)]
        poll(main.stack, lambda stack: nested(stack, proc.script))
    assert stacks == [None] * 5
    assert reader.unavailable is None


def test_a_frame_in_a_data_loading_file_is_found(tmp_path: Path) -> None:
    fake = tmp_path / "torch" / "utils" / "data" / "fake.py"
    fake.parent.mkdir(parents=True)
    fake.write_text(FAKE_DATA)
    with child(tmp_path, "data", str(fake)) as proc:
        assert proc.line() == "ready"
        reader = PythonStacks(proc.pid)
        poll(reader.stack, lambda stack: "fetch" in names(stack))
        stack = reader.stack()
    assert stack is not None and in_frames(stack, DATA_LOADING_FILES)
    assert names(stack)[:2] == ["inner", "fetch"] and stack[1].filename == str(fake)


def test_a_process_that_is_not_python_is_unavailable() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        reader = PythonStacks(proc.pid)
        assert reader.stack() is None
        assert reader.unavailable is not None and "not CPython" in reader.unavailable
        assert reader.stack() is None
    finally:
        proc.kill()
        proc.wait()


def test_a_process_that_exits_gives_none(tmp_path: Path) -> None:
    with child(tmp_path, "spin") as proc:
        assert proc.line() == "ready"
        reader = PythonStacks(proc.pid)
        poll(reader.stack, lambda stack: nested(stack, proc.script))
        proc.proc.kill()
        # Read while it dies and after: every read is a stack or None.
        results = [reader.stack() for _ in range(200)]
        proc.proc.wait()
        assert reader.stack() is None
    assert all(r is None or isinstance(r, tuple) for r in results)
    assert reader.unavailable in (EXITED, NO_MEMORY)  # reaped, or a zombie when last read
    late = PythonStacks(proc.pid)
    assert late.stack() is None and late.unavailable == EXITED


def test_a_recorded_root_cannot_read_memory(tmp_path: Path) -> None:
    reader = PythonStacks(os.getpid(), root=str(tmp_path))
    assert reader.stack() is None
    assert reader.unavailable is not None and "live" in reader.unavailable


def test_another_users_process_is_unavailable_for_lack_of_permission(tmp_path: Path) -> None:
    """A reader running as nobody, forked from this (root) process, reading a root child."""
    with child(tmp_path, "sleep") as proc:
        assert proc.line() == "ready"
        out, into = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the forked reader)
            try:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                reader = PythonStacks(proc.pid)
                os.write(into, json.dumps([reader.stack() is None, reader.unavailable]).encode())
            finally:
                os._exit(0)
        os.close(into)
        with os.fdopen(out) as answer:
            result = json.loads(answer.read() or "null")
        os.waitpid(pid, 0)
    assert result[0] is True and result[1].startswith(PERMISSION)  # as nobody: the user's advice


def test_a_deep_stack_is_read_a_page_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """From 3.11 a thread's frames lie next to each other: a 61-frame stack is read in a
    few reads of its pages, not one a frame, and it is the whole stack, innermost first."""
    code = "def f(n):\n    if n: return f(n - 1)\n    while True: pass\nprint(flush=True)\nf(60)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        reader = PythonStacks(proc.pid)
        poll(reader.stack, lambda stack: names(stack)[:61] == ["f"] * 61)
        reads: list[int] = []
        real = os.pread

        def counted(fd: int, size: int, offset: int) -> bytes:
            reads.append(size)
            return real(fd, size, offset)

        monkeypatch.setattr(os, "pread", counted)
        for _ in range(20):  # the loop may be between two frames at a read: the next one
            reads.clear()
            stack = reader.stack()
            if names(stack)[:61] == ["f"] * 61:
                break
        else:
            raise AssertionError(f"no whole stack read: {names(stack)}")
        # The thread state (2 reads) and its cframe (3.11, 3.12: 1), then each page the
        # frames lie on: 61 frames of about 100 bytes span at most 3 pages. 3.10's frames
        # are heap objects: a read each, as before.
        assert len(reads) <= (6 if sys.version_info >= (3, 11) else 2 + 62), reads
    finally:
        proc.kill()
        proc.wait()
