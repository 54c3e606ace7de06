"""Where a process's memory sits, per NUMA node, and the ``REMOTE_MEMORY`` rule.

``CROSS_NUMA`` judges where threads run; this module judges where their pages are. A
rank pinned to node 0 whose tensors were first touched on node 1 (it started unpinned,
or was moved after allocating) reads every byte across the interconnect, and no thread
placement shows it. ``NodeMemory`` is what ``/proc/PID/numa_maps`` says (read by
``affmon.collect.numa_maps``); ``rule_remote_memory`` turns it into findings.

Only anonymous memory is judged (mappings with no file behind them: heap, stack,
anonymous ``mmap``, and the kernel's stand-in files of anonymous hugetlb, shared
anonymous, memfd and SysV memory; that is where a process's tensors, buffers and Python
objects live). File pages (shared libraries, the CUDA libraries' hundreds of MiB, mapped data
files) sit on the node of whichever process first read them and are shared by every
rank of the job, so for ranks on the other node they are always "remote" and no
placement of one rank changes that. Memory-only nodes (GPU memory on Grace Hopper,
HBM, CXL: ``Topology.memory_only_nodes``) are never remote: memory is put there on
purpose; their bytes are left out of the share and shown as evidence.

Pure: imports no textual, psutil or pynvml.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from affmon.core.model.cpuset import CpuSet, format_cpulist
from affmon.core.model.jobs import Job
from affmon.core.model.rates import ProcessRates
from affmon.core.model.samples import NodeMemory
from affmon.core.model.topology import Topology
from affmon.core.rules.base import Finding, Severity

MIB = 1 << 20


@dataclass(frozen=True)
class MemoryThresholds:
    """``remote_share``: the share of a process's anonymous memory on CPU nodes that
    sits off its home node, from which it is a finding ("most": more than half);
    ``remote_share_bad``: from which it is bad. ``min_bytes``: less anonymous memory
    than this is not judged (a helper process's few MiB say nothing; a training rank
    holds GiBs)."""

    remote_share: float = 0.5
    remote_share_bad: float = 0.9
    min_bytes: int = 64 * MIB


DEFAULT_MEMORY_THRESHOLDS = MemoryThresholds()


@dataclass(frozen=True)
class RemoteShare:
    """One process judged: its home node, the anonymous bytes on CPU nodes, the part of
    them off the home node (by node), and the bytes on memory-only nodes (not judged)."""

    pid: int
    home_node: int
    judged_bytes: int
    remote_bytes_by_node: Mapping[int, int]
    memory_only_bytes: int

    @property
    def remote_bytes(self) -> int:
        return sum(self.remote_bytes_by_node.values())

    @property
    def share(self) -> float:
        return self.remote_bytes / self.judged_bytes if self.judged_bytes else 0.0


def home_node(topology: Topology, mask: CpuSet | None, ran_on: Iterable[int] = ()) -> int | None:
    """The node a process's memory belongs on: the one node holding its whole mask (its
    online part), else the one node holding every CPU its threads ran on; None when
    neither is a single node (an unpinned process that ran on both sockets has no home)."""
    if mask is not None:
        node = topology.home_node_of(mask & topology.online_cpus)
        if node is not None:
            return node
    ran = frozenset(ran_on)
    return topology.home_node_of(ran) if ran else None


def remote_share(
    pid: int, memory: NodeMemory, home: int, topology: Topology, thresholds: MemoryThresholds
) -> RemoteShare | None:
    """How much of ``memory`` (anonymous) sits on CPU nodes other than ``home``; None when
    there is too little anonymous memory on CPU nodes to judge."""
    memory_only = {n.id for n in topology.memory_only_nodes}
    judged = {node: b for node, b in memory.anon_bytes_by_node.items() if node not in memory_only and b > 0}
    total = sum(judged.values())
    if total < thresholds.min_bytes:
        return None
    return RemoteShare(
        pid=pid,
        home_node=home,
        judged_bytes=total,
        remote_bytes_by_node={node: b for node, b in sorted(judged.items()) if node != home},
        memory_only_bytes=sum(b for node, b in memory.anon_bytes_by_node.items() if node in memory_only),
    )


def rule_remote_memory(
    job: Job,
    topology: Topology,
    memory_of: Callable[[ProcessRates], NodeMemory | None],
    thresholds: MemoryThresholds = DEFAULT_MEMORY_THRESHOLDS,
) -> list[Finding]:
    """``REMOTE_MEMORY`` for one job (a rank and its workers): each member whose memory
    is known is judged against its own home node; one finding names every member where
    more than ``remote_share`` of its anonymous memory sits on other CPU nodes. Nothing
    on a machine with one node of CPUs."""
    if len(topology.cpu_numa_nodes) < 2:
        return []
    found: list[RemoteShare] = []
    for member in job.members:
        memory = memory_of(member)
        main = member.sample.main_thread
        home = home_node(topology, main.allowed_cpus if main else None, member.ran_on_cpus)
        if memory is None or home is None:
            continue
        judged = remote_share(member.sample.pid, memory, home, topology, thresholds)
        if judged is not None and judged.share > thresholds.remote_share:
            found.append(judged)
    if not found:
        return []
    return [_finding(job, found, thresholds)]


def _finding(job: Job, found: list[RemoteShare], thresholds: MemoryThresholds) -> Finding:
    worst = max(found, key=lambda r: r.share)
    severity = Severity.BAD if worst.share >= thresholds.remote_share_bad else Severity.WARN
    remote_nodes = sorted({node for r in found for node in r.remote_bytes_by_node if r.remote_bytes_by_node[node]})
    where = f"node {remote_nodes[0]}" if len(remote_nodes) == 1 else f"nodes {format_cpulist(remote_nodes)}"
    numbers = f"{_gib(worst.remote_bytes)} of {_gib(worst.judged_bytes)} anonymous"
    if len(found) == 1 and found[0].pid == job.pid:
        what, whose = f"{worst.share:.0%} of its memory ({numbers}) sits", "its"
    else:
        pids = ", ".join(str(r.pid) for r in found)
        what = f"most of the memory of {len(found)} of its processes ({pids}; worst {worst.share:.0%}, {numbers}) sits"
        whose = "their"
    message = (
        f"{what} on {where} while {whose} CPUs are on node {worst.home_node}: every access to it crosses the"
        f" interconnect (`affmon pin {job.pid} --cpus ... --migrate-memory` moves it to the CPUs' node)"
    )
    evidence = {
        "processes": [
            {
                "pid": r.pid,
                "home_node": r.home_node,
                "remote_share": round(r.share, 3),
                "judged_bytes": r.judged_bytes,
                "remote_bytes_by_node": {str(node): b for node, b in r.remote_bytes_by_node.items()},
                "memory_only_bytes": r.memory_only_bytes,
            }
            for r in found
        ],
        "remote_nodes": remote_nodes,
    }
    return Finding("REMOTE_MEMORY", severity, job.pid, (job.pid,), message, evidence)


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / MIB:.0f} MiB"


__all__ = [
    "DEFAULT_MEMORY_THRESHOLDS",
    "MemoryThresholds",
    "NodeMemory",
    "RemoteShare",
    "home_node",
    "remote_share",
    "rule_remote_memory",
]
