"""Recordings: samples as versioned JSON lines, so a run can be shared, replayed, and
used as test data.

Line 1 is a header: ``{"affmon_recording": 1, "topology": {...}, "host": ..., "nvml": ...,
"interval_s": ...}``; every following line is ``{"sample": {...}}``, one tick. CPU sets
are kernel cpulists. Readers refuse other versions with a one-line ``ParseError``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from affmon.core.cpuset import CpuSet, format_cpulist, parse_cpulist
from affmon.core.errors import ParseError
from affmon.core.samples import GpuProcess, GpuSample, PcieLink, ProcessSample, Sample, ThreadSample
from affmon.core.topology import CacheGroup, Core, Gpu, NumaNode, Package, Topology

FORMAT_VERSION = 1


def _cpus(value: CpuSet | None) -> str | None:
    return None if value is None else format_cpulist(value)


def _set(value: Any) -> CpuSet | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ParseError(f"expected a cpulist string, got {type(value).__name__}")
    return parse_cpulist(value)


def topology_to_json(t: Topology) -> dict[str, Any]:
    """Everything a Topology holds (``Topology.to_json`` is the shorter public shape)."""
    data = t.to_json()
    data["l3_groups"] = [{"level": g.level, "cpus": format_cpulist(g.cpus)} for g in t.l3_groups]
    return data


def topology_from_json(d: dict[str, Any]) -> Topology:
    return Topology.build(
        source=str(d["source"]),
        online_cpus=_set(d["online_cpus"]) or (),
        allowed_cpus=_set(d["allowed_cpus"]) or (),
        numa_nodes=[NumaNode(int(n["id"]), _set(n["cpus"]) or frozenset()) for n in d["numa_nodes"]],
        packages=[Package(int(p["id"]), _set(p["cpus"]) or frozenset()) for p in d["packages"]],
        cores=[Core(int(c["package"]), _set(c["cpus"]) or frozenset()) for c in d["cores"]],
        l3_groups=[CacheGroup(int(g.get("level", 3)), _set(g["cpus"]) or frozenset()) for g in d["l3_groups"]],
        gpus=[Gpu(str(g["pci_bus_id"]), str(g["vendor"]), g["numa_node"], _set(g["local_cpus"])) for g in d["gpus"]],
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


def thread_from_json(row: list[Any]) -> ThreadSample:
    if len(row) != len(_THREAD_FIELDS) + 1:
        raise ParseError(f"thread row has {len(row)} fields, expected {len(_THREAD_FIELDS) + 1}")
    values = dict(zip(_THREAD_FIELDS, row, strict=False))
    return ThreadSample(**values, allowed_cpus=_set(row[-1]))


def process_to_json(p: ProcessSample) -> dict[str, Any]:
    return {
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


def process_from_json(d: dict[str, Any]) -> ProcessSample:
    return ProcessSample(
        pid=int(d["pid"]),
        start_ticks=int(d["start_ticks"]),
        ppid=d["ppid"],
        name=str(d["name"]),
        uid=d["uid"],
        user=d["user"],
        cmdline=d["cmdline"],
        mems_allowed=_set(d["mems_allowed"]),
        cgroup_cpus=_set(d["cgroup_cpus"]),
        threads=tuple(thread_from_json(r) for r in d["threads"]),
        gpu_indices=tuple(int(i) for i in d["gpu_indices"]),
        gpu_memory_bytes=d["gpu_memory_bytes"],
        watched=bool(d["watched"]),
        training=bool(d["training"]),
        kernel=bool(d["kernel"]),
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


def gpu_from_json(d: dict[str, Any]) -> GpuSample:
    values = {name: d[name] for name in _GPU_SCALARS}
    gen, width, max_gen, max_width = d["pcie_link"]
    return GpuSample(
        **values,
        pcie_link=PcieLink(gen, width, max_gen, max_width),
        processes=tuple(GpuProcess(int(pid), mem) for pid, mem in d["processes"]),
    )


def sample_to_json(s: Sample) -> dict[str, Any]:
    return {
        "monotonic_s": s.monotonic_s,
        "wall_time_s": s.wall_time_s,
        "duration_s": s.duration_s,
        "processes": [process_to_json(p) for p in s.processes],
        "gpus": [gpu_to_json(g) for g in s.gpus],
    }


def sample_from_json(d: dict[str, Any]) -> Sample:
    return Sample(
        monotonic_s=float(d["monotonic_s"]),
        wall_time_s=float(d["wall_time_s"]),
        duration_s=float(d["duration_s"]),
        processes=tuple(process_from_json(p) for p in d["processes"]),
        gpus=tuple(gpu_from_json(g) for g in d["gpus"]),
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


def read_recording(lines: Iterable[str], name: str = "recording") -> tuple[Header, Iterator[Sample]]:
    """Parse the header now and the samples lazily; any fault is one ``ParseError`` line."""
    it = iter(lines)
    try:
        first = next(it)
    except StopIteration:
        raise ParseError(f"{name}: empty file, not an affmon recording") from None
    try:
        head = json.loads(first)
        version = head.get("affmon_recording") if isinstance(head, dict) else None
        if version is None:
            raise ParseError(f"{name}: not an affmon recording (no header line)")
        if version != FORMAT_VERSION:
            raise ParseError(f"{name}: recording format {version!r}, this affmon reads {FORMAT_VERSION}")
        header = Header(
            topology_from_json(head["topology"]), head.get("host"), head.get("nvml"), head.get("interval_s")
        )
    except ParseError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ParseError(f"{name}: bad header line: {exc}") from None

    def samples() -> Iterator[Sample]:
        for number, line in enumerate(it, start=2):
            if not line.strip():
                continue
            try:
                yield sample_from_json(json.loads(line)["sample"])
            except ParseError as exc:
                raise ParseError(f"{name}, line {number}: {exc}") from None
            except (ValueError, KeyError, TypeError) as exc:
                raise ParseError(f"{name}, line {number}: bad sample: {exc}") from None

    return header, samples()
