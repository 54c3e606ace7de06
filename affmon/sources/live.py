"""The live machine as a source: its topology (or a recorded tree's, or an hwloc XML's),
NVML, a sampler and (when asked for, on the live machine) the training loop probe over
them, opened and closed together; ``--pid`` numbers resolved to processes.

The loop probe (``affmon.collect.loop_probes``) runs a background thread at 20 Hz per
watched loop, so only the front ends that show the breakdown ask for it (``loops=True``)
and take their samples through ``LiveSources.sample``; ``close`` stops and joins it."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from affmon.collect.identity import hidden_processes_notice, resolve_pid
from affmon.collect.loop_probes import LoopProbes
from affmon.collect.procfs import ProcFs
from affmon.collect.sampler import Sampler, Selection
from affmon.core.errors import SourceError
from affmon.core.model.samples import Sample
from affmon.core.model.topology import Topology
from affmon.nvml import NvmlGateway


def load_topology(root: str | None = None, hwloc_xml: str | None = None) -> Topology:
    if hwloc_xml is not None:
        from affmon.collect.hwloc_xml import read_hwloc_xml

        return read_hwloc_xml(hwloc_xml)
    from affmon.collect.sysfs_topology import read_topology

    if root is not None and not os.path.isdir(root):
        raise SourceError(f"--root {root}: not a directory")
    return read_topology(root or "/")


@dataclass
class LiveSources:
    topology: Topology
    sampler: Sampler
    gateway: NvmlGateway | None
    nvml_status: str | None
    host: str
    # One line when /proc hides other users' processes (hidepid): a clean verdict then
    # covers only what affmon could see, and the views say so.
    notice: str | None = None
    loops: LoopProbes | None = None  # the loop probe, for the front ends that show it

    def sample(self) -> Sample:
        """One tick's sample, with the loop windows of the interval it closes."""
        sample = self.sampler.sample()
        if self.loops is None:
            return sample
        self.loops.pids = probed_pids(sample, self.sampler)
        return self.loops.attach(sample)

    def close(self) -> None:
        if self.loops is not None:
            self.loops.close()
            self.loops = None
        if self.gateway is not None:
            self.gateway.close()
            self.gateway = None
        self.sampler.proc.close()


def probed_pids(sample: Sample, sampler: Sampler) -> tuple[int, ...]:
    """The ``--pid`` processes whose loop thread the probe follows: a python one (its
    loop is a Python loop the probe can read), or one with a GPU context. A shell or a
    C program named by ``--pid`` has no loop to break down (the probe would call all of
    its time "other"); the training processes below it are probed as ranks."""
    named = set(sampler.selection.pids)
    return tuple(p.pid for p in sample.processes if p.pid in named and (p.gpu_indices or sampler.is_python(p.pid)))


def resolve_selection(selection: Selection, root: str = "/") -> Selection:
    """``--pid`` numbers as processes: a TID becomes its process (said on stderr, once), a
    kernel thread or a number that names nothing is a one-line ``SourceError``."""
    if not selection.pids:
        return selection
    proc = ProcFs(root)
    pids = []
    for number in selection.pids:
        found = resolve_pid(proc, number)
        if found.note:
            sys.stderr.write(f"affmon: {found.note}\n")
        pids.append(found.pid)
    return replace(selection, pids=tuple(dict.fromkeys(pids)))


def open_live_sources(selection: Selection, root: str = "/", *, loops: bool = False) -> LiveSources:
    """Topology, NVML and the loop probe (``loops``; both only for the live machine) and a
    sampler over them; the caller closes them. A ``--pid`` that does not exist (or names a
    kernel thread) raises, with NVML already closed; one that names a thread watches its
    process."""
    selection = resolve_selection(selection, root)
    topology = load_topology(root)
    gateway = None
    status = None
    if root == "/":  # NVML describes this machine, not a recorded one
        gateway = NvmlGateway()
        gateway.open()
        status = gateway.status
    try:
        sources = LiveSources(
            topology,
            Sampler(root, selection, gpu_source=gateway),
            gateway,
            status,
            os.uname().nodename,  # gethostname(2) on Linux, without importing socket
            hidden_processes_notice(root),
        )
        sources.sampler.check_pids()
        if loops and root == "/":  # like NVML: a recorded tree has no threads to probe
            sources.loops = LoopProbes(selection.pids, root)
    except BaseException:
        if gateway is not None:
            gateway.close()
        raise
    return sources


@contextmanager
def live_sources(selection: Selection, root: str = "/", *, loops: bool = False) -> Iterator[LiveSources]:
    """``open_live_sources`` for a ``with`` block: NVML and the loop probe are closed after."""
    sources = open_live_sources(selection, root, loops=loops)
    try:
        yield sources
    finally:
        sources.close()
