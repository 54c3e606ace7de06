"""What ``pyframes`` needs to know of a CPython build before it reads a stack, from bytes: the
offsets of the structures it walks in each version (``LAYOUTS``, and 3.13's own
``_Py_DebugOffsets``), the symbols of the interpreter's ELF file, the interpreter's file in
``/proc/PID/maps``, and a ``str`` object's characters. Pure functions of what they are handed,
tested on bytes built by the tests."""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

MAX_CHARS = 4096  # a longer file or function name is taken for garbage
MAX_TABLE_BYTES = 64 << 20  # a symbol or string table larger than this is not an interpreter's
MACHINES = {62: "x86_64", 183: "aarch64"}  # ELF e_machine: the machines whose layouts are known
NO_MEMORY = "the process has no memory: it has exited, or it is a kernel thread"
_LIBPYTHON = re.compile(r"libpython(\d)\.(\d+)([a-z]*)\.so(\.[0-9.]*)?")
_EXECUTABLE = re.compile(r"python(\d)\.(\d+)([a-z]*)")


@dataclass(frozen=True, slots=True)
class Layout:
    """Byte offsets of what the walk reads in one CPython version's structures.

    ``cframe``: the thread state's ``cframe`` pointer (3.11, 3.12), whose struct holds the
    current frame at ``current_frame``; ``None`` where ``current_frame`` is in the thread
    state itself. ``native_thread_id`` is ``None`` on 3.10, whose main thread is known
    by its pthread id at ``pthread_id`` instead. ``frame_owner`` is ``None`` where no
    frame belongs to the C stack (3.10, 3.11)."""

    interpreters_head: int  # in _PyRuntime
    interpreter_next: int  # in PyInterpreterState
    threads_head: int
    thread_prev: int  # in PyThreadState
    thread_next: int
    native_thread_id: int | None
    pthread_id: int | None
    cframe: int | None
    current_frame: int
    frame_code: int  # in the frame (PyFrameObject on 3.10, _PyInterpreterFrame after)
    frame_previous: int
    frame_owner: int | None
    code_filename: int  # in PyCodeObject
    code_name: int
    ascii_size: int  # sizeof(PyASCIIObject): where an ASCII string's characters start
    compact_size: int  # sizeof(PyCompactUnicodeObject): where other compact strings' start


_COMMON = {"interpreter_next": 0, "thread_prev": 0, "thread_next": 8}
LAYOUTS: Mapping[tuple[int, int], Layout] = {
    (3, 10): Layout(
        **_COMMON,
        interpreters_head=32,
        threads_head=8,
        native_thread_id=None,
        pthread_id=176,
        cframe=None,
        current_frame=24,
        frame_code=32,
        frame_previous=24,
        frame_owner=None,
        code_filename=104,
        code_name=112,
        ascii_size=48,
        compact_size=72,
    ),
    (3, 11): Layout(
        **_COMMON,
        interpreters_head=40,
        threads_head=16,
        native_thread_id=160,
        pthread_id=None,
        cframe=56,
        current_frame=8,
        frame_code=32,
        frame_previous=48,
        frame_owner=None,
        code_filename=112,
        code_name=120,
        ascii_size=48,
        compact_size=72,
    ),
    (3, 12): Layout(
        **_COMMON,
        interpreters_head=40,
        threads_head=72,
        native_thread_id=144,
        pthread_id=None,
        cframe=56,
        current_frame=0,
        frame_code=0,
        frame_previous=8,
        frame_owner=70,
        code_filename=112,
        code_name=120,
        ascii_size=40,
        compact_size=56,
    ),
}

# 3.13's _Py_DebugOffsets: where each offset read is, from the start of _PyRuntime.
_DEBUG_COOKIE = b"xdebugpy"
_DEBUG_FIELDS = {
    "version": 8,
    "free_threaded": 16,
    "interpreters_head": 40,
    "interpreter_next": 64,
    "threads_head": 72,
    "thread_prev": 160,
    "thread_next": 168,
    "current_frame": 184,
    "native_thread_id": 200,
    "frame_previous": 232,
    "frame_code": 240,  # "executable": a code object, or None for an entry frame
    "frame_owner": 264,
    "code_filename": 280,
    "code_name": 288,
    "ascii_size": 560,
}
DEBUG_SIZE = 568


def debug_layout(debug: bytes) -> Layout | str:
    """The layout 3.13 publishes in the ``_Py_DebugOffsets`` bytes ``debug``, or why it
    cannot be used."""
    if len(debug) < DEBUG_SIZE or debug[:8] != _DEBUG_COOKIE:
        return "its _PyRuntime does not start with _Py_DebugOffsets"
    field = {name: struct.unpack_from("<Q", debug, at)[0] for name, at in _DEBUG_FIELDS.items()}
    version, free_threaded = field.pop("version"), field.pop("free_threaded")
    if version >> 16 != 0x030D:
        return f"its _Py_DebugOffsets are of version {version >> 24}.{(version >> 16) & 0xFF}"
    if free_threaded:
        return "a free-threaded build: affmon reads only builds with the GIL"
    if any(value >= 1 << 16 for value in field.values()):
        return "its _Py_DebugOffsets are out of range"
    # After PyASCIIObject, a compact string has utf8_length and utf8, as in 3.12.
    return Layout(**field, pthread_id=None, cframe=None, compact_size=field["ascii_size"] + 16)


@dataclass(frozen=True, slots=True)
class ElfImage:
    """What an ELF file says about where it is loaded and where its symbols are.

    ``first_load``: the lowest ``PT_LOAD`` address rounded down to its alignment; the
    mapping of the file's offset 0 starts there plus the load bias. ``symbols``: the
    addresses (before the bias) of the names asked for that it defines."""

    machine: int
    first_load: int
    symbols: Mapping[str, int]


def elf_image(read: Callable[[int, int], bytes], names: Collection[str]) -> ElfImage | str:
    """The load address and the symbols among ``names`` of the 64-bit little-endian ELF
    file that ``read(offset, size)`` reads, from ``.dynsym`` and then, for names it lacks,
    ``.symtab``; or why it is not such a file."""
    try:
        return _elf_image(read, names)
    except struct.error:
        return "a truncated ELF file"


def _elf_image(read: Callable[[int, int], bytes], names: Collection[str]) -> ElfImage | str:
    header = read(0, 64)
    if len(header) < 64 or header[:4] != b"\x7fELF":
        return "not an ELF file"
    if header[4] != 2 or header[5] != 1:
        return "not a 64-bit little-endian ELF file"
    machine, phoff, shoff = struct.unpack_from("<2xH12xQQ", header, 16)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", header, 54)
    if phentsize < 56 or shentsize < 64 or phnum > 4096 or shnum > 65535:
        return "an ELF file with malformed headers"
    loads = []
    program = read(phoff, phentsize * phnum)
    for i in range(phnum):
        p_type, vaddr, align = struct.unpack_from("<I12xQ24xQ", program, i * phentsize)
        if p_type == 1:  # PT_LOAD
            loads.append(vaddr & ~(align - 1) if align > 1 else vaddr)
    if not loads:
        return "an ELF file with nothing to load"
    sections = read(shoff, shentsize * shnum)
    table = [struct.unpack_from("<4xI16xQQI", sections, i * shentsize) for i in range(shnum)]
    found: dict[str, int] = {}
    for wanted_type in (11, 2):  # SHT_DYNSYM, then SHT_SYMTAB
        for sh_type, offset, size, link in table:
            if sh_type != wanted_type or link >= shnum or size > MAX_TABLE_BYTES:
                continue
            _, str_offset, str_size, _ = table[link]
            if str_size > MAX_TABLE_BYTES:
                continue
            missing = [name for name in names if name not in found]
            if not missing:
                break
            found.update(_symbols(read(offset, size), read(str_offset, str_size), missing))
    return ElfImage(machine, min(loads), found)


def _symbols(symtab: bytes, strtab: bytes, names: Sequence[str]) -> dict[str, int]:
    """The value of each defined symbol named in ``names``."""
    at: dict[int, str] = {}  # every place in strtab where a wanted name starts
    for name in names:
        needle = name.encode() + b"\0"
        start = strtab.find(needle)
        while start >= 0:
            at[start] = name
            start = strtab.find(needle, start + 1)
    found = {}
    usable = len(symtab) - len(symtab) % 24
    for st_name, _info, _other, st_shndx, st_value, _size in struct.iter_unpack("<IBBHQQ", symtab[:usable]):
        symbol = at.get(st_name)
        if symbol is not None and st_shndx != 0 and symbol not in found:
            found[symbol] = st_value
    return found


def unicode_data(head: bytes, ascii_size: int, compact_size: int) -> tuple[int, int, str] | None:
    """Where a ``str`` whose first bytes are ``head`` keeps its characters: (offset from the
    object, byte count, codec); ``None`` for a string that is not compact (no code object's
    names are) or a header that cannot be a string's (a race: the object was freed)."""
    (length,) = struct.unpack_from("<q", head, 16)
    (state,) = struct.unpack_from("<I", head, 32)
    kind, compact, is_ascii = (state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1
    if not compact or not 0 <= length <= MAX_CHARS:
        return None
    if is_ascii:
        return (ascii_size, length, "ascii") if kind == 1 else None
    codec = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}.get(kind)
    return None if codec is None else (compact_size, length * kind, codec)


def interpreter_mapping(maps: str) -> tuple[str, int, tuple[int, int]] | str:
    """From a ``/proc/PID/maps`` text: the path of the interpreter's ELF (libpython over the
    executable), the address its offset 0 is mapped at, and the version its name says; or
    why there is none."""
    if not maps:
        return NO_MEMORY
    found: dict[str, tuple[int, int, re.Match[str]]] = {}  # path -> (preference, start, name)
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or int(fields[2], 16) != 0:  # not where the file starts
            continue
        path = fields[5].removesuffix(" (deleted)")
        base = path.rsplit("/", 1)[-1]
        rank, match = 0, _LIBPYTHON.fullmatch(base)
        if match is None:
            rank, match = 1, _EXECUTABLE.fullmatch(base)
        start = int(fields[0].split("-")[0], 16)
        if match is not None and (path not in found or start < found[path][1]):
            found[path] = (rank, start, match)
    if not found:
        return "not CPython: no python3.N or libpython3.N.so in its memory map"
    path = min(found, key=lambda p: found[p][:2])
    _, start, match = found[path]
    if match.group(3):  # ABI flags: "d" (debug), "t" (free-threaded)
        return f"{path}: a '{match.group(3)}' build: affmon reads only the default build"
    return path, start, (int(match.group(1)), int(match.group(2)))
