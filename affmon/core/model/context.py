"""What placed a process: the scheduler (Slurm, Kubernetes) and the launcher (torchrun).

Pure: the caller reads ``/proc/PID/environ`` (where permitted: the same user, or root),
``/proc/PID/cgroup`` and the launcher's command line, and hands the bytes and text in.

* Slurm: ``SLURM_JOB_ID``, ``SLURM_STEP_ID``, ``SLURM_LOCALID``, ``SLURM_PROCID`` from the
  environment; without it (another user's process), the job and step from the cgroup path
  slurmstepd makes (v2: ``.../slurmstepd.scope/job_123/step_0/user/task_1``; v1:
  ``/slurm/uid_1000/job_123/step_0/task_1``).
* Kubernetes: the pod's UID and QoS class from the cgroup path the kubelet makes
  (systemd driver: ``kubepods-burstable-pod<uid>.slice``, ``-`` for ``_`` in the UID;
  cgroupfs driver: ``/kubepods/burstable/pod<uid>/<container>``; a Guaranteed pod sits
  directly under ``kubepods``), and, where the kubelet's CPU manager state is readable,
  the container's exclusive CPUs (the static policy's assignment).
* torchrun: ``LOCAL_RANK``, ``RANK``, ``WORLD_SIZE`` from the environment, and the
  ``--numa-binding`` mode from the command line of the torchrun process above it.

Every value is bounded, whether it comes from the environment, the cgroup path or a
recording, and one out of bounds is unknown (None): text at most ``MAX_VALUE_CHARS``
(kept as text; the presentation edges escape it), Slurm's job and step ids as Slurm
writes them (``slurm_job_id``, ``slurm_step``), numbers ASCII digits of at most six
(``small_int``). Any user with a delegated cgroup can name it ``slurm/job_`` and 200
digits, so the path is no more trusted than the environment. The exporter uses only the
few low-cardinality fields (scheduler, job.step, pod UID, local rank) as labels, each at
most ``MAX_VALUE_CHARS``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from affmon.core.errors import ParseError
from affmon.core.model.cpuset import CpuSet, parse_cpulist

MAX_VALUE_CHARS = 64
# Slurm's job and step ids are 32-bit numbers (10 digits at most); a step may also be
# named (batch, extern, interactive). 20 characters each hold a 64-bit number and keep
# the exporter's "job.step" label within MAX_VALUE_CHARS.
MAX_SLURM_ID_CHARS = 20
# LOCAL_RANK, RANK, WORLD_SIZE, SLURM_LOCALID, SLURM_PROCID: six digits is far above any
# job (a million ranks), and int() of 5,000 digits raises instead of giving a number.
MAX_SMALL_INT = 999_999
# The kubelet's cpu_manager_state is an object three levels deep (entries, pod UID,
# container name), about 100 bytes a container: 1 MiB holds thousands of pods.
MAX_STATE_CHARS = 1 << 20
ENV_KEYS = (
    b"SLURM_JOB_ID",
    b"SLURM_STEP_ID",
    b"SLURM_LOCALID",
    b"SLURM_PROCID",
    b"LOCAL_RANK",
    b"RANK",
    b"WORLD_SIZE",
    b"TORCHELASTIC_RUN_ID",
)
NUMA_BINDING_MODES = ("node", "socket", "exclusive", "core-complex")

# [0-9], not \d: \d also matches the digits of other scripts, which Slurm never writes.
_SLURM_PATH = re.compile(r"/job_([0-9]+)(?:/step_([A-Za-z0-9_.]+))?")
_SLURM_JOB_ID = re.compile(rf"[0-9]{{1,{MAX_SLURM_ID_CHARS}}}")
_SLURM_STEP = re.compile(rf"[A-Za-z0-9_.]{{1,{MAX_SLURM_ID_CHARS}}}")
_POD_SYSTEMD = re.compile(r"kubepods(?:-(burstable|besteffort))?-pod([0-9a-f_]{32,36})\.slice")
_POD_CGROUPFS = re.compile(r"/kubepods(?:/(burstable|besteffort))?/pod([0-9a-f-]{32,36})(?:/([0-9a-f]{12,64}))?")
_CONTAINER_SYSTEMD = re.compile(r"(?:cri-containerd|crio|docker)-([0-9a-f]{12,64})\.scope")


@dataclass(frozen=True, slots=True)
class Context:
    """What placed one process; every field None where unknown."""

    scheduler: str | None = None  # "slurm", "kubernetes" or None
    slurm_job_id: str | None = None
    slurm_step: str | None = None
    slurm_local_id: int | None = None
    slurm_proc_id: int | None = None
    pod_uid: str | None = None
    qos: str | None = None  # guaranteed, burstable, besteffort
    container_id: str | None = None
    exclusive_cpus: CpuSet | None = None  # the kubelet CPU manager's assignment
    local_rank: int | None = None
    rank: int | None = None
    world_size: int | None = None
    numa_binding: str | None = None  # torchrun --numa-binding in force
    from_environ: bool = False  # the environment was readable

    @property
    def empty(self) -> bool:
        return self == Context()

    def summary(self) -> str:
        """A short phrase for a row: "slurm 123.0 rank 1", "k8s pod 1f2e… rank 0"."""
        parts = []
        if self.scheduler == "slurm" and self.slurm_job_id:
            parts.append(f"slurm {self.slurm_job_id}" + (f".{self.slurm_step}" if self.slurm_step else ""))
        elif self.scheduler == "kubernetes" and self.pod_uid:
            parts.append(f"k8s pod {self.pod_uid[:8]}")
        rank = self.local_rank if self.local_rank is not None else self.slurm_local_id
        if rank is not None:
            parts.append(f"rank {rank}")
        if self.numa_binding:
            parts.append(f"torchrun --numa-binding {self.numa_binding}")
        return " ".join(parts)

    def to_json(self) -> dict[str, object]:
        return {
            "scheduler": self.scheduler,
            "slurm_job_id": self.slurm_job_id,
            "slurm_step": self.slurm_step,
            "slurm_local_id": self.slurm_local_id,
            "slurm_proc_id": self.slurm_proc_id,
            "pod_uid": self.pod_uid,
            "qos": self.qos,
            "container_id": self.container_id,
            "exclusive_cpus": None if self.exclusive_cpus is None else sorted(self.exclusive_cpus),
            "local_rank": self.local_rank,
            "rank": self.rank,
            "world_size": self.world_size,
            "numa_binding": self.numa_binding,
            "from_environ": self.from_environ,
        }


def environ_values(data: bytes) -> dict[str, str]:
    """The keys of ``ENV_KEYS`` found in ``/proc/PID/environ`` bytes (NUL-separated
    ``KEY=value``; the first of a repeated key counts, as ``getenv`` finds it), each
    value cut to ``MAX_VALUE_CHARS``."""
    found: dict[str, str] = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key in ENV_KEYS:
            name = key.decode("ascii")
            found.setdefault(name, value[:MAX_VALUE_CHARS].decode("utf-8", "replace"))
    return found


def small_int(text: str | None) -> int | None:
    """A rank or a count from the environment: ASCII digits, at most six (``LOCAL_RANK=²``
    or ``١`` is no number: ``int`` would raise on the first and read the second as 1)."""
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= len(str(MAX_SMALL_INT)) else None


def bounded_int(value: int | None) -> int | None:
    """A recorded rank or count: the numbers ``small_int`` gives, else unknown."""
    return value if value is not None and 0 <= value <= MAX_SMALL_INT else None


def bounded_text(value: str | None) -> str | None:
    """Text of at most ``MAX_VALUE_CHARS``, else unknown."""
    return value if value is not None and len(value) <= MAX_VALUE_CHARS else None


def slurm_job_id(value: str | None) -> str | None:
    """A Slurm job id as Slurm writes it (ASCII digits, at most ``MAX_SLURM_ID_CHARS``), else
    unknown."""
    return value if value is not None and _SLURM_JOB_ID.fullmatch(value) else None


def slurm_step(value: str | None) -> str | None:
    """A Slurm step id or name (``0``, ``batch``, ``extern``), at most ``MAX_SLURM_ID_CHARS``,
    else unknown."""
    return value if value is not None and _SLURM_STEP.fullmatch(value) else None


def cgroup_path(text: str) -> str | None:
    """The process's cgroup path from ``/proc/PID/cgroup``: the v2 line (``0::/path``),
    else the first v1 line's path."""
    first = None
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        if fields[0] == "0" and fields[1] == "":
            return fields[2]
        if first is None:
            first = fields[2]
    return first


def from_cgroup(path: str | None) -> Context:
    """The scheduler as the cgroup path shows it."""
    if not path:
        return Context()
    slurm = _SLURM_PATH.search(path) if ("slurm" in path) else None
    if slurm:  # a cgroup's name is anyone's with a delegated subtree: bounded as the environment is
        job, step = slurm_job_id(slurm.group(1)), slurm_step(slurm.group(2))
        return Context(scheduler="slurm", slurm_job_id=job, slurm_step=step)
    pod = _POD_SYSTEMD.search(path)
    container = _CONTAINER_SYSTEMD.search(path)
    if pod:
        return Context(
            scheduler="kubernetes",
            pod_uid=pod.group(2).replace("_", "-"),
            qos=pod.group(1) or "guaranteed",
            container_id=container.group(1) if container else None,
        )
    pod = _POD_CGROUPFS.search(path)
    if pod:
        return Context(
            scheduler="kubernetes", pod_uid=pod.group(2), qos=pod.group(1) or "guaranteed", container_id=pod.group(3)
        )
    return Context()


def numa_binding(argv: list[str]) -> str | None:
    """The ``--numa-binding`` (or ``--numa_binding``) mode of a torchrun command line."""
    for i, arg in enumerate(argv):
        for flag in ("--numa-binding", "--numa_binding"):
            if arg == flag and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(flag + "="):
                value = arg[len(flag) + 1 :]
            else:
                continue
            return value if value in NUMA_BINDING_MODES else None
    return None


def cpu_manager_exclusive(state: str, pod_uid: str) -> CpuSet | None:
    """The CPUs the kubelet's static CPU manager gave a pod's containers (their union),
    from ``cpu_manager_state`` JSON (``{"policyName": "static", "entries": {uid: {container:
    cpulist}}}``); None when the pod has no exclusive CPUs or the state is another policy's.
    Malformed state raises ``ParseError``, as does text longer than ``MAX_STATE_CHARS`` or
    nested deeper than ``json.loads`` recurses (a file nested 100,000 deep raises
    ``RecursionError`` there)."""
    if len(state) > MAX_STATE_CHARS:
        raise ParseError(f"cpu_manager_state is {len(state):,} characters, more than {MAX_STATE_CHARS:,}")
    try:
        data = json.loads(state)
    except RecursionError:
        raise ParseError("cpu_manager_state is nested too deep to be a CPU manager's state") from None
    except ValueError as exc:
        raise ParseError(f"cpu_manager_state is not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("policyName") != "static":
        return None
    entries = data.get("entries") or {}
    if not isinstance(entries, dict):
        raise ParseError("cpu_manager_state: entries is not an object")
    containers = entries.get(pod_uid)
    if not isinstance(containers, dict) or not containers:
        return None
    cpus: set[int] = set()
    for value in containers.values():
        if not isinstance(value, str):
            raise ParseError("cpu_manager_state: a container's CPUs are not a CPU list")
        cpus |= parse_cpulist(value)
    return frozenset(cpus) or None


def context_of(
    environ: Mapping[str, str] | None,
    cgroup: str | None,
    launcher_argv: list[str] | None = None,
    cpu_manager_state: str | None = None,
) -> Context:
    """One process's context from what could be read of it (None: unreadable)."""
    base = from_cgroup(cgroup)
    env = environ or {}
    job = slurm_job_id(env.get("SLURM_JOB_ID"))
    scheduler = base.scheduler or ("slurm" if job else None)
    exclusive = None
    if base.pod_uid and cpu_manager_state is not None:
        try:
            exclusive = cpu_manager_exclusive(cpu_manager_state, base.pod_uid)
        except ParseError:
            exclusive = None
    return Context(
        scheduler=scheduler,
        slurm_job_id=job or base.slurm_job_id,
        slurm_step=slurm_step(env.get("SLURM_STEP_ID")) or base.slurm_step,
        slurm_local_id=small_int(env.get("SLURM_LOCALID")),
        slurm_proc_id=small_int(env.get("SLURM_PROCID")),
        pod_uid=base.pod_uid,
        qos=base.qos,
        container_id=base.container_id,
        exclusive_cpus=exclusive,
        local_rank=small_int(env.get("LOCAL_RANK")),
        rank=small_int(env.get("RANK")),
        world_size=small_int(env.get("WORLD_SIZE")),
        numa_binding=numa_binding(launcher_argv) if launcher_argv else None,
        from_environ=environ is not None,
    )
