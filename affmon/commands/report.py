"""Plain-text and JSON shapes of a topology and of a snapshot (``affmon topology`` and
``affmon snapshot``). Pure: takes values, returns strings and dicts.

The JSON keeps every name as it is (``json.dumps`` escapes control characters); the text
shows each foreign string (process and thread names, command lines, users, GPU names, bus
ids, NVML's status) through ``term_safe``, so a name cannot move the cursor or forge a line."""

from __future__ import annotations

from typing import Any

from affmon.core import fmt
from affmon.core.model.cpuset import CpuSet, format_cpulist
from affmon.core.model.rates import GpuRates, ProcessRates, Snapshot, ThreadRates
from affmon.core.model.topology import Topology, format_gib
from affmon.core.rules.loop_report import LoopReport, loop_reports
from affmon.core.text import term_safe


def _cpus(cpus: CpuSet | None) -> str | None:
    return None if cpus is None else format_cpulist(cpus)


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def thread_json(t: ThreadRates) -> dict[str, Any]:
    s = t.sample
    return {
        "tid": s.tid,
        "name": s.name,
        "state": s.state,
        "psr": s.psr,
        "allowed_cpus": _cpus(s.allowed_cpus),
        "cpu_percent": _round(t.cpu_percent, 1),
        "wait_ratio": _round(t.wait_ratio, 3),
        "voluntary_switches_per_s": _round(t.voluntary_switches_per_s, 1),
        "involuntary_switches_per_s": _round(t.involuntary_switches_per_s, 1),
        "migrations_per_s": _round(t.migrations_per_s, 1),
    }


def process_json(p: ProcessRates, loop: LoopReport | None = None) -> dict[str, Any]:
    """The process as JSON; ``loop`` (its training loop's breakdown) only where it was probed."""
    s = p.sample
    main = s.main_thread
    data: dict[str, Any] = {
        "pid": s.pid,
        "ppid": s.ppid,
        "user": s.user,
        "name": s.name,
        "cmdline": s.cmdline,
        "gpus": list(s.gpu_indices),
        "gpu_memory_bytes": s.gpu_memory_bytes,
        "allowed_cpus": _cpus(main.allowed_cpus if main else None),
        "cgroup_cpus": _cpus(s.cgroup_cpus),
        "mems_allowed": _cpus(s.mems_allowed),
        "thread_count": len(s.threads),
        "cpu_percent": _round(p.cpu_percent, 1),
        "wait_ratio": _round(p.wait_ratio, 3),
        "voluntary_switches_per_s": _round(p.voluntary_switches_per_s, 1),
        "involuntary_switches_per_s": _round(p.involuntary_switches_per_s, 1),
        "migrations_per_s": _round(p.migrations_per_s, 1),
        "ran_on_cpus": format_cpulist(p.ran_on_cpus),
        "ran_on_numa_nodes": list(p.ran_on_numa_nodes),
        "threads": [thread_json(t) for t in p.threads],
    }
    if loop is not None:
        data["loop"] = loop.to_json()
    data["memory_by_node"] = None if s.memory is None else s.memory.to_json()
    data["context"] = None if s.context is None or s.context.empty else s.context.to_json()
    return data


def gpu_json(g: GpuRates) -> dict[str, Any]:
    s = g.sample
    link = s.pcie_link
    return {
        "index": s.index,
        "name": s.name,
        "pci_bus_id": s.pci_bus_id,
        "lost": s.lost,
        "numa_node": g.numa_node,
        "local_cpus": _cpus(g.local_cpus),
        "util_percent": s.util_percent,
        "mem_util_percent": s.mem_util_percent,
        "mem_used_bytes": s.mem_used_bytes,
        "mem_total_bytes": s.mem_total_bytes,
        "pcie_rx_bytes_per_s": _round(g.pcie_rx_bytes_per_s, 0),
        "pcie_tx_bytes_per_s": _round(g.pcie_tx_bytes_per_s, 0),
        "pcie_link": {
            "gen": link.gen,
            "width": link.width,
            "max_gen": link.max_gen,
            "max_width": link.max_width,
        },
        "power_w": _round(s.power_w, 1),
        "sm_clock_mhz": s.sm_clock_mhz,
        "mem_clock_mhz": s.mem_clock_mhz,
        "pids": [p.pid for p in s.processes],
    }


def snapshot_json(snap: Snapshot, nvml_status: str | None = None) -> dict[str, Any]:
    loops = loop_reports(snap)
    return {
        "topology": snap.topology.to_json(),
        "nvml": nvml_status,
        "sampling": {
            "threads": snap.current.thread_count,
            "processes": len(snap.current.processes),
            "interval_s": round(snap.interval_s, 3),
            "seconds": [round(snap.previous.duration_s, 4), round(snap.current.duration_s, 4)],
        },
        "gpus": [gpu_json(g) for g in snap.gpus],
        "processes": [process_json(p, loops.get(p.sample.pid)) for p in snap.processes],
    }


# -- text ---------------------------------------------------------------------


def _fmt(value: float | None, spec: str, unknown: str = fmt.UNKNOWN) -> str:
    return unknown if value is None else format(value, spec)


def _bytes_per_s(value: float | None) -> str:
    """As the monitor shows it (``fmt.bytes_per_s``): one spelling of a rate everywhere."""
    return fmt.bytes_per_s(value)


def topology_text(t: Topology) -> str:
    """``affmon topology``'s text: CPUs, packages, cores and caches, each NUMA node with
    its CPUs and memory, the node distances as ``numactl -H`` prints them (2+ nodes),
    and the GPUs, or why they are unknown."""
    smt = max((len(c.cpus) for c in t.cores), default=1)
    lines = [
        f"source: {term_safe(t.source)}",
        f"CPUs: {len(t.online_cpus)} online ({format_cpulist(t.online_cpus) or 'none'}), "
        f"allowed {format_cpulist(t.allowed_cpus) or 'none'}",
        f"packages: {len(t.packages)}, cores: {len(t.cores)} (up to {smt} threads each), "
        f"highest shared cache groups: {len(t.l3_groups)}" + (f" (L{t.l3_groups[0].level})" if t.l3_groups else ""),
        "NUMA nodes:",
    ]
    for n in t.numa_nodes:
        gpus = [term_safe(g.pci_bus_id) for g in t.gpus if g.numa_node == n.id]
        note = f"  GPUs: {', '.join(gpus)}" if gpus else ""
        cpus = format_cpulist(n.cpus) or "(none: memory only)"
        lines.append(f"  node {n.id}: CPUs {cpus}, memory {format_gib(n.memory_bytes)}{note}")
    if len(t.numa_nodes) > 1:
        lines += distance_table(t)
    for p in t.packages:
        lines.append(f"package {p.id}: CPUs {format_cpulist(p.cpus)}")
    for i, g in enumerate(t.l3_groups):
        lines.append(f"L{g.level} group {i}: CPUs {format_cpulist(g.cpus)}")
    if t.gpus:
        lines.append("GPUs:")
        for gpu in t.gpus:
            node = "unknown (firmware gives none)" if gpu.numa_node is None else str(gpu.numa_node)
            local = "unknown" if gpu.local_cpus is None else format_cpulist(gpu.local_cpus)
            lines.append(f"  {term_safe(gpu.pci_bus_id)} {term_safe(gpu.vendor)}: NUMA node {node}, local CPUs {local}")
    elif not t.gpus_known:
        where = "this file has no PCI devices" if t.source == "hwloc-xml" else "this tree has no PCI bus"
        lines.append(f"{where}: GPUs unknown")
    else:
        lines.append("GPUs: none found on the PCI bus")
    return "\n".join(lines)


def distance_table(t: Topology) -> list[str]:
    """``node distances:`` and the matrix, laid out as ``numactl -H`` does (columns of at
    least three characters, wider for wider numbers), or one line saying it is unknown."""
    if t.node_distances is None:
        return ["node distances: unknown"]
    ids = [n.id for n in t.numa_nodes]
    width = max(3, *(len(str(v)) for v in ids), *(len(str(v)) for row in t.node_distances for v in row))
    lines = ["node distances:", f"{'node':<{width + 2}}" + " ".join(f"{i:>{width}}" for i in ids)]
    for node_id, row in zip(ids, t.node_distances, strict=True):
        lines.append(f"{node_id:>{width}}: " + " ".join(f"{v:>{width}}" for v in row))
    return lines


def loop_text(r: LoopReport) -> str:
    """One line of a process's loop breakdown: the thread, the line, the verdict. The name
    is escaped (it is the process's own)."""
    verdict = f" [{r.verdict}]" if r.verdict else ""
    return f"loop of {r.pid} ({term_safe(r.name[:20])}) thread {r.window.tid}: {r.line}{verdict}"


def snapshot_text(snap: Snapshot, nvml_status: str | None = None, threads: bool = True) -> str:
    out = [topology_text(snap.topology), ""]
    loops = loop_reports(snap)
    if nvml_status:
        out.append(term_safe(nvml_status))
    for g in snap.gpus:
        s = g.sample
        name, bus_id = term_safe(s.name or ""), term_safe(s.pci_bus_id or "")
        if s.lost:
            out.append(f"GPU {s.index} {name} {bus_id}: LOST (NVML GPU_IS_LOST)")
            continue
        link = s.pcie_link
        out.append(
            f"GPU {s.index} {name or '?'} {bus_id or '?'}: util {_fmt(s.util_percent, 'd')}%, "
            f"mem {_fmt(s.mem_util_percent, 'd')}%, PCIe rx {_bytes_per_s(g.pcie_rx_bytes_per_s)} "
            f"tx {_bytes_per_s(g.pcie_tx_bytes_per_s)}, link gen {_fmt(link.gen, 'd')}/{_fmt(link.max_gen, 'd')} "
            f"x{_fmt(link.width, 'd')}/{_fmt(link.max_width, 'd')}, "
            f"NUMA {_fmt(g.numa_node, 'd', 'unknown')}, pids {' '.join(str(p.pid) for p in s.processes) or '-'}"
        )
    cur = snap.current
    out.append(
        f"sampled {cur.thread_count} threads of {len(cur.processes)} processes over "
        f"{snap.interval_s:.2f} s (each sample took {snap.previous.duration_s * 1000:.1f} / "
        f"{cur.duration_s * 1000:.1f} ms)"
    )
    out.append(
        f"{'PID':>8} {'USER':<10} {'CPU%':>7} {'WAIT':>6} {'VCS/s':>7} {'ICS/s':>7} {'MIG/s':>7}  "
        f"{'RAN ON':<14} {'NODES':<6} {'MASK':<14} COMMAND"
    )
    for p in snap.processes:
        ps = p.sample
        main = ps.main_thread
        out.append(
            f"{ps.pid:>8} {term_safe(ps.user or '?')[:10]:<10} {fmt.cpu_percent(p.cpu_percent):>7} "
            f"{fmt.ratio_percent(p.wait_ratio):>6} "
            f"{fmt.per_s(p.voluntary_switches_per_s):>7} {fmt.per_s(p.involuntary_switches_per_s):>7} "
            f"{fmt.per_s(p.migrations_per_s):>7}  {format_cpulist(p.ran_on_cpus) or '-':<14} "
            f"{','.join(map(str, p.ran_on_numa_nodes)) or '-':<6} "
            f"{_cpus(main.allowed_cpus if main else None) or '-':<14} {term_safe((ps.cmdline or ps.name)[:60])}"
        )
        if ps.pid in loops:
            out.append(f"{'':>3}{loop_text(loops[ps.pid])}")
        if threads:
            for t in p.threads:
                ts = t.sample
                out.append(
                    f"{'':>3}{ts.tid:>8} {term_safe(ts.name[:15]):<15} {term_safe(ts.state)} "
                    f"psr {_fmt(ts.psr, 'd'):>3} "
                    f"cpu {fmt.cpu_percent(t.cpu_percent):>5} wait {fmt.ratio_percent(t.wait_ratio):>4} "
                    f"vcs/s {fmt.per_s(t.voluntary_switches_per_s)} "
                    f"ics/s {fmt.per_s(t.involuntary_switches_per_s)} "
                    f"mig/s {fmt.per_s(t.migrations_per_s)} mask {_cpus(ts.allowed_cpus) or '-'}"
                )
    return "\n".join(out)
