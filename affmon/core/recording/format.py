"""Recordings: samples as versioned JSON lines, so a run can be shared, replayed, and
used as test data.

Line 1 is a header: ``{"affmon_recording": 1, "topology": {...}, "host": ..., "nvml": ...,
"interval_s": ...}``; every following line is ``{"sample": {...}}``, one tick. CPU sets
are kernel cpulists. Readers refuse other versions with a one-line ``ParseError``. Keys added
since version 1 (``cpu_ns``, ``threads_read``, a probed process's ``loop`` window:
``affmon.core.recording.loop``; ``memory`` and ``context``:
``affmon.core.recording.extras``) are optional: older recordings read without them.

A recording keeps the command lines of the watched processes only (``private_sample``):
the other processes are sampled as evidence of what else runs on the job's CPUs, and
their command lines (shell setup, agents' flags, tokens passed as arguments) are not
about the job.

A live sample is bounded by the kernel; a file is not, so a sample is bounded where it is
read (``MAX_THREADS_PER_PROCESS``, ``MAX_ROWS_PER_SAMPLE``, ``MAX_MASK_CPUS_PER_SAMPLE``),
and one over a bound is refused with one ``ParseError`` naming its line before any of its
rows is made a ``ThreadSample``. The line itself is decoded whole first, within the line
cap of ``affmon.core.recording.lines``: refusing a 61 MB line of 950,000 thread rows peaks at
560 MB and takes 2.5 s (``affmon audit --replay``; it took 14 s and 1.4 GB to read it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from affmon.core.errors import ParseError
from affmon.core.model.cpuset import CpuSet, format_cpulist, parse_cpulist
from affmon.core.model.samples import GpuProcess, GpuSample, PcieLink, ProcessSample, Sample, ThreadSample
from affmon.core.model.topology import (
    MAX_NODE_MEMORY_BYTES,
    CacheGroup,
    Core,
    Gpu,
    NumaNode,
    Package,
    Topology,
    distance_problem,
)
from affmon.core.recording.extras import context_from_json, context_to_json, memory_from_json, memory_to_json
from affmon.core.recording.json_values import (
    read_bool,
    read_dict,
    read_float,
    read_int,
    read_list,
    read_opt_float,
    read_opt_int,
    read_opt_str,
    read_str,
)
from affmon.core.recording.loop import window_from_json, window_to_json

FORMAT_VERSION = 1

# A real process rarely has more than ~30,000 threads (a JVM or a Go server with a
# thread per connection); twice that is still a process. The kernel's own bound, pid_max
# (4,194,304 at most), is no bound for a reader: a line of 64 MiB holds 1.1 million
# minimal thread rows, and one of 950,000 took 1.4 GB to audit.
MAX_THREADS_PER_PROCESS = 1 << 16
# Rows of one sample: processes, their threads, GPUs and the GPUs' processes. Two
# processes at the bound above; 13 times the 10,000 threads the monitor's costs are
# measured at (docs/measurements.md).
MAX_ROWS_PER_SAMPLE = 1 << 17
# CPU ids of the distinct masks of one sample, summed: each distinct cpulist text is parsed
# once (``_Masks``), and a parsed set holds one int per CPU (a 65,536-CPU one is 3.7 MiB,
# so 100,000 distinct wide masks would be hundreds of GB). A machine of the most CPUs a
# kernel is built for (8,192) with a mask per CPU, per NUMA node and per rank has about
# 30,000; this bound is 32 masks of every CPU of such a machine (about 15 MB).
MAX_MASK_CPUS_PER_SAMPLE = 1 << 18


def _cpus(value: CpuSet | None) -> str | None:
    return None if value is None else format_cpulist(value)


def _set(value: Any) -> CpuSet | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ParseError(f"expected a cpulist string, got {type(value).__name__}")
    return parse_cpulist(value)


class _Masks:
    """The cpulists of one sample, each text parsed once and held once: nearly every thread
    of a process has the mask its neighbours have, and a file may repeat a wide one in every
    row. Refuses a sample whose distinct masks hold more than ``MAX_MASK_CPUS_PER_SAMPLE``
    CPU ids together."""

    def __init__(self) -> None:
        self._parsed: dict[str, CpuSet] = {}
        self._cpus = 0

    def __call__(self, value: Any) -> CpuSet | None:
        if value is None:
            return None
        if not isinstance(value, str):
            raise ParseError(f"expected a cpulist string, got {type(value).__name__}")
        found = self._parsed.get(value)
        if found is None:
            found = parse_cpulist(value)
            self._cpus += len(found)
            if self._cpus > MAX_MASK_CPUS_PER_SAMPLE:
                raise ParseError(
                    f"the sample's distinct CPU masks hold more than {MAX_MASK_CPUS_PER_SAMPLE:,} CPU ids; "
                    "affmon reads no more"
                )
            self._parsed[value] = found
        return found


def _check_rows(d: dict[str, Any]) -> None:
    """Refuse a sample over the bounds before any of its rows is read (processes,
    threads, GPUs, the GPUs' processes, as written); what is not a list counts nothing
    here (the readers refuse it)."""

    def items(value: Any) -> list[Any]:
        return value if isinstance(value, list) else []

    processes, gpus = items(d.get("processes")), items(d.get("gpus"))
    rows = len(processes) + len(gpus)
    for p in processes:
        threads = len(items(p.get("threads"))) if isinstance(p, dict) else 0
        if threads > MAX_THREADS_PER_PROCESS:
            pid = p.get("pid")
            who = f"process {pid}" if type(pid) is int else "a process"
            raise ParseError(
                f"{who} has {threads:,} threads; affmon reads at most {MAX_THREADS_PER_PROCESS:,} a process"
            )
        rows += threads
    rows += sum(len(items(g.get("processes"))) for g in gpus if isinstance(g, dict))
    if rows > MAX_ROWS_PER_SAMPLE:
        raise ParseError(
            f"{rows:,} rows (processes, threads, GPUs); affmon reads at most {MAX_ROWS_PER_SAMPLE:,} a sample"
        )


def topology_to_json(t: Topology) -> dict[str, Any]:
    """Everything a Topology holds (``Topology.to_json`` is the shorter public shape),
    its notes aside. A node's ``memory_bytes`` and the ``node_distances`` are written
    when known, ``gpus_known`` only when false: absent, they read as unknown memory and
    distances and as GPUs read from a PCI bus, which is what a recording made before
    they existed means. So such a recording's header is written back unchanged."""
    data = t.to_json()
    data["l3_groups"] = [{"level": g.level, "cpus": format_cpulist(g.cpus)} for g in t.l3_groups]
    for node in data["numa_nodes"]:
        if node["memory_bytes"] is None:
            del node["memory_bytes"]
    if data["node_distances"] is None:
        del data["node_distances"]
    if data["gpus_known"]:
        del data["gpus_known"]
    return data


def _numa_node(n: dict[str, Any]) -> NumaNode:
    node_id, cpus = read_int(n["id"], "node id"), _set(n["cpus"]) or frozenset()
    memory_only = read_bool(n.get("memory_only", False), "memory_only")
    if memory_only and cpus:
        raise ParseError(f"NUMA node {node_id} is marked memory only but lists CPUs")
    memory = read_opt_int(n.get("memory_bytes"), "memory_bytes")
    if memory is not None and not 0 <= memory <= MAX_NODE_MEMORY_BYTES:
        raise ParseError(f"NUMA node {node_id}: memory_bytes {memory} is not a node's memory")
    return NumaNode(node_id, cpus, memory_only=memory_only, memory_bytes=memory)


def _node_distances(value: Any, nodes: list[NumaNode]) -> list[list[int]] | None:
    """The matrix as written (rows and columns in the order of the recording's nodes),
    reordered by node id as ``Topology.build`` takes it; None when absent."""
    if value is None:
        return None
    written = [
        [read_int(v, "node distance") for v in read_list(row, "node_distances row")]
        for row in read_list(value, "node_distances")
    ]
    ids = [n.id for n in nodes]
    problem = distance_problem(ids, written)
    if problem is not None:
        raise ParseError(f"node_distances: {problem}")
    order = sorted(range(len(ids)), key=lambda i: ids[i])
    return [[written[i][j] for j in order] for i in order]


def topology_from_json(d: dict[str, Any]) -> Topology:
    d = read_dict(d, "topology")

    def items(key: str) -> list[dict[str, Any]]:
        return [read_dict(item, key) for item in read_list(d[key], key)]

    nodes = [_numa_node(n) for n in items("numa_nodes")]
    return Topology.build(
        source=read_str(d["source"], "source"),
        online_cpus=_set(d["online_cpus"]) or (),
        allowed_cpus=_set(d["allowed_cpus"]) or (),
        numa_nodes=nodes,
        node_distances=_node_distances(d.get("node_distances"), nodes),
        gpus_known=read_bool(d.get("gpus_known", True), "gpus_known"),
        packages=[Package(read_int(p["id"], "package id"), _set(p["cpus"]) or frozenset()) for p in items("packages")],
        cores=[Core(read_int(c["package"], "core package"), _set(c["cpus"]) or frozenset()) for c in items("cores")],
        l3_groups=[
            CacheGroup(read_int(g.get("level", 3), "cache level"), _set(g["cpus"]) or frozenset())
            for g in items("l3_groups")
        ],
        gpus=[
            Gpu(
                read_str(g["pci_bus_id"], "pci_bus_id"),
                read_str(g["vendor"], "vendor"),
                read_opt_int(g["numa_node"], "numa_node"),
                _set(g["local_cpus"]),
            )
            for g in items("gpus")
        ],
    )


_THREAD_FIELDS = (
    "tid",
    "start_ticks",
    "name",
    "state",
    "psr",
    "flags",
    "cpu_ns",
    "wait_ns",
    "timeslices",
    "voluntary_switches",
    "involuntary_switches",
    "migrations",
)


def thread_to_json(t: ThreadSample) -> list[Any]:
    """A compact row: the fields in ``_THREAD_FIELDS`` order, then the mask."""
    return [getattr(t, name) for name in _THREAD_FIELDS] + [_cpus(t.allowed_cpus)]


# How each of ``_THREAD_FIELDS`` is read.
_THREAD_READERS = (read_int, read_int, read_str, read_str, *[read_opt_int] * 8)


def thread_from_json(row: list[Any], masks: _Masks | None = None) -> ThreadSample:
    row = read_list(row, "thread row")
    if len(row) != len(_THREAD_FIELDS) + 1:
        raise ParseError(f"thread row has {len(row)} fields, expected {len(_THREAD_FIELDS) + 1}")
    values: dict[str, Any] = {
        name: read(value, name) for name, read, value in zip(_THREAD_FIELDS, _THREAD_READERS, row, strict=False)
    }
    return ThreadSample(**values, allowed_cpus=(_Masks() if masks is None else masks)(row[-1]))


def process_to_json(p: ProcessSample) -> dict[str, Any]:
    data: dict[str, Any] = {
        "pid": p.pid,
        "start_ticks": p.start_ticks,
        "ppid": p.ppid,
        "name": p.name,
        "uid": p.uid,
        "user": p.user,
        "cmdline": p.cmdline,
        "mems_allowed": _cpus(p.mems_allowed),
        "cgroup_cpus": _cpus(p.cgroup_cpus),
        "gpu_indices": list(p.gpu_indices),
        "gpu_memory_bytes": p.gpu_memory_bytes,
        "watched": p.watched,
        "training": p.training,
        "kernel": p.kernel,
        "threads": [thread_to_json(t) for t in p.threads],
    }
    # Written only where they say something, so that older recordings read back unchanged.
    if p.cpu_ns is not None:
        data["cpu_ns"] = p.cpu_ns
    if not p.threads_read:
        data["threads_read"] = False
    if p.loop is not None:
        data["loop"] = window_to_json(p.loop)
    if p.memory is not None:
        data["memory"] = memory_to_json(p.memory)
    if p.context is not None:
        data["context"] = context_to_json(p.context)
    return data


def process_from_json(d: dict[str, Any], masks: _Masks | None = None) -> ProcessSample:
    d = read_dict(d, "process")
    pid = read_int(d["pid"], "pid")
    rows = read_list(d["threads"], "threads")
    if len(rows) > MAX_THREADS_PER_PROCESS:
        raise ParseError(
            f"process {pid} has {len(rows):,} threads; affmon reads at most {MAX_THREADS_PER_PROCESS:,} a process"
        )
    masks = _Masks() if masks is None else masks
    loop = d.get("loop")
    return ProcessSample(
        pid=pid,
        start_ticks=read_int(d["start_ticks"], "start_ticks"),
        ppid=read_opt_int(d["ppid"], "ppid"),
        name=read_str(d["name"], "name"),
        uid=read_opt_int(d["uid"], "uid"),
        user=read_opt_str(d["user"], "user"),
        cmdline=read_opt_str(d["cmdline"], "cmdline"),
        mems_allowed=masks(d["mems_allowed"]),
        cgroup_cpus=masks(d["cgroup_cpus"]),
        threads=tuple(thread_from_json(r, masks) for r in rows),
        gpu_indices=tuple(read_int(i, "gpu_indices") for i in read_list(d["gpu_indices"], "gpu_indices")),
        gpu_memory_bytes=read_opt_int(d["gpu_memory_bytes"], "gpu_memory_bytes"),
        watched=read_bool(d["watched"], "watched"),
        training=read_bool(d["training"], "training"),
        kernel=read_bool(d["kernel"], "kernel"),
        # Absent from recordings made before these were sampled.
        cpu_ns=read_opt_int(d.get("cpu_ns"), "cpu_ns"),
        threads_read=read_bool(d.get("threads_read", True), "threads_read"),
        loop=None if loop is None else window_from_json(loop, pid),
        memory=None if d.get("memory") is None else memory_from_json(d["memory"]),
        context=None if d.get("context") is None else context_from_json(d["context"]),
    )


_GPU_SCALARS = (
    "index",
    "name",
    "pci_bus_id",
    "uuid",
    "util_percent",
    "mem_util_percent",
    "mem_used_bytes",
    "mem_total_bytes",
    "pcie_tx_bytes_total",
    "pcie_rx_bytes_total",
    "pcie_tx_window_bytes_per_s",
    "pcie_rx_window_bytes_per_s",
    "power_w",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "lost",
)


def gpu_to_json(g: GpuSample) -> dict[str, Any]:
    data = {name: getattr(g, name) for name in _GPU_SCALARS}
    link = g.pcie_link
    data["pcie_link"] = [link.gen, link.width, link.max_gen, link.max_width]
    data["processes"] = [[p.pid, p.used_memory_bytes] for p in g.processes]
    return data


# How each of ``_GPU_SCALARS`` is read.
_GPU_READERS = (
    read_int,
    *[read_opt_str] * 3,
    *[read_opt_int] * 6,
    *[read_opt_float] * 3,
    *[read_opt_int] * 2,
    read_bool,
)


def gpu_from_json(d: dict[str, Any]) -> GpuSample:
    d = read_dict(d, "gpu")
    values: dict[str, Any] = {name: read(d[name], name) for name, read in zip(_GPU_SCALARS, _GPU_READERS, strict=True)}
    link = read_list(d["pcie_link"], "pcie_link")
    if len(link) != 4:
        raise ParseError(f"pcie_link has {len(link)} fields, expected 4")
    gen, width, max_gen, max_width = (read_opt_int(v, "pcie_link") for v in link)
    processes = []
    for item in read_list(d["processes"], "gpu processes"):
        pair = read_list(item, "gpu process")
        if len(pair) != 2:
            raise ParseError(f"gpu process has {len(pair)} fields, expected 2")
        processes.append(GpuProcess(read_int(pair[0], "gpu process pid"), read_opt_int(pair[1], "gpu process memory")))
    return GpuSample(**values, pcie_link=PcieLink(gen, width, max_gen, max_width), processes=tuple(processes))


def sample_to_json(s: Sample) -> dict[str, Any]:
    return {
        "monotonic_s": s.monotonic_s,
        "wall_time_s": s.wall_time_s,
        "duration_s": s.duration_s,
        "processes": [process_to_json(p) for p in s.processes],
        "gpus": [gpu_to_json(g) for g in s.gpus],
    }


def sample_from_json(d: dict[str, Any]) -> Sample:
    d = read_dict(d, "sample")
    _check_rows(d)
    masks = _Masks()
    return Sample(
        monotonic_s=read_float(d["monotonic_s"], "monotonic_s"),
        wall_time_s=read_float(d["wall_time_s"], "wall_time_s"),
        duration_s=read_float(d["duration_s"], "duration_s"),
        processes=tuple(process_from_json(p, masks) for p in read_list(d["processes"], "processes")),
        gpus=tuple(gpu_from_json(g) for g in read_list(d["gpus"], "gpus")),
    )


@dataclass(frozen=True)
class Header:
    topology: Topology
    host: str | None
    nvml: str | None
    interval_s: float | None


def header_line(topology: Topology, host: str | None, nvml: str | None, interval_s: float | None) -> str:
    return json.dumps(
        {
            "affmon_recording": FORMAT_VERSION,
            "topology": topology_to_json(topology),
            "host": host,
            "nvml": nvml,
            "interval_s": interval_s,
        }
    )


def sample_line(sample: Sample) -> str:
    return json.dumps({"sample": sample_to_json(sample)}, separators=(",", ":"))


def private_sample(sample: Sample) -> Sample:
    """The sample with the command line of every process that is not watched made null
    (its name, threads and counters kept): what ``affmon record`` writes without
    ``--all``. A kernel thread's empty command line says nothing and stays."""
    if all(p.watched or not p.cmdline for p in sample.processes):
        return sample
    return replace(
        sample,
        processes=tuple(p if p.watched or not p.cmdline else replace(p, cmdline=None) for p in sample.processes),
    )


def parse_sample_line(text: str, name: str, number: int) -> Sample:
    """One ``{"sample": ...}`` line; any fault is one ``ParseError`` naming the line."""
    try:
        return sample_from_json(json.loads(text)["sample"])
    except ParseError as exc:
        raise ParseError(f"{name}, line {number}: {exc}") from None
    except (ValueError, KeyError, TypeError, RecursionError) as exc:  # RecursionError: lists nested thousands deep
        raise ParseError(f"{name}, line {number}: bad sample: {exc}") from None


# 2**33 s after the epoch is in the year 2242. A wall time outside [0, 2**33) is no time a
# sample was taken, and one of 1e20 s overflows time.localtime, which the monitor's header
# calls to show the clock.
WALL_TIME_LIMIT_S = float(2**33)


def check_replay_order(sample: Sample, previous: Sample | None, name: str, number: int) -> None:
    """What a replay needs beyond a well-formed sample: a wall time that is a plausible
    epoch, and a monotonic clock that moved on since the previous sample (rates and the
    replay's pace are differences between the two)."""
    if not 0 <= sample.wall_time_s < WALL_TIME_LIMIT_S:
        raise ParseError(
            f"{name}, line {number}: wall_time_s {sample.wall_time_s:g} is not a time "
            f"between 1970 and 2242 (seconds since the epoch)"
        )
    if previous is not None and not sample.monotonic_s > previous.monotonic_s:
        raise ParseError(
            f"{name}, line {number}: monotonic_s {sample.monotonic_s:g} is not after the previous "
            f"sample's {previous.monotonic_s:g}; samples must be in the order they were taken"
        )


def read_recording(lines: Iterable[str], name: str = "recording") -> tuple[Header, Iterator[Sample]]:
    """Parse the header now and the samples lazily; any fault is one ``ParseError`` line."""
    it = iter(lines)
    try:
        first = next(it)
    except StopIteration:
        raise ParseError(f"{name}: empty file, not an affmon recording") from None
    try:
        head = json.loads(first)
    except (ValueError, RecursionError) as exc:  # RecursionError: lists nested thousands deep
        raise ParseError(f"{name}: bad header line: {exc}") from None
    version = head.get("affmon_recording") if isinstance(head, dict) else None
    if version is None:
        raise ParseError(f"{name}: not an affmon recording (no header line)")
    if version != FORMAT_VERSION:
        raise ParseError(f"{name}: recording format {version!r}, this affmon reads {FORMAT_VERSION}")
    try:
        header = Header(
            topology_from_json(head["topology"]),
            read_opt_str(head.get("host"), "host"),
            read_opt_str(head.get("nvml"), "nvml"),
            read_opt_float(head.get("interval_s"), "interval_s"),
        )
    except (ParseError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ParseError(f"{name}: bad header line: {exc}") from None

    def samples() -> Iterator[Sample]:
        for number, line in enumerate(it, start=2):
            if line.strip():
                yield parse_sample_line(line, name, number)

    return header, samples()
