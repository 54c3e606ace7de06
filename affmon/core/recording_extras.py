"""The optional per-process parts of a recording: where its memory is (``memory``) and
what placed it (``context``). Both are absent from recordings made before they were
sampled, and from processes they were not read for; readers refuse malformed ones with
one ``ParseError``."""

from __future__ import annotations

from typing import Any

from affmon.core.context import MAX_VALUE_CHARS, NUMA_BINDING_MODES, Context
from affmon.core.errors import ParseError
from affmon.core.json_values import read_bool, read_dict, read_int, read_list, read_opt_int, read_opt_str
from affmon.core.samples import NodeMemory

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


def _text(d: dict[str, Any], key: str, allowed: tuple[str, ...] | None = None) -> str | None:
    value = read_opt_str(d.get(key), f"context {key}")
    if value is not None and (len(value) > MAX_VALUE_CHARS or (allowed is not None and value not in allowed)):
        raise ParseError(f"context {key}: {value[:MAX_VALUE_CHARS]!r} is not a value affmon writes")
    return value


def context_from_json(value: Any) -> Context:
    d = read_dict(value, "context")
    cpus = d.get("exclusive_cpus")
    exclusive = None
    if cpus is not None:
        exclusive = frozenset(read_int(c, "context exclusive_cpus") for c in read_list(cpus, "context exclusive_cpus"))
    return Context(
        scheduler=_text(d, "scheduler", _SCHEDULERS),
        slurm_job_id=_text(d, "slurm_job_id"),
        slurm_step=_text(d, "slurm_step"),
        slurm_local_id=read_opt_int(d.get("slurm_local_id"), "context slurm_local_id"),
        slurm_proc_id=read_opt_int(d.get("slurm_proc_id"), "context slurm_proc_id"),
        pod_uid=_text(d, "pod_uid"),
        qos=_text(d, "qos", _QOS),
        container_id=_text(d, "container_id"),
        exclusive_cpus=exclusive,
        local_rank=read_opt_int(d.get("local_rank"), "context local_rank"),
        rank=read_opt_int(d.get("rank"), "context rank"),
        world_size=read_opt_int(d.get("world_size"), "context world_size"),
        numa_binding=_text(d, "numa_binding", NUMA_BINDING_MODES),
        from_environ=read_bool(d.get("from_environ", False), "context from_environ"),
    )
