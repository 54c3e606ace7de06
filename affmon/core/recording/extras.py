"""The optional per-process parts of a recording: where its memory is (``memory``) and
what placed it (``context``). Both are absent from recordings made before they were
sampled, and from processes they were not read for; readers refuse malformed ones (a
value of the wrong type) with one ``ParseError``.

A context value out of the bounds ``affmon.core.model.context`` keeps (text over 64
characters, a job id that is not Slurm's, a rank over 999,999, a scheduler this affmon
does not know) is read as unknown (None): one process's context, which a user can steer
with a cgroup name, never makes the whole recording unreadable."""

from __future__ import annotations

from typing import Any

from affmon.core.errors import ParseError
from affmon.core.model.context import NUMA_BINDING_MODES, Context, bounded_int, bounded_text, slurm_job_id, slurm_step
from affmon.core.model.cpuset import MAX_CPU_ID
from affmon.core.model.samples import NodeMemory
from affmon.core.recording.json_values import (
    read_bool,
    read_dict,
    read_int,
    read_list,
    read_opt_int,
    read_opt_str,
)

_SCHEDULERS = ("slurm", "kubernetes")
_QOS = ("guaranteed", "burstable", "besteffort")


def memory_to_json(m: NodeMemory) -> dict[str, Any]:
    return {
        "resident": {str(n): b for n, b in sorted(m.resident_bytes_by_node.items())},
        "anon": {str(n): b for n, b in sorted(m.anon_bytes_by_node.items())},
        "mappings": m.mappings,
        "unsized_pages": m.unsized_pages,
        "truncated": m.truncated,
    }


def _by_node(value: Any, what: str) -> dict[int, int]:
    found = {}
    for key, count in read_dict(value, what).items():
        if not (isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= 5):
            raise ParseError(f"{what}: node id {key!r} is not a number")
        found[int(key)] = read_int(count, what)
        if found[int(key)] < 0:
            raise ParseError(f"{what}: negative bytes on node {key}")
    return found


def memory_from_json(value: Any) -> NodeMemory:
    d = read_dict(value, "memory")
    return NodeMemory(
        resident_bytes_by_node=_by_node(d.get("resident", {}), "memory resident"),
        anon_bytes_by_node=_by_node(d.get("anon", {}), "memory anon"),
        mappings=read_int(d.get("mappings", 0), "memory mappings"),
        unsized_pages=read_int(d.get("unsized_pages", 0), "memory unsized_pages"),
        truncated=read_bool(d.get("truncated", False), "memory truncated"),
    )


def context_to_json(c: Context) -> dict[str, Any]:
    return c.to_json()


def _text(d: dict[str, Any], key: str) -> str | None:
    return bounded_text(read_opt_str(d.get(key), f"context {key}"))


def _one_of(d: dict[str, Any], key: str, allowed: tuple[str, ...]) -> str | None:
    value = read_opt_str(d.get(key), f"context {key}")
    return value if value in allowed else None


def _int(d: dict[str, Any], key: str) -> int | None:
    return bounded_int(read_opt_int(d.get(key), f"context {key}"))


def _exclusive(value: Any) -> frozenset[int] | None:
    if value is None:
        return None
    cpus = frozenset(read_int(c, "context exclusive_cpus") for c in read_list(value, "context exclusive_cpus"))
    return cpus if all(0 <= cpu <= MAX_CPU_ID for cpu in cpus) else None


def context_from_json(value: Any) -> Context:
    d = read_dict(value, "context")
    return Context(
        scheduler=_one_of(d, "scheduler", _SCHEDULERS),
        slurm_job_id=slurm_job_id(read_opt_str(d.get("slurm_job_id"), "context slurm_job_id")),
        slurm_step=slurm_step(read_opt_str(d.get("slurm_step"), "context slurm_step")),
        slurm_local_id=_int(d, "slurm_local_id"),
        slurm_proc_id=_int(d, "slurm_proc_id"),
        pod_uid=_text(d, "pod_uid"),
        qos=_one_of(d, "qos", _QOS),
        container_id=_text(d, "container_id"),
        exclusive_cpus=_exclusive(d.get("exclusive_cpus")),
        local_rank=_int(d, "local_rank"),
        rank=_int(d, "rank"),
        world_size=_int(d, "world_size"),
        numa_binding=_one_of(d, "numa_binding", NUMA_BINDING_MODES),
        from_environ=read_bool(d.get("from_environ", False), "context from_environ"),
    )
