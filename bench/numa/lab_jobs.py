"""Pretend training jobs for the NUMA lab's guest, and the kernel's word on where they are.

``start_job`` forks a process that affmon takes for a training rank (a python process that
maps a file named like libtorch, as a process that loaded PyTorch does), puts its threads
on the CPUs asked, places ``mib`` MiB of anonymous memory on a chosen node (``mbind(2)``
with ``MPOL_BIND`` before the first touch) or where the kernel puts it (first touch), and
runs busy threads: each pinned to one CPU (or free within the mask), hashing a buffer
(``hashlib`` releases the GIL, so they run at once) for ``duty`` of every 40 ms. It waits
until its parent ends it (``PR_SET_PDEATHSIG``: it dies with its parent).

``numa_maps_bytes`` and ``thread_masks`` read ``/proc`` directly, with no affmon code, so
that the lab's checks compare affmon with the kernel, not with itself.

Linux on x86-64 only (the system call numbers are that ABI's).
"""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import os
import re
import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

SYS_MBIND = 237  # x86-64
MPOL_BIND = 2
PR_SET_PDEATHSIG = 1
PAGE = mmap.PAGESIZE
_NODE_WORD = re.compile(r"N(\d+)=(\d+)")


@dataclass(frozen=True, slots=True)
class JobSpec:
    """``cpus``: the process's mask; ``memory_node``: where its ``mib`` MiB go (None: first
    touch, on the node of the CPU that writes them); ``busy_cpus``: one busy thread pinned
    to each (-1: a busy thread left free within the mask)."""

    name: str
    cpus: frozenset[int]
    mib: int
    memory_node: int | None = None
    busy_cpus: tuple[int, ...] = ()
    duty: float = 0.35


@dataclass(frozen=True, slots=True)
class RunningJob:
    spec: JobSpec
    pid: int
    busy_tids: tuple[int, ...]


def runtime_file(directory: Path) -> Path:
    """A file named like PyTorch's CPU library, for the jobs to map (affmon's sign of a
    training process); its contents do not matter, only the name in ``/proc/PID/maps``."""
    path = directory / "libtorch_cpu.so"
    if not path.exists():
        path.write_bytes(b"\0" * PAGE)
    return path


def start_job(spec: JobSpec, runtime: Path) -> RunningJob:
    """Fork the job; return once its memory is placed and its busy threads run."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the job
        try:
            os.close(read_end)
            _job(spec, runtime, write_end)
        finally:
            os._exit(1)
    os.close(write_end)
    with os.fdopen(read_end) as said:
        line = said.readline().split()
    if not line or line[0] != "ready":
        os.waitpid(pid, 0)
        raise RuntimeError(f"job {spec.name} did not start: {' '.join(line) or 'no word from it'}")
    return RunningJob(spec, pid, tuple(int(t) for t in line[1:]))


def stop_jobs(jobs: Iterable[RunningJob]) -> None:
    for job in jobs:
        try:
            os.kill(job.pid, signal.SIGKILL)
            os.waitpid(job.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def _job(spec: JobSpec, runtime: Path, ready_fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    Path("/proc/self/comm").write_text(spec.name[:15])
    os.sched_setaffinity(0, spec.cpus)
    with runtime.open("rb") as f:
        library = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    size = spec.mib << 20
    area = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if spec.memory_node is not None:
        _bind(libc, area, size, spec.memory_node)
    chunk = b"\1" * min(size, 1 << 20)
    for offset in range(0, size, len(chunk)):  # first touch: every page now has its node
        area[offset : offset + len(chunk)] = chunk[: size - offset]
    started = threading.Barrier(len(spec.busy_cpus) + 1)
    tids: list[int] = []
    for cpu in spec.busy_cpus:
        threading.Thread(target=_busy, args=(cpu, spec.duty, started, tids), daemon=True).start()
    started.wait()
    os.write(ready_fd, ("ready " + " ".join(map(str, tids)) + "\n").encode())
    os.close(ready_fd)
    kept = (library, area)  # mapped for the life of the job
    while kept:
        signal.pause()


def _bind(libc: ctypes.CDLL, area: mmap.mmap, size: int, node: int) -> None:
    address = ctypes.addressof(ctypes.c_char.from_buffer(area))
    mask = ctypes.c_ulong(1 << node)
    if libc.syscall(SYS_MBIND, ctypes.c_void_p(address), ctypes.c_ulong(size), MPOL_BIND, ctypes.byref(mask), 64, 0):
        err = ctypes.get_errno()
        raise OSError(err, f"mbind to node {node}: {os.strerror(err)}")


def _busy(cpu: int, duty: float, started: threading.Barrier, tids: list[int]) -> None:
    if cpu >= 0:
        os.sched_setaffinity(0, {cpu})  # 0: this thread
    tids.append(threading.get_native_id())
    started.wait()
    data = b"\1" * (64 << 10)
    while True:
        until = time.monotonic() + 0.04 * duty
        while time.monotonic() < until:
            hashlib.sha256(data).digest()
        time.sleep(0.04 * (1 - duty))


def numa_maps_bytes(pid: int) -> dict[int, int]:
    """Resident bytes per node, summed from ``/proc/PID/numa_maps`` here (``N<node>=<pages>``
    times the line's ``kernelpagesize_kB``)."""
    total: dict[int, int] = {}
    for line in Path(f"/proc/{pid}/numa_maps").read_text().splitlines():
        words = line.split()
        page_kb = next((int(w.split("=", 1)[1]) for w in words if w.startswith("kernelpagesize_kB=")), 4)
        for word in words:
            m = _NODE_WORD.fullmatch(word)
            if m:
                node = int(m[1])
                total[node] = total.get(node, 0) + int(m[2]) * page_kb * 1024
    return dict(sorted(total.items()))


def thread_masks(pid: int) -> dict[int, str]:
    """Each thread's ``Cpus_allowed_list`` as the kernel writes it."""
    masks = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:
            continue  # exited meanwhile
        for line in status.splitlines():
            if line.startswith("Cpus_allowed_list:"):
                masks[int(task.name)] = line.split(":", 1)[1].strip()
    return dict(sorted(masks.items()))


__all__ = ["JobSpec", "RunningJob", "numa_maps_bytes", "runtime_file", "start_job", "stop_jobs", "thread_masks"]
