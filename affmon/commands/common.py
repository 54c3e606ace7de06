"""Sources shared by the commands: the topology, NVML, and a sampler over them."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from affmon.collect.sampler import Sampler, Selection
from affmon.core.errors import SourceError
from affmon.core.topology import Topology
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

    def close(self) -> None:
        if self.gateway is not None:
            self.gateway.close()
            self.gateway = None


def open_live_sources(selection: Selection, root: str = "/") -> LiveSources:
    """Topology, NVML (only for the live machine) and a sampler over them; the caller
    closes them. A ``--pid`` that does not exist raises, with NVML already closed."""
    topology = load_topology(root)
    gateway = None
    status = None
    if root == "/":  # NVML describes this machine, not a recorded one
        gateway = NvmlGateway()
        gateway.open()
        status = gateway.status
    sources = LiveSources(topology, Sampler(root, selection, gpu_source=gateway), gateway, status, socket.gethostname())
    try:
        sources.sampler.check_pids()
    except BaseException:
        sources.close()
        raise
    return sources


@contextmanager
def live_sources(selection: Selection, root: str = "/") -> Iterator[LiveSources]:
    """``open_live_sources`` for a ``with`` block: NVML is closed after."""
    sources = open_live_sources(selection, root)
    try:
        yield sources
    finally:
        sources.close()
