"""Which processes look like training, from what is cheap to read: the command (python, a
launcher) and, for python, whether a GPU or deep-learning runtime is mapped
(``/proc/PID/maps``). affmon's own processes are told apart so they are never watched."""

from __future__ import annotations

import os
import re

_PYTHON_RE = re.compile(r"^(python|pypy)[0-9.]*[a-z]?$")
# Launchers that are python programs but may show up under their own name (their
# shebang makes comm "torchrun"), and PyTorch's rename of its main thread.
LAUNCHERS = frozenset({"torchrun", "accelerate", "deepspeed", "pt_main_thread", "pt_elastic"})
# What a process that trains on a GPU, or with a deep-learning runtime, has mapped.
RUNTIME_MARKERS = (b"libtorch", b"libcuda", b"libnccl", b"libtensorflow", b"xla_extension", b"libjax")
RUNTIME_RECHECK_S = 10.0
_MAPS_MAX_BYTES = 64 << 20


def is_affmon(comm: str, argv: list[str]) -> bool:
    """An affmon process: its console script, ``python -m affmon``, or a script named so."""
    if comm == "affmon" or any(os.path.basename(arg) == "affmon" for arg in argv[:2]):
        return True
    return argv[1:3] == ["-m", "affmon"]


def maps_runtime(maps: bytes | None) -> bool | None:
    """Whether ``/proc/PID/maps`` shows a GPU or deep-learning runtime; None: unreadable."""
    if maps is None:
        return None
    return any(marker in maps for marker in RUNTIME_MARKERS)


def scan_maps(path: str) -> bool | None:
    """``maps_runtime`` of a live ``/proc/PID/maps``, read until the first marker. The file
    comes a page or so per read (the kernel formats it as it goes), so it is read to its end
    (at most ``_MAPS_MAX_BYTES``), not once; None when it cannot be read."""
    keep = max(len(m) for m in RUNTIME_MARKERS) - 1
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        tail, total = b"", 0
        while total < _MAPS_MAX_BYTES:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return False
            window = tail + chunk
            if any(marker in window for marker in RUNTIME_MARKERS):
                return True
            tail, total = window[-keep:], total + len(chunk)
        return None
    except OSError:
        return None
    finally:
        os.close(fd)


def is_training_candidate(comm: str, argv: list[str]) -> bool:
    """A python interpreter (by executable or command) or a known training launcher."""
    if _PYTHON_RE.match(comm) or comm in LAUNCHERS:
        return True
    for arg in argv[:2]:
        base = os.path.basename(arg)
        if _PYTHON_RE.match(base) or base in LAUNCHERS:
            return True
    return False
