"""``/proc/PID/numa_maps``: a process's resident pages per NUMA node, parsed and read
within a bound.

One line per mapping: its start address, its memory policy, then ``key=value`` items
and flags. Those used here: ``N<node>=<pages>`` (pages of this mapping on that node),
``kernelpagesize_kB=<size>`` (the page size of the mapping: 4 for ordinary pages and
for transparent huge pages, which are counted in 4 kB pages, 2048 or 1048576 for
hugetlb mappings, counted in huge pages), ``file=<path>`` (a file is behind the
mapping) and ``huge`` (a hugetlb mapping). The kernel escapes space, tab, newline and
``=`` in a path (``\\040``), so splitting on white space never cuts one. Lines of
mappings with no page present carry no counts (``7f4dc1200000 default``).

What numa_maps counts, against ``VmRSS`` in ``/proc/PID/status``: the same pages
mapped in the process's page tables, walked at the time of the read, so a process that
allocates meanwhile differs by what it allocated. It also counts hugetlb pages, which
``VmRSS`` leaves out (they are ``HugetlbPages``), and leaves out what has no ``struct
page`` the walk can count: ``VM_PFNMAP``/``VM_IO`` mappings (device memory such as a
GPU's BAR mapped by its driver, ``[vvar]``) and the shared zero page; swapped-out pages
are in neither. ``VmRSS`` itself is read from per-CPU counters that may lag by a few
pages per CPU. ``tests/collect/test_numa_maps.py`` checks the two on a live process.

Cost: the kernel walks the page tables of every mapping for each read, holding the
process's ``mmap_lock`` for reading (its own ``mmap``/``munmap`` wait meanwhile), so the
cost grows with the resident set, not with the file's size. Measured on the 2-core
development machine under load (``bench/cost/numa_maps_cost.py``, docs/memory.md): 2 GiB of
4 kB pages took 21-31 ms a read (median), like ``smaps_rollup``, and 400-700 times a
``status`` read (0.05 ms); the same 2 GiB in transparent huge pages took 0.15 ms. So a
sampler reads it every few seconds, never every tick, and stretches the period for a
large process: ``reread_period_s`` keeps the walk under 1% of the wall time.

On a machine whose memory is all on one node (``/sys/devices/system/node/has_memory``
names one: most single-socket machines and GPU VMs), every page is on that node and the
walk tells nothing ``statm`` does not: ``read_one_node`` takes the resident and
anonymous sizes from ``/proc/PID/statm`` (one short line, no page-table walk; hugetlb pages
are left out, as from ``VmRSS``).

The reader stops after ``MAX_NUMA_MAPS_BYTES`` of text and says so (``truncated``): a
process has at most ``vm.max_map_count`` mappings (65530 by default), about 10 MB of
lines at worst; a training process has a few thousand.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from affmon.collect.fs import UNAVAILABLE, is_live, quoted, read_text
from affmon.core.errors import ParseError
from affmon.core.model.cpuset import parse_cpulist
from affmon.core.model.samples import NodeMemory

MAX_NUMA_MAPS_BYTES = 16 << 20
MIN_REREAD_PERIOD_S = 5.0
REREAD_COST_SHARE = 0.01  # at most 1% of the wall time spent walking one process's page tables
MAX_NODE_ID = 4095  # Linux's MAX_NUMNODES is at most 1 << 10 (NODES_SHIFT 10); leave room, refuse nonsense
_READ_SIZE = 1 << 16
# The files the kernel puts behind anonymous memory: MAP_ANONYMOUS|MAP_HUGETLB mappings
# (hugetlbfs' "anon_hugepage"), shared anonymous mappings ("/dev/zero (deleted)"),
# memfd_create(2) memory and SysV shared memory. Their pages are the process's own
# allocations, like those of a mapping with no file, and count as anonymous.
ANONYMOUS_FILES = ("/anon_hugepage", "/dev/zero\\040(deleted)", "/memfd:", "/SYSV")
BASE_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class _Tally:
    """Per-node byte counts, added to one line at a time (so the reader never holds the
    whole file)."""

    def __init__(self, base_page_bytes: int) -> None:
        self.base_page_bytes = base_page_bytes
        self.resident: dict[int, int] = {}
        self.anon: dict[int, int] = {}
        self.mappings = 0
        self.unsized_pages = 0
        self.line_number = 0

    def add(self, line: str) -> None:
        self.line_number += 1
        fields = line.split()
        if not fields:
            return
        if len(fields) < 2 or not _is_hex(fields[0]):
            raise ParseError(f"numa_maps line {self.line_number} is not '<address> <policy> ...': {quoted(line)}")
        self.mappings += 1
        pages: dict[int, int] = {}
        page_kib: int | None = None
        has_file = huge = False
        for item in fields[2:]:
            key, sep, value = item.partition("=")
            if not sep:
                huge = huge or key == "huge"
                continue
            if key == "file":
                has_file = not value.startswith(ANONYMOUS_FILES)
            elif key == "kernelpagesize_kB":
                page_kib = self._number(value, item)
            elif key[:1] == "N" and key[1:].isascii() and key[1:].isdigit():
                node = self._number(key[1:], item)
                if node > MAX_NODE_ID:
                    raise ParseError(f"numa_maps line {self.line_number}: node id out of range in {quoted(item)}")
                pages[node] = pages.get(node, 0) + self._number(value, item)
        if not pages:
            return
        if page_kib is None:
            if huge:  # a hugetlb mapping of a kernel that did not say its page size
                self.unsized_pages += sum(pages.values())
                return
            page_bytes = self.base_page_bytes
        else:
            page_bytes = page_kib * 1024
        for node, count in pages.items():
            self.resident[node] = self.resident.get(node, 0) + count * page_bytes
            if not has_file:
                self.anon[node] = self.anon.get(node, 0) + count * page_bytes

    def _number(self, text: str, item: str) -> int:
        if not (text.isascii() and text.isdigit()) or len(text) > 20:
            raise ParseError(f"numa_maps line {self.line_number}: not a count in {quoted(item)}")
        return int(text)

    def result(self, truncated: bool) -> NodeMemory:
        return NodeMemory(
            resident_bytes_by_node=dict(sorted(self.resident.items())),
            anon_bytes_by_node=dict(sorted(self.anon.items())),
            mappings=self.mappings,
            unsized_pages=self.unsized_pages,
            truncated=truncated,
        )


def reread_period_s(last_read_s: float) -> float:
    """Seconds to wait before reading a process's numa_maps again, given what the last
    read took: ``MIN_REREAD_PERIOD_S``, or longer for a process whose walk is slow (a
    100 GiB rank of 4 kB pages takes about a second: it is read every 100 s)."""
    return max(MIN_REREAD_PERIOD_S, last_read_s / REREAD_COST_SHARE)


def memory_node(root: str = "/") -> int | None:
    """The one NUMA node with memory, when the machine's memory is all on one
    (``has_memory`` names one node); None when it is on several or sysfs does not say."""
    text = read_text(root, "/sys/devices/system/node/has_memory")
    if text is None:
        return None
    try:
        nodes = parse_cpulist(text.strip())
    except ParseError:
        return None
    return next(iter(nodes)) if len(nodes) == 1 else None


def parse_statm(text: str, node: int, page_bytes: int = BASE_PAGE_BYTES) -> NodeMemory:
    """``/proc/PID/statm`` (pages: size, resident, shared, text, lib, data, dirty) as the
    pages on ``node``, the machine's one node with memory: resident, and anonymous as
    resident less shared (file-backed and shared memory). Raises ``ParseError``."""
    fields = text.split()
    if len(fields) < 3 or not all(f.isascii() and f.isdigit() and len(f) <= 20 for f in fields[:3]):
        raise ParseError(f"bad statm line {text.strip()[:60]!r}")
    resident, shared = int(fields[1]), int(fields[2])
    return NodeMemory(
        resident_bytes_by_node={node: resident * page_bytes},
        anon_bytes_by_node={node: max(0, resident - shared) * page_bytes},
    )


def read_one_node(pid: int, node: int, root: str = "/") -> NodeMemory | None:
    """A process's pages on a machine whose memory is all on ``node``, from ``statm``;
    None when the process is gone or the file unreadable."""
    text = read_text(root, f"/proc/{pid}/statm")
    return None if text is None else parse_statm(text, node)


def _is_hex(text: str) -> bool:
    return text.isascii() and len(text) <= 16 and all(c in "0123456789abcdefABCDEF" for c in text)


def parse_numa_maps(lines: Iterable[str] | str, base_page_bytes: int = BASE_PAGE_BYTES) -> NodeMemory:
    """Resident bytes per node of one ``numa_maps`` text (or its lines). ``base_page_bytes``
    sizes lines that give no ``kernelpagesize_kB`` (kernels before 3.19), except hugetlb
    ones, whose pages are then counted as ``unsized_pages``. Raises ``ParseError`` on a
    line that is not numa_maps."""
    tally = _Tally(base_page_bytes)
    for line in lines.splitlines() if isinstance(lines, str) else lines:
        tally.add(line)
    return tally.result(truncated=False)


def read_numa_maps(
    pid: int, root: str = "/", *, max_bytes: int = MAX_NUMA_MAPS_BYTES, base_page_bytes: int = BASE_PAGE_BYTES
) -> NodeMemory | None:
    """``/proc/PID/numa_maps`` under ``root`` as ``NodeMemory``; None when the process is
    gone, the file is not readable (another user's process: reading it needs the same
    ptrace access as ``maps``) or absent (a kernel without NUMA). The live file is read
    in 64 KiB pieces and tallied as it comes, up to ``max_bytes`` (``truncated`` then);
    a recorded tree's file is read through ``affmon.collect.fs`` (4 MiB at most)."""
    path = f"/proc/{pid}/numa_maps"
    if not is_live(root):
        text = read_text(root, path)
        return None if text is None else parse_numa_maps(text, base_page_bytes)
    tally = _Tally(base_page_bytes)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in UNAVAILABLE:
            return None
        raise
    try:
        return _read_live(fd, tally, max_bytes)
    except OSError as exc:
        if exc.errno in UNAVAILABLE:
            return None
        raise
    finally:
        os.close(fd)


def _read_live(fd: int, tally: _Tally, max_bytes: int) -> NodeMemory:
    pending = b""
    total = 0
    while True:
        chunk = os.read(fd, _READ_SIZE)
        if not chunk:
            break
        total += len(chunk)
        if total > max_bytes:
            return tally.result(truncated=True)  # the mappings after the bound are not counted
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        for line in lines:
            tally.add(line.decode("utf-8", "replace"))
    if pending:
        tally.add(pending.decode("utf-8", "replace"))
    return tally.result(truncated=False)


__all__ = ["MAX_NUMA_MAPS_BYTES", "parse_numa_maps", "read_numa_maps", "reread_period_s"]
