r"""The Python call stack of one thread of another CPython process, read from outside.

``PythonStacks(pid, tid).stack()`` gives the file and function name of each frame of the
thread, innermost first. It reads ``/proc/PID/mem`` (``pread`` on one fd kept open, as a
debugger's peek): the process is never stopped, so the thread runs while its frames are
read and any pointer may be stale. Every pointer is bounded, every code object's type and
every string's type are checked, and a read that finds garbage or an unmapped address is
``None`` for that call only; nothing raises. The kernel checks ``mem`` as a ptrace attach:
the same user, or root (where Yama's ``ptrace_scope`` is 1, only root, or an ancestor).

What is found once per process: the interpreter's ELF (``libpython3.N.so`` when mapped,
else the ``python3.N`` executable, opened through ``/proc/PID/root`` so a container's file
is the one read), the addresses of ``_PyRuntime``, ``PyCode_Type`` and ``PyUnicode_Type``
from its symbol table, and the version from ``Py_Version`` (3.11+) or the file name. The
thread's ``PyThreadState`` is cached and checked again at each call. Each code object read
is cached by address as its ``Frame``; a freed code object's address can be reused, so the
caller drops that cache every few seconds (``forget_code``). ``mem`` is opened once and
kept open while the memory it was opened on lasts. A stack then costs two reads for the
thread state (its fields, and the link to it that shows it is still in use), one for
``cframe`` (3.11, 3.12), and one for each page its frames lie on (3.11+: frames are
contiguous, a page holds about 36; 3.10: one a frame).

Versions: 3.10 to 3.12 with offsets fixed per version (checked with ``offsetof`` against
each version's headers; the default build with the GIL, 64-bit little-endian: x86_64 and
aarch64); 3.13 with the offsets the interpreter publishes itself in ``_Py_DebugOffsets``
at the start of ``_PyRuntime``. 3.10 keeps no native thread id, so only its main thread
(the oldest thread state of the main interpreter) is read. 3.14 changed
``_Py_DebugOffsets`` and keeps a frame's code object as a tagged ``_PyStackRef``; it is
reported unavailable rather than read with a guessed layout. So are free-threaded and debug
builds, whose objects are laid out differently.

Cost: 55-72 us a ``stack()`` of 32 frames with the code cache warm, for each of 3.10 to
3.12, on a 2-core VM (the target spinning on one core, the reader on the other; the first
call, which reads the ELF, 1-3 ms); at 20 Hz, under 0.2 % of a CPU. Measured with
``python cost.py /path/to/python3.N``, where ``cost.py`` is::

    import subprocess, sys, time
    from affmon.collect.pyframes import PythonStacks
    code = "def f(n):\n    if n: f(n - 1)\n    while True: pass\nf(30)"
    child = subprocess.Popen([sys.argv[1], "-c", code])
    time.sleep(1)
    reader = PythonStacks(child.pid)
    reader.stack()
    start = time.perf_counter()
    stacks = [reader.stack() for _ in range(2000)]
    print(len(stacks[-1] or ()), (time.perf_counter() - start) / 2000 * 1e6, "us")
    child.kill()
"""

from __future__ import annotations

import contextlib
import os
import stat
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from affmon.collect.cpython_layout import (
    DEBUG_SIZE,
    LAYOUTS,
    MACHINES,
    NO_MEMORY,
    ElfImage,
    Layout,
    debug_layout,
    elf_image,
    interpreter_mapping,
    unicode_data,
)
from affmon.collect.fs import KeptFile, is_live
from affmon.collect.permission import why_not_readable

# File names of frames that load data: PyTorch's DataLoader, torchdata, webdataset.
DATA_LOADING_FILES: tuple[str, ...] = ("/torch/utils/data/", "/torchdata/", "/webdataset/")

MAX_FRAMES = 256  # frames followed from the innermost; a deeper stack is cut there
MAX_THREADS = 4096  # thread states followed in one scan
MAX_INTERPRETERS = 64
MAX_CODE_CACHE = 4096
FRAME_OWNED_BY_CSTACK = 3  # 3.12+: an entry frame the C stack owns (no Python function)
PERMISSION = "reading the process's memory needs ptrace permission: the same user, or root"


def permission_refused() -> str:
    """Why reading the process's memory was refused, said for who is asking (to root, what
    actually stopped it)."""
    return f"reading the process's memory {why_not_readable()}"


EXITED = "the process has exited (or /proc hides it from this user: hidepid)"
_PAGE = 4096  # the smallest page of x86_64 and aarch64: a larger page maps its 4 KiB pieces too
_ADDRESS_END = 1 << 48  # user-space addresses on x86_64 and aarch64 (4-level page tables) lie below
_SYMBOLS = ("_PyRuntime", "PyCode_Type", "PyUnicode_Type", "Py_Version")


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame of a Python stack: where the function is defined and its name."""

    filename: str  # co_filename
    name: str  # co_name


# Where installed libraries and the standard library live: a frame elsewhere is the user's code.
LIBRARY_PATHS = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ")
MAX_LABEL = 120


def _short(filename: str) -> str:
    """A frame's file as a person reads it: the package path under site-packages, else the
    file's name."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in filename:
            return filename.rsplit(marker, 1)[1]
    return filename.rsplit("/", 1)[-1]


def frame_label(stack: Sequence[Frame]) -> str | None:
    """Where a running stack is, for a person: the innermost frame of the user's own code
    (``train_step (train.py)``) and, when the innermost frame is a library's, that one too
    (``train_step (train.py) > _single_tensor_sgd (torch/optim/sgd.py)``). None for an
    empty stack."""
    if not stack:
        return None
    inner = stack[0]
    mine = next((f for f in stack if not any(m in f.filename for m in LIBRARY_PATHS)), None)
    here = f"{inner.name} ({_short(inner.filename)})"
    label = here if mine is None or mine is inner else f"{mine.name} ({_short(mine.filename)}) > {here}"
    return label[:MAX_LABEL]


def in_frames(stack: Sequence[Frame], markers: Sequence[str]) -> bool:
    """Whether any frame's file name contains one of ``markers``."""
    return any(marker in frame.filename for frame in stack for marker in markers)


class _Race(Exception):
    """This read found an unreadable or implausible pointer: the thread moved on."""


class _Gone(Exception):
    """A read came back empty: the memory the file was opened on is gone."""


class _Unavailable(Exception):
    """Stacks of this process cannot be read at all; the message says why."""


@dataclass(frozen=True, slots=True)
class _Target:
    """The addresses in the process that do not change while it lives."""

    version: tuple[int, int]
    layout: Layout
    runtime: int
    code_type: int
    unicode_type: int


class PythonStacks:
    """Reads the Python stack of thread ``tid`` (default: the main thread) of ``pid``.

    ``unavailable`` says why stacks cannot be read at all (set at the first ``stack()``,
    or at once for a root that is not the live one); ``version`` is the target's CPython
    (major, minor) once found."""

    def __init__(self, pid: int, tid: int | None = None, root: str = "/", memory: KeptFile | None = None) -> None:
        self.pid = pid
        self.tid = pid if tid is None else tid
        self.root = root
        # The process's memory, opened once (a caller that also reads it passes its own)
        self.memory = memory or KeptFile(f"/proc/{pid}/mem")
        self.unavailable: str | None = None if is_live(root) else f"stacks are read from live processes, not {root}"
        self.version: tuple[int, int] | None = None
        self._target: _Target | None = None
        self._thread_state = 0  # the address of the thread's PyThreadState, once found
        self._interpreter = 0  # the interpreter whose list holds it
        self._thread_key = 0  # what its ident field held: its native or (3.10) pthread id
        self._code: dict[int, Frame] = {}

    def forget_code(self) -> None:
        """Drop the cached code objects (their addresses may since have been reused)."""
        self._code.clear()

    def stack(self) -> tuple[Frame, ...] | None:
        """The thread's frames, innermost first; ``None`` when this read failed (a race,
        the thread gone) or stacks cannot be read (``unavailable``)."""
        if self.unavailable is not None:
            return None
        try:
            fd = self.memory.fd()
        except OSError as exc:
            self._failed(exc)
            return None
        try:
            if self._target is None:
                self._target = self._find_target(fd)
                self.version = self._target.version
            return self._walk(fd, self._target)
        except _Unavailable as exc:
            self.unavailable = str(exc)
        except _Gone:
            # The memory the file was opened on is gone: the process exited, or ran a new
            # program. Opened again by path: that fails for an exited process (unavailable).
            self.memory.close()
            try:
                self.memory.fd()
            except OSError as exc:
                self._failed(exc)
        except OSError as exc:
            self._failed(exc)
        except (_Race, struct.error, ValueError):
            pass
        return None

    def _failed(self, exc: OSError) -> None:
        """Turns what an open or read of the process's files raised into ``unavailable``
        where it will not change: gone, not permitted, no memory. Anything else (an address
        unmapped meanwhile: EIO) fails this read only."""
        if isinstance(exc, PermissionError):
            self.unavailable = permission_refused()
        elif isinstance(exc, (FileNotFoundError, ProcessLookupError)):
            self.unavailable = NO_MEMORY if os.path.exists(f"/proc/{self.pid}") else EXITED

    # What is found once a process.

    def _find_target(self, fd: int) -> _Target:
        path, start, version = self._interpreter_file()
        if version < (3, 10):
            raise _Unavailable(f"Python {_dotted(version)}: affmon reads the frames of 3.10 to 3.13")
        image = self._elf(path)
        if isinstance(image, str):
            raise _Unavailable(f"{path}: {image}")
        if image.machine not in MACHINES:
            raise _Unavailable(f"{path}: affmon reads Python frames on {' and '.join(MACHINES.values())} only")
        missing = [name for name in ("_PyRuntime", "PyCode_Type", "PyUnicode_Type") if name not in image.symbols]
        if missing:
            raise _Unavailable(f"{path} has no symbol {missing[0]}")
        bias = start - image.first_load
        if "Py_Version" in image.symbols:
            hex_version = int.from_bytes(_read(fd, bias + image.symbols["Py_Version"], 4), "little")
            version = (hex_version >> 24, (hex_version >> 16) & 0xFF)
        if version >= (3, 14):
            raise _Unavailable(f"Python {_dotted(version)}: affmon does not read its frames yet")
        runtime = bias + image.symbols["_PyRuntime"]
        layout = LAYOUTS.get(version) or debug_layout(_read(fd, runtime, DEBUG_SIZE))
        if isinstance(layout, str):
            raise _Unavailable(f"Python {_dotted(version)}: {layout}")
        if layout.native_thread_id is None and self.tid != self.pid:
            raise _Unavailable(f"Python {_dotted(version)} keeps no native thread id: only the main thread is read")
        code_type, unicode_type = bias + image.symbols["PyCode_Type"], bias + image.symbols["PyUnicode_Type"]
        return _Target(version, layout, runtime, code_type, unicode_type)

    def _interpreter_file(self) -> tuple[str, int, tuple[int, int]]:
        with open(f"/proc/{self.pid}/maps", "rb") as maps:
            found = interpreter_mapping(maps.read().decode("utf-8", "surrogateescape"))
        if isinstance(found, str):
            raise _Unavailable(found)
        return found

    def _elf(self, path: str) -> ElfImage | str:
        try:
            fd = os.open(f"/proc/{self.pid}/root{path}", os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError as exc:
            if isinstance(exc, PermissionError):
                raise _Unavailable(permission_refused()) from None
            return f"cannot be opened ({exc.strerror})"
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return "not a regular file"
            return elf_image(lambda offset, size: os.pread(fd, size, offset), _SYMBOLS)
        finally:
            os.close(fd)

    # What is read at each call.

    def _walk(self, fd: int, target: _Target) -> tuple[Frame, ...] | None:
        layout = target.layout
        thread = self._thread(fd, target)
        if thread is None:
            return None
        frame = _field(thread, _frame_pointer(layout))
        if layout.cframe is not None and frame:
            frame = _field(_read(fd, frame, layout.current_frame + 8), layout.current_frame)
        size = max(layout.frame_code, layout.frame_previous, layout.frame_owner or 0) + 8
        pages = _Pages(fd)
        frames = []
        for _ in range(MAX_FRAMES):
            if not frame:
                break
            block = pages.read(frame, size)
            code, frame = _field(block, layout.frame_code), _field(block, layout.frame_previous)
            if layout.frame_owner is not None and block[layout.frame_owner] == FRAME_OWNED_BY_CSTACK:
                continue
            named = self._code.get(code) or self._read_code(fd, target, code)
            if named is not None:
                frames.append(named)
        return tuple(frames)

    def _thread(self, fd: int, target: _Target) -> bytes | None:
        """The first bytes of the thread's ``PyThreadState``; ``None`` when it has none now.

        The one found last is kept while it still names the thread and is still linked in
        its interpreter's list: a thread state freed when its thread ended keeps its thread
        id, but ``free`` overwrites its first two words (``prev`` and ``next``)."""
        layout = target.layout
        size = max(layout.thread_prev, layout.thread_next, _thread_ident(layout), _frame_pointer(layout)) + 8
        if self._thread_state:
            with contextlib.suppress(_Race, OSError, struct.error):
                block = _read(fd, self._thread_state, size)
                if self._is_ours(block, layout) and self._is_linked(fd, layout, block):
                    return block
        self._thread_state = 0
        interpreters: list[int] = []
        interpreter = _field(_read(fd, target.runtime + layout.interpreters_head, 8), 0)
        while interpreter and len(interpreters) < MAX_INTERPRETERS:
            interpreters.append(interpreter)
            interpreter = _field(_read(fd, interpreter + layout.interpreter_next, 8), 0)
        main_only = layout.native_thread_id is None  # 3.10: the oldest thread of the oldest interpreter
        budget = MAX_THREADS  # for all interpreters together: a cycle costs no more than this
        for interpreter in interpreters[-1:] if main_only else interpreters:
            tstate, block, last = _field(_read(fd, interpreter + layout.threads_head, 8), 0), b"", 0
            while tstate and budget:
                budget -= 1
                block, last = _read(fd, tstate, size), tstate
                if not main_only and self._is_ours(block, layout):
                    break
                tstate = _field(block, layout.thread_next)
            if last and (main_only or self._is_ours(block, layout)):
                self._thread_key = _value(block, _thread_ident(layout))
                self._thread_state, self._interpreter = last, interpreter
                return block
        return None

    def _is_ours(self, block: bytes, layout: Layout) -> bool:
        expected = self.tid if layout.native_thread_id is not None else self._thread_key
        return _value(block, _thread_ident(layout)) == expected

    def _is_linked(self, fd: int, layout: Layout, block: bytes) -> bool:
        """Whether the thread state kept, whose first bytes are ``block``, is in the list."""
        prev = _field(block, layout.thread_prev)
        link = prev + layout.thread_next if prev else self._interpreter + layout.threads_head
        return _field(_read(fd, link, 8), 0) == self._thread_state

    def _read_code(self, fd: int, target: _Target, code: int) -> Frame | None:
        """The frame a code object names, cached; ``None`` for an object that is not code."""
        layout = target.layout
        block = _read(fd, code, max(layout.code_filename, layout.code_name) + 8)
        if _value(block, 8) != target.code_type:  # ob_type
            return None
        filename = self._string(fd, target, _field(block, layout.code_filename))
        name = self._string(fd, target, _field(block, layout.code_name))
        if len(self._code) >= MAX_CODE_CACHE:
            del self._code[next(iter(self._code))]
        named = self._code[code] = Frame(filename, name)
        return named

    def _string(self, fd: int, target: _Target, address: int) -> str:
        layout = target.layout
        head = _read(fd, address, layout.compact_size)
        where = unicode_data(head, layout.ascii_size, layout.compact_size)
        if _value(head, 8) != target.unicode_type or where is None:
            raise _Race
        offset, size, codec = where
        data = _read(fd, address + offset, size) if size else b""
        return data.decode(codec, "replace")  # a stale object's bytes stay text


class _Pages:
    """The frames of one walk, read a page at a time: from 3.11 a thread's frames lie next
    to each other in its data stack (a frame of a 32-deep recursion 112 bytes below the
    one it called), so one read of the page gives the frames in it, where a read of each
    frame made a 32-frame stack 35 system calls. A page holding a mapped byte is mapped
    whole, so the page read fails only where the frame's own read would; 3.10's frames are
    heap objects, a page each, at the cost of a frame's read. Only within one walk: the
    next walk reads the pages again, as the thread has moved on."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.start = 0
        self.data = b""

    def read(self, address: int, size: int) -> bytes:
        offset = address - self.start
        if not (offset >= 0 and offset + size <= len(self.data) and 0 < address < _ADDRESS_END):
            start = address & -_PAGE
            self.data = _read(self.fd, start, (address + size - start + _PAGE - 1) & -_PAGE)
            self.start, offset = start, address - start
        return self.data[offset : offset + size]


def _read(fd: int, address: int, size: int) -> bytes:
    """``size`` bytes of the process's memory at ``address``, all of them."""
    if not 0 < address < _ADDRESS_END:
        raise _Race
    data = os.pread(fd, size, address)
    if not data and size:
        raise _Gone  # the kernel reads nothing once the memory is gone; unmapped is EIO
    if len(data) != size:
        raise _Race
    return data


def _value(data: bytes, offset: int) -> int:
    """The 64-bit word at ``offset`` of ``data`` (read long enough to hold it)."""
    return int.from_bytes(data[offset : offset + 8], "little")


def _field(data: bytes, offset: int) -> int:
    """The pointer at ``offset`` of ``data``: 0, or a plausible address."""
    value = _value(data, offset)
    return _checked(value) if value else 0


def _checked(address: int) -> int:
    if not 0 < address < _ADDRESS_END or address % 8:
        raise _Race
    return address


def _thread_ident(layout: Layout) -> int:
    """Where a thread state says which thread it is: the native id, or 3.10's pthread id."""
    ident = layout.native_thread_id if layout.native_thread_id is not None else layout.pthread_id
    assert ident is not None
    return ident


def _frame_pointer(layout: Layout) -> int:
    """Where a thread state points at its current frame (through ``cframe`` on 3.11, 3.12)."""
    return layout.cframe if layout.cframe is not None else layout.current_frame


def _dotted(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"
