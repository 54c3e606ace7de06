"""Moving a process's pages to the NUMA node of its CPUs, with ``migrate_pages(2)``.

Pinning moves threads, not memory: a rank moved from node 1 to node 0 keeps reading the
tensors it first touched on node 1. ``migrate_memory`` asks the kernel to move every page
of the process that sits on another node of CPUs to the target node, the way numactl's
``migratepages PID FROM TO`` does. It is only ever called with consent (``pin
--migrate-memory``, or the monitor's pin dialog) and after the threads moved, so the
pages the kernel moves are not first touched again on the old node.

What the kernel does (mm/mempolicy.c, ``kernel_migrate_pages``): each node of
``old_nodes`` is mapped to a node of ``new_nodes`` by position (``node_remap``), so with
one target node every old node maps to it. With CAP_SYS_NICE the call moves every page
mapped by the process, shared ones too (``MPOL_MF_MOVE_ALL``: the page cache of a
library other ranks map as well); without it, only pages mapped by this process alone.
It returns the number of pages it could not move (locked, busy, or the node ran out of
memory), and needs the caller to be allowed to ptrace-read the process, and
CAP_SYS_NICE for another user's (EPERM otherwise). Memory-only nodes (GPU memory on
Grace Hopper, HBM, CXL) are never a source: memory is put there on purpose.

The numa_maps reads before and after (``affmon.collect.numa_maps``) say how many bytes
moved; on a machine with one node of CPUs nothing is read or called.

All system calls go through a ``MemoryOps``: ``OsMemory`` for real, ``DryRunMemory`` to
see what would be moved, or a test's fake.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Protocol

from affmon.actions.journal import Journal
from affmon.actions.journal_records import JournalEntry, MemoryRecord, NodeBytes
from affmon.actions.threads import stat_or_none
from affmon.collect.numa_maps import read_numa_maps
from affmon.collect.procfs import ProcFs
from affmon.core.errors import AffmonError
from affmon.core.model.cpuset import CpuSet, format_cpulist
from affmon.core.model.samples import NodeMemory
from affmon.core.model.topology import Topology

ONE_NODE = "one NUMA node: nothing to move"
# migrate_pages(2)'s number: x86-64 (arch/x86/entry/syscalls/syscall_64.tbl) and the
# generic table arm64 uses (include/uapi/asm-generic/unistd.h).
SYSCALL_NUMBERS = {"x86_64": 256, "aarch64": 238}
_WORD_BITS = 8 * ctypes.sizeof(ctypes.c_ulong)


class MemoryOps(Protocol):
    """``migrate_pages(2)``: returns the pages that could not be moved; raises ``OSError``."""

    def migrate(self, pid: int, old_nodes: frozenset[int], new_nodes: frozenset[int]) -> int: ...


def node_mask(nodes: Iterable[int]) -> tuple[ctypes.Array[ctypes.c_ulong], int]:
    """The kernel's ``nodemask`` for ``nodes``: an array of unsigned longs, and the
    ``maxnode`` to pass with it (its bits plus one: the kernel reads ``maxnode - 1``
    bits, as libnuma passes them)."""
    wanted = sorted(set(nodes))
    words = (wanted[-1] // _WORD_BITS + 1) if wanted else 1
    mask = (ctypes.c_ulong * words)()
    for node in wanted:
        mask[node // _WORD_BITS] |= 1 << (node % _WORD_BITS)
    return mask, words * _WORD_BITS + 1


class OsMemory:
    """The real system call, through libc's ``syscall()`` (glibc has no wrapper; libnuma's
    ``numa_migrate_pages`` makes the same call)."""

    def __init__(self, machine: str | None = None) -> None:
        self.number = SYSCALL_NUMBERS.get(machine or platform.machine())

    def migrate(self, pid: int, old_nodes: frozenset[int], new_nodes: frozenset[int]) -> int:
        if self.number is None:
            raise OSError(errno.ENOSYS, f"migrate_pages(2) is not known on {platform.machine()}")
        old, old_max = node_mask(old_nodes)
        new, new_max = node_mask(new_nodes)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        result = int(
            libc.syscall(
                ctypes.c_long(self.number),
                ctypes.c_long(pid),
                ctypes.c_ulong(max(old_max, new_max)),
                ctypes.byref(_widened(old, new_max)),
                ctypes.byref(_widened(new, old_max)),
            )
        )
        if result < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return result


def _widened(mask: ctypes.Array[ctypes.c_ulong], other_max: int) -> ctypes.Array[ctypes.c_ulong]:
    """``mask`` with at least as many words as the other mask (both are read with one
    ``maxnode``)."""
    words = max(len(mask), (other_max - 1) // _WORD_BITS)
    if words == len(mask):
        return mask
    wide = (ctypes.c_ulong * words)()
    for i, word in enumerate(mask):
        wide[i] = word
    return wide


class DryRunMemory:
    """Moves nothing; remembers what it would have asked the kernel."""

    def __init__(self) -> None:
        self.would_move: list[tuple[int, frozenset[int], frozenset[int]]] = []

    def migrate(self, pid: int, old_nodes: frozenset[int], new_nodes: frozenset[int]) -> int:
        self.would_move.append((pid, old_nodes, new_nodes))
        return 0


@dataclass(frozen=True)
class MoveMemory:
    """Consent to move a pinned process's pages to its new CPUs' node once every thread
    is pinned (``pin(..., move_memory=...)``), and how: ``ops`` (default ``OsMemory``;
    a dry run always uses ``DryRunMemory``), ``read`` (numa_maps; default
    ``read_numa_maps`` under the pin's root)."""

    topology: Topology
    ops: MemoryOps | None = None
    read: Callable[[int], NodeMemory | None] | None = None


@dataclass(frozen=True)
class MigrationResult:
    """What a migration did. ``attempted``: the system call was made (False on a
    one-node machine, with nothing on other nodes, or when refused before it).
    ``before``/``after``: numa_maps around the call (None: not read, or unreadable).
    ``pages_not_moved``: what the call returned. ``message``: one line saying all of it."""

    ok: bool
    attempted: bool
    to_node: int | None
    from_nodes: tuple[int, ...]
    message: str
    before: NodeMemory | None = None
    after: NodeMemory | None = None
    pages_not_moved: int | None = None
    dry_run: bool = False

    @property
    def moved_bytes(self) -> int | None:
        """Bytes that left the source nodes between the two reads (the process may have
        allocated or freed meanwhile: an estimate, never below zero)."""
        if self.before is None or self.after is None:
            return None
        left = sum(self.before.resident_bytes_by_node.get(n, 0) for n in self.from_nodes)
        stayed = sum(self.after.resident_bytes_by_node.get(n, 0) for n in self.from_nodes)
        return max(0, left - stayed)


def target_node(topology: Topology, cpus: CpuSet) -> int | None:
    """The node to move memory to for a process pinned to ``cpus``: the one node of CPUs
    holding all of them; None when they span nodes (no single node to move to)."""
    return topology.home_node_of(cpus & topology.online_cpus or cpus)


def spans_nodes_message(topology: Topology, cpus: CpuSet) -> str:
    nodes = topology.nodes_of(cpus)
    where = f"span NUMA nodes {format_cpulist(nodes)}" if nodes else "are in no NUMA node"
    return f"moving memory needs CPUs of one NUMA node: CPUs {format_cpulist(cpus)} {where}"


def migrate_memory(
    pid: int,
    to_node: int | None,
    topology: Topology,
    *,
    start_ticks: int | None = None,
    root: str = "/",
    ops: MemoryOps | None = None,
    read: Callable[[int], NodeMemory | None] | None = None,
) -> MigrationResult:
    """Move ``pid``'s pages from every other node of CPUs to ``to_node``. Never raises for
    a system refusal: the result says what happened. ``start_ticks``: the start time of
    the process meant (another process holding the PID now is refused). ``read``: how
    to read numa_maps (default: ``read_numa_maps`` under ``root``)."""
    ops = ops or OsMemory()
    dry_run = isinstance(ops, DryRunMemory)
    if len(topology.cpu_numa_nodes) < 2:
        return MigrationResult(True, False, to_node, (), ONE_NODE, dry_run=dry_run)
    node = None if to_node is None else topology.node(to_node)
    if to_node is None or node is None or not node.cpus:
        return MigrationResult(False, False, to_node, (), f"NUMA node {to_node} is not a node of CPUs here")
    sources = tuple(n.id for n in topology.cpu_numa_nodes if n.id != to_node)
    read = read or (lambda p: read_numa_maps(p, root))
    stat = stat_or_none(ProcFs(root), pid)
    if stat is None or (start_ticks is not None and stat.start_ticks != start_ticks):
        return MigrationResult(False, False, to_node, sources, f"PID {pid} exited: no memory moved")
    before = read(pid)
    if before is not None and not any(before.resident_bytes_by_node.get(n, 0) for n in sources):
        message = f"its memory is already on node {to_node}: nothing to move"
        return MigrationResult(True, False, to_node, sources, message, before=before, dry_run=dry_run)
    try:
        not_moved = ops.migrate(pid, frozenset(sources), frozenset({to_node}))
    except OSError as exc:
        # The kernel may stop part way (a node that fills up): what moved is read, not assumed.
        after = None if dry_run else read(pid)
        failed = MigrationResult(False, True, to_node, sources, "", before, after, None, dry_run)
        moved = failed.moved_bytes
        if moved is not None and moved >= 1 << 20:  # less is the process's own allocation meanwhile
            message = (
                f"memory moved only in part: {_mib(moved)} MiB went to node {to_node} before the kernel stopped "
                f"({refusal(exc, pid, to_node)}); {_on(after, sources)} on node"
                f"{'s' if len(sources) > 1 else ''} {format_cpulist(sources)}"
            )
        else:
            message = f"memory not moved: {refusal(exc, pid, to_node)}"
        return replace(failed, message=message)
    after = before if dry_run else read(pid)
    result = MigrationResult(True, True, to_node, sources, "", before, after, not_moved, dry_run)
    return _with_message(result)


def migrate_after_pin(
    entry: JournalEntry, journal: Journal | None, cpus: CpuSet, request: MoveMemory, *, dry_run: bool, root: str
) -> tuple[MigrationResult, JournalEntry, str | None]:
    """``pin``'s migration, once every thread of ``entry`` is pinned to ``cpus``: the
    intent goes into ``journal`` first (an error there raises, and the pin puts the
    threads back: no page has moved), then the outcome (an error there is only the
    returned note: the pages have moved). Returns the result, the entry as journaled,
    and that note. A dry run calls nothing and writes nothing."""
    topology = request.topology
    to_node = target_node(topology, cpus)
    if len(topology.cpu_numa_nodes) < 2:
        return MigrationResult(True, False, to_node, (), ONE_NODE, dry_run=dry_run), entry, None
    if to_node is None:
        return MigrationResult(False, False, None, (), spans_nodes_message(topology, cpus)), entry, None
    ops = DryRunMemory() if dry_run else request.ops or OsMemory()
    sources = tuple(n.id for n in topology.cpu_numa_nodes if n.id != to_node)
    record = MemoryRecord(entry.pid, sources, to_node)
    if journal is not None:
        entry = replace(entry, memory=record)
        journal.update(entry)
    result = migrate_memory(
        entry.pid, to_node, topology, start_ticks=entry.start_ticks, root=root, ops=ops, read=request.read
    )
    if journal is None:
        return result, entry, None
    outcome = None  # nothing attempted (already there): no migration to record
    if result.attempted:
        outcome = replace(
            record,
            state="moved" if result.ok else "failed",
            bytes_before=_node_bytes(result.before),
            bytes_after=_node_bytes(result.after),
            pages_not_moved=result.pages_not_moved,
            error=None if result.ok else result.message,
        )
    entry = replace(entry, memory=outcome)
    try:
        journal.update(entry)
    except AffmonError as exc:
        return result, entry, f"the journal could not record the memory migration ({exc})"
    return result, entry, None


def _node_bytes(memory: NodeMemory | None) -> NodeBytes | None:
    return None if memory is None else tuple(sorted(memory.resident_bytes_by_node.items()))


def _with_message(result: MigrationResult) -> MigrationResult:
    from_text = f"node{'s' if len(result.from_nodes) > 1 else ''} {format_cpulist(result.from_nodes)}"
    if result.dry_run:
        there = _on(result.before, result.from_nodes)
        message = f"would move the memory on {from_text} ({there}) to node {result.to_node}"
    else:
        moved = result.moved_bytes
        amount = f"{_mib(moved)} MiB" if moved is not None else "its pages"
        message = f"moved {amount} from {from_text} to node {result.to_node}"
        if result.pages_not_moved:
            message += f"; {result.pages_not_moved} page(s) could not be moved (locked, busy, or node full)"
    return replace(result, message=message)


def _on(memory: NodeMemory | None, nodes: tuple[int, ...]) -> str:
    if memory is None:
        return "size unknown"
    return f"{_mib(sum(memory.resident_bytes_by_node.get(n, 0) for n in nodes))} MiB there now"


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.0f}"


def refusal(exc: OSError, pid: int, to_node: int) -> str:
    """One line for a refused ``migrate_pages(2)``."""
    if exc.errno == errno.EPERM:
        return f"not permitted to move the pages of PID {pid} (another user's process needs CAP_SYS_NICE)"
    if exc.errno == errno.ESRCH:
        return f"PID {pid} exited"
    if exc.errno == errno.EINVAL:
        return f"node {to_node} is not a memory node PID {pid} may use (its cpuset's mems, or the node has no memory)"
    if exc.errno == errno.ENOSYS:
        return f"this kernel has no migrate_pages(2) ({exc.strerror})"
    if exc.errno == errno.ENOMEM:
        return f"node {to_node} has not enough free memory"
    return f"migrate_pages(2) failed: {exc.strerror or exc}"


__all__ = [
    "ONE_NODE",
    "DryRunMemory",
    "MemoryOps",
    "MigrationResult",
    "MoveMemory",
    "OsMemory",
    "migrate_after_pin",
    "migrate_memory",
    "node_mask",
    "spans_nodes_message",
    "target_node",
]
