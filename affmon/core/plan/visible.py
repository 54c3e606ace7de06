"""The GPUs a job uses: ``CUDA_VISIBLE_DEVICES`` read as CUDA reads it, a ``--gpus`` list,
or the GPUs the driver lets the job open, each turned into PCI bus ids of the topology.
Pure: the driver's list of GPUs (``GpuRef``, from NVML) is handed in.

How CUDA reads ``CUDA_VISIBLE_DEVICES`` (CUDA C Programming Guide, "CUDA Environment
Variables"): a comma-separated list of device indexes, ``GPU-`` UUIDs (a unique prefix
is enough) and ``MIG-`` instance ids; the devices listed are renumbered 0, 1, ... in
list order; an entry that names no device ends the list (it and every later entry are
ignored); an empty value hides every GPU. Indexes count devices in ``CUDA_DEVICE_ORDER``,
FASTEST_FIRST by default; with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` they count in PCI bus
order, as NVML indexes do. Without NVML (a recorded tree) indexes here count the
topology's NVIDIA GPUs in PCI bus order, and UUIDs and MIG ids cannot be resolved.

An index is ASCII digits: CUDA reads bytes, and a digit of another script (``١``) names
no device, so the list stops there. One of more than ``MAX_INDEX_DIGITS`` significant
digits is an index past every GPU (``int`` of 5,000 digits raises instead). The variable
is the job's, of any length: messages quote an entry at most ``SHOWN_ENTRY_CHARS`` long
and the whole value at most ``SHOWN_VALUE_CHARS``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from affmon.core.errors import ParseError
from affmon.core.model.topology import Topology, normalize_bus_id
from affmon.core.text import cut, term_safe

_UUID_PREFIX = re.compile(r"GPU-[0-9a-fA-F-]+")
# MIG-<uuid> (driver R470 and later) or MIG-GPU-<parent uuid>/<GPU instance>/<compute instance>
_MIG_NEW = re.compile(r"MIG-[0-9a-fA-F-]+")
_MIG_OLD = re.compile(r"MIG-(GPU-[0-9a-fA-F-]+)/[0-9]+/[0-9]+")
_BUS_ID = re.compile(r"(?:[0-9a-fA-F]{1,8}:)?[0-9a-fA-F]{1,2}:[0-9a-fA-F]{1,2}\.[0-7]")
MAX_INDEX_DIGITS = 6  # a million GPUs: past any machine
SHOWN_ENTRY_CHARS = 80  # a MIG-GPU-<uuid>/<gi>/<ci> id is about 50
SHOWN_VALUE_CHARS = 400  # the UUIDs of eight GPUs, comma-separated, are 327


@dataclass(frozen=True, slots=True)
class GpuRef:
    """A GPU as the driver enumerates it (NVML index, UUID, PCI bus id)."""

    index: int
    uuid: str | None
    pci_bus_id: str | None


@dataclass(frozen=True, slots=True)
class JobGpus:
    """The job's GPUs. ``devices`` are the bus ids CUDA numbers 0, 1, ... (None where an
    entry could not be resolved); ``bus_ids`` the resolved ones, each once, which the
    plan is for (None: every GPU of the topology); ``source`` says where they came from."""

    devices: tuple[str | None, ...]
    bus_ids: tuple[str, ...] | None
    source: str
    warnings: tuple[str, ...] = ()
    unresolved: tuple[str | None, ...] = ()  # per device: why it has no bus id (None: it has one)

    def why_unresolved(self, device: int) -> str:
        """Why CUDA device ``device`` has no bus id, as one sentence."""
        if device < len(self.unresolved) and self.unresolved[device]:
            return str(self.unresolved[device])
        return f"CUDA device {device} has no known PCI bus id"


def job_gpus(topology: Topology, visible: str | None, refs: Sequence[GpuRef] | None) -> JobGpus:
    """The GPUs of a job from its ``CUDA_VISIBLE_DEVICES`` (None: unset) and the GPUs the
    driver opened for it (``refs``; None: no NVML, or a recorded tree)."""
    opened = tuple(r.pci_bus_id for r in refs or () if r.pci_bus_id)
    if visible is None:
        if refs is None or not opened:
            gpus = _pci_order(topology)
            return JobGpus(gpus, None, "every GPU in the topology")
        shown = ", ".join(opened)
        source = f"the {len(opened)} GPU{'s' if len(opened) != 1 else ''} NVML can open ({shown})"
        return JobGpus(opened, _known(topology, opened), source)
    source = f"CUDA_VISIBLE_DEVICES={_shown(visible, SHOWN_VALUE_CHARS)}"
    entries = [e.strip() for e in visible.split(",")]
    if not visible.strip():
        return JobGpus((), (), source, ("CUDA_VISIBLE_DEVICES is empty: the job sees no GPU.",))
    devices: list[str | None] = []
    warnings: list[str] = []
    why: dict[int, str] = {}
    for position, entry in enumerate(entries):
        bus_id, problem, stops = _resolve_entry(entry, topology, refs)
        if problem is None:
            devices.append(bus_id)
            continue
        if stops:
            rest = len(entries) - position - 1
            later = f" and the {rest} after it" if rest else ""
            warnings.append(
                f"CUDA_VISIBLE_DEVICES entry {_shown(entry)!r}{later} ignored: {problem}, so CUDA stops the list there."
            )
            break
        devices.append(None)
        why[len(devices) - 1] = f"CUDA_VISIBLE_DEVICES entry {_shown(entry)!r} is not planned for: {problem}."
        warnings.append(why[len(devices) - 1])
    found = tuple(dict.fromkeys(b for b in devices if b is not None))
    unresolved = tuple(why.get(i) for i in range(len(devices)))
    return JobGpus(tuple(devices), _known(topology, found), source, tuple(warnings), unresolved)


def select_gpus(topology: Topology, text: str, refs: Sequence[GpuRef] | None) -> JobGpus:
    """``--gpus``: indexes (NVML's, else NVIDIA GPUs in PCI bus order) or PCI bus ids
    (``0000:3b:00.0``, NVML's ``00000000:3B:00.0``, lspci's ``3b:00.0``)."""
    devices: list[str] = []
    for entry in (e.strip() for e in text.split(",")):
        index = _index(entry)
        if index is not None:
            bus_id = None if index < 0 else gpu_by_index(index, topology, refs)
            if bus_id is None:
                count = len(refs) if refs is not None else len(_pci_order(topology))
                raise ParseError(f"--gpus: no GPU {_shown(entry)} ({count} GPUs, indexes from 0)")
        elif _BUS_ID.fullmatch(entry):
            bus_id = normalize_bus_id(entry if entry.count(":") == 2 else f"0000:{entry}")
            if topology.gpu(bus_id) is None:
                raise ParseError(f"--gpus: no GPU at PCI address {term_safe(entry)} in the topology")
        else:
            raise ParseError(f"--gpus: {_shown(entry)!r} is neither a GPU index nor a PCI bus id")
        devices.append(bus_id)
    found = tuple(dict.fromkeys(devices))
    return JobGpus(tuple(devices), found, f"--gpus {_shown(text, SHOWN_VALUE_CHARS)}")


def _index(entry: str) -> int | None:
    """A device index: ASCII digits (None: not an index; -1: more than ``MAX_INDEX_DIGITS``
    significant digits, an index past every GPU)."""
    if not (entry.isascii() and entry.isdigit()):
        return None
    return -1 if len(entry.lstrip("0")) > MAX_INDEX_DIGITS else int(entry)


def _shown(text: str, limit: int = SHOWN_ENTRY_CHARS) -> str:
    """Text of the job's, for a message: escaped, at most ``limit`` long."""
    return term_safe(cut(text, limit))


def _pci_order(topology: Topology) -> tuple[str, ...]:
    """The NVIDIA GPUs in PCI bus order (NVML's order), or every GPU where none is NVIDIA's."""
    nvidia = tuple(g.pci_bus_id for g in topology.gpus if g.vendor == "nvidia")
    return nvidia or tuple(g.pci_bus_id for g in topology.gpus)


def _known(topology: Topology, bus_ids: Sequence[str]) -> tuple[str, ...]:
    return tuple(b for b in (normalize_bus_id(b) for b in bus_ids) if topology.gpu(b) is not None)


def gpu_by_index(index: int, topology: Topology, refs: Sequence[GpuRef] | None) -> str | None:
    """GPU ``index``: NVML's index where NVML answers, else NVIDIA GPUs in PCI bus order."""
    if refs is not None:
        ref = next((r for r in refs if r.index == index), None)
        return None if ref is None or not ref.pci_bus_id else normalize_bus_id(ref.pci_bus_id)
    order = _pci_order(topology)
    return order[index] if index < len(order) else None


Resolved = tuple[str | None, str | None, bool]  # (bus id, why not, whether CUDA stops the list there)


def _by_uuid(prefix: str, refs: Sequence[GpuRef]) -> Resolved:
    matches = [r for r in refs if r.uuid and r.uuid.lower().startswith(prefix.lower())]
    if not matches:
        return None, "no GPU has that UUID", True
    if len(matches) > 1:
        return None, f"the prefix matches {len(matches)} GPUs' UUIDs", True
    if not matches[0].pci_bus_id:
        return None, "NVML gives no PCI bus id for that GPU", False
    return normalize_bus_id(matches[0].pci_bus_id), None, False


def _resolve_entry(entry: str, topology: Topology, refs: Sequence[GpuRef] | None) -> Resolved:
    """One entry as a bus id, or why not and whether CUDA rejects it (hiding it and every
    later entry) rather than affmon failing to resolve it."""
    index = _index(entry)
    if index is not None:
        bus_id = None if index < 0 else gpu_by_index(index, topology, refs)
        if bus_id is None:
            return None, "there is no GPU with that index", True
        return bus_id, None, False
    if _UUID_PREFIX.fullmatch(entry):
        if refs is None:
            return (
                None,
                "without NVML (a recorded tree, or no driver) a GPU UUID cannot be matched to a PCI bus id",
                False,
            )
        return _by_uuid(entry, refs)
    old = _MIG_OLD.fullmatch(entry)
    if old:  # the parent GPU's UUID is part of the id
        if refs is None:
            return None, "without NVML a MIG instance's GPU cannot be matched to a PCI bus id", False
        return _by_uuid(old.group(1), refs)
    if _MIG_NEW.fullmatch(entry):
        opened = [r.pci_bus_id for r in refs or () if r.pci_bus_id]
        if len(opened) == 1:  # a MIG instance lives on a GPU the job can open: the only one
            return normalize_bus_id(opened[0]), None, False
        if refs is None:
            return None, "without NVML a MIG instance's GPU cannot be matched to a PCI bus id", False
        return None, f"NVML opens {len(opened)} GPUs here and affmon cannot tell which holds this MIG instance", False
    return None, "it is neither an index, a GPU- UUID nor a MIG- id", True
