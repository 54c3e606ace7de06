"""Which processes are the ranks of a multi-rank job, and which GPU each uses: the
half of ``affmon audit`` that reads a sample, before anything is compared with a plan.
Pure: the environments are read by the caller (``/proc/PID/environ``, where readable)
and handed in, parsed by ``parse_environ``.

A *rank* is a watched process that NVML lists on a GPU or whose environment holds
LOCAL_RANK (torchrun, accelerate and deepspeed set it for every rank), and that
descends from no other such process: a DataLoader worker inherits its rank's
environment (and may open a CUDA context of its own), and belongs to that rank.

A rank's GPU: the one NVML lists it on; where NVML lists it on several (a stray context
on GPU 0 is common), the one its environment names (CUDA_VISIBLE_DEVICES[LOCAL_RANK],
or LOCAL_RANK when that is unset, as ``affmon exec --from-env`` reads it), else the one
where it holds the most memory. Without NVML's list (no GPU, no driver, a recording
made without NVML), the environment alone; an index counts NVIDIA GPUs in PCI bus
order, as NVML does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from affmon.core.model.cpuset import CpuSet
from affmon.core.model.domains import union
from affmon.core.model.samples import ProcessSample, Sample
from affmon.core.model.topology import Topology, normalize_bus_id
from affmon.core.model.tree import ancestors, descendants
from affmon.core.text import term_safe

# A value longer than this in an environment is no GPU index or UUID (a MIG UUID has 40
# characters); it is cut so that one process cannot fill the report.
MAX_ENTRY_CHARS = 64
MAX_ENTRIES = 1024
# The most ranks per GPU inferred from what runs (``affmon plan --ranks-per-gpu`` takes
# up to 64 too); ranks beyond it on one GPU are NO_SLOT.
MAX_RANKS_PER_GPU = 64


@dataclass(frozen=True, slots=True)
class RankEnv:
    """What a process's environment says about its rank: LOCAL_RANK, and the
    CUDA_VISIBLE_DEVICES entries (None: unset; empty: no GPU visible)."""

    local_rank: int | None
    visible_devices: tuple[str, ...] | None

    @property
    def gpu_entry(self) -> str | None:
        """The GPU this local rank uses, as an NVML index or a UUID (prefix)."""
        if self.local_rank is None:
            return None
        if self.visible_devices is None:
            return str(self.local_rank)
        if self.local_rank < len(self.visible_devices):
            return self.visible_devices[self.local_rank]
        return None


def parse_environ(data: bytes) -> RankEnv:
    """LOCAL_RANK and CUDA_VISIBLE_DEVICES from ``/proc/PID/environ`` (NUL-separated
    ``KEY=value``; the first of a repeated key counts, as ``getenv`` finds it). A
    LOCAL_RANK that is not a small whole number is unknown."""
    found: dict[bytes, bytes] = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key in (b"LOCAL_RANK", b"CUDA_VISIBLE_DEVICES") and key not in found:
            found[key] = value
    raw_rank = found.get(b"LOCAL_RANK", b"").strip()
    local_rank = int(raw_rank) if raw_rank.isascii() and raw_rank.isdigit() and len(raw_rank) <= 5 else None
    visible: tuple[str, ...] | None = None
    if b"CUDA_VISIBLE_DEVICES" in found:
        text = found[b"CUDA_VISIBLE_DEVICES"].decode("utf-8", "replace")
        entries = (e.strip()[:MAX_ENTRY_CHARS] for e in text.split(",")[:MAX_ENTRIES])
        visible = tuple(e for e in entries if e)
    return RankEnv(local_rank, visible)


@dataclass(frozen=True, slots=True)
class RankProcess:
    """One rank as found in a sample: its process, environment, GPU and descendants."""

    process: ProcessSample
    env: RankEnv | None
    gpu_index: int | None
    bus_id: str | None
    matched_by: str
    notes: tuple[str, ...]
    descendants: tuple[ProcessSample, ...]

    @property
    def mask(self) -> CpuSet | None:
        main = self.process.main_thread
        return None if main is None else main.allowed_cpus

    @property
    def footprint(self) -> CpuSet:
        tasks = [t for p in (self.process, *self.descendants) for t in p.threads]
        return union(t.allowed_cpus for t in tasks if t.allowed_cpus is not None)


def find_ranks(sample: Sample, envs: Mapping[tuple[int, int], RankEnv], within: Sequence[int] = ()) -> list[int]:
    """PIDs of the ranks in ``sample`` (see the module's docstring), in the trees of
    ``within`` when given."""
    parents = {p.pid: p.ppid for p in sample.processes}

    def is_candidate(p: ProcessSample) -> bool:
        env = envs.get(p.key)
        return p.watched and not p.kernel and (bool(p.gpu_indices) or (env is not None and env.local_rank is not None))

    candidates = {p.pid for p in sample.processes if is_candidate(p)}
    wanted = set(within)
    ranks = []
    for pid in sorted(candidates):
        chain = list(ancestors(pid, parents))  # the sampled ones, nearest first
        if candidates.intersection(chain):
            continue
        if wanted and not wanted.intersection([pid, *chain]):
            continue
        ranks.append(pid)
    return ranks


def _descendants(pid: int, sample: Sample) -> tuple[ProcessSample, ...]:
    """The processes below ``pid`` in ``sample``, by PID."""
    by_pid = {p.pid: p for p in sample.processes}
    below = descendants([pid], {p.pid: p.ppid for p in sample.processes}) - {pid}
    return tuple(by_pid[d] for d in sorted(below))


class GpuNames:
    """NVML indexes and UUIDs to bus ids: from the sample's GPUs, else NVIDIA GPUs of the
    topology in bus order (NVML's order)."""

    def __init__(self, sample: Sample, topology: Topology) -> None:
        self.by_index = {g.index: normalize_bus_id(g.pci_bus_id) for g in sample.gpus if g.pci_bus_id}
        if not self.by_index:
            nvidia = [g.pci_bus_id for g in topology.gpus if g.vendor == "nvidia"]
            self.by_index = dict(enumerate(nvidia or [g.pci_bus_id for g in topology.gpus]))
        self.by_uuid = [(g.uuid, g.index) for g in sample.gpus if g.uuid]
        self.memory = {(g.index, p.pid): p.used_memory_bytes or 0 for g in sample.gpus for p in g.processes}

    def resolve(self, entry: str) -> int | None:
        if entry.isascii() and entry.isdigit() and len(entry) <= 5:
            return int(entry)
        return next((index for uuid, index in self.by_uuid if uuid.startswith(entry)), None)


def _match_gpu(p: ProcessSample, env: RankEnv | None, gpus: GpuNames) -> tuple[int | None, str, list[str]]:
    """(NVML index, how it was found, notes) for one rank."""
    entry = env.gpu_entry if env is not None else None
    named = gpus.resolve(entry) if entry is not None else None
    notes = []
    if entry is None and env is not None and env.local_rank is not None:
        notes.append(
            f"LOCAL_RANK {env.local_rank} but CUDA_VISIBLE_DEVICES lists {len(env.visible_devices or ())} GPUs."
        )
    elif entry is not None and named is None:
        notes.append(f"Its environment names GPU {term_safe(entry)}, which is not among this machine's GPUs.")
    on = p.gpu_indices
    if len(on) == 1:
        if named is not None and named != on[0]:
            notes.append(f"Its environment names GPU {named} but NVML lists it on GPU {on[0]}; NVML counts.")
        return on[0], "nvml", notes
    if on:
        if named in on:
            pick, why = named, "the one its environment names"
        else:
            pick = max(on, key=lambda i: (gpus.memory.get((i, p.pid), 0), -i))
            why = "where it holds the most memory"
        notes.append(f"NVML lists it on GPUs {', '.join(map(str, on))}; its own is taken to be GPU {pick}, {why}.")
        return pick, "nvml", notes
    if named is not None:
        return named, "environment", notes
    return None, "none", notes


def rank_processes(
    sample: Sample,
    topology: Topology,
    envs: Mapping[tuple[int, int], RankEnv],
    within: Sequence[int] = (),
) -> list[RankProcess]:
    """The ranks of ``sample`` (in the trees of ``within`` when given), each with its GPU."""
    gpus = GpuNames(sample, topology)
    by_pid = {p.pid: p for p in sample.processes}
    ranks = []
    for pid in find_ranks(sample, envs, within):
        p = by_pid[pid]
        env = envs.get(p.key)
        index, how, notes = _match_gpu(p, env, gpus)
        bus_id = gpus.by_index.get(index) if index is not None else None
        if index is not None and bus_id is None:
            notes.append(f"GPU {index} is not among this machine's GPUs.")
        ranks.append(RankProcess(p, env, index, bus_id, how, tuple(notes), _descendants(pid, sample)))
    return ranks


__all__ = [
    "MAX_ENTRIES",
    "MAX_ENTRY_CHARS",
    "GpuNames",
    "RankEnv",
    "RankProcess",
    "find_ranks",
    "parse_environ",
    "rank_processes",
]
