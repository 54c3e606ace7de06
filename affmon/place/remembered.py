"""The rank's plan as ``rank()`` leaves it for the DataLoader workers it starts: in a
module-level value, which a forked worker inherits, and in the environment variable
``AFFMON_PLACE``, which a spawned worker inherits (it starts a new interpreter).

The variable is JSON: ``{"pid": 4242, "cpus": "0-7", "workers": 6, "worker_cores":
["2", "3", ...]}``, or ``{"pid": 4242, "left_alone": "why"}`` when ``rank()`` placed
nothing. Being the environment's, it is read as foreign text: at most ``MAX_CHARS``,
every core a subset of ``cpus``, or it is no plan.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from affmon.core.errors import ParseError
from affmon.core.model.cpuset import EMPTY, CpuSet, format_cpulist, parse_cpulist

ENV_VARIABLE = "AFFMON_PLACE"
# The cores of 8,192 CPUs as cpulists are about 50 KB of JSON.
MAX_CHARS = 1 << 17


@dataclass(frozen=True, slots=True)
class Remembered:
    """What a DataLoader worker needs of its rank's plan. ``pid``: the process that
    called ``rank()`` (a worker is another)."""

    pid: int
    left_alone: str | None = None
    cpus: CpuSet = EMPTY
    workers: int | None = None
    worker_cores: tuple[CpuSet, ...] = ()


_current: Remembered | None = None


def remember(state: Remembered) -> None:
    global _current
    _current = state
    os.environ[ENV_VARIABLE] = encode(state)


def recall() -> Remembered | None:
    """This process's plan: the module's value (this process or its forked parent called
    ``rank()``), else ``AFFMON_PLACE`` (a spawned worker), else None. ``ValueError``
    when the variable is not one ``rank()`` writes."""
    if _current is not None:
        return _current
    text = os.environ.get(ENV_VARIABLE)
    return None if text is None else decode(text)


def encode(state: Remembered) -> str:
    if state.left_alone is not None:
        return json.dumps({"pid": state.pid, "left_alone": state.left_alone})
    return json.dumps(
        {
            "pid": state.pid,
            "cpus": format_cpulist(state.cpus),
            "workers": state.workers,
            "worker_cores": [format_cpulist(c) for c in state.worker_cores],
        }
    )


def decode(text: str) -> Remembered:
    if len(text) > MAX_CHARS:
        raise ValueError(f"{ENV_VARIABLE} is {len(text)} characters long, more than rank() writes")
    try:
        data = json.loads(text)
    except ValueError:
        raise ValueError(f"{ENV_VARIABLE} is not JSON") from None
    if not isinstance(data, dict) or not _is_int(data.get("pid")):
        raise ValueError(f"{ENV_VARIABLE} is not what rank() writes")
    pid = data["pid"]
    if "left_alone" in data:
        why = data["left_alone"]
        if not isinstance(why, str):
            raise ValueError(f"{ENV_VARIABLE} is not what rank() writes")
        return Remembered(pid, left_alone=why)
    workers, cpus_text, cores_text = data.get("workers"), data.get("cpus"), data.get("worker_cores")
    if workers is not None and not _is_int(workers):
        raise ValueError(f"{ENV_VARIABLE} names no worker count")
    if not isinstance(cpus_text, str) or not isinstance(cores_text, list):
        raise ValueError(f"{ENV_VARIABLE} is not what rank() writes")
    try:
        cpus = parse_cpulist(cpus_text)
        cores = tuple(parse_cpulist(c) for c in cores_text if isinstance(c, str))
    except ParseError as exc:
        raise ValueError(f"{ENV_VARIABLE}: {exc}") from None
    if not cpus or not cores or len(cores) != len(cores_text) or not all(core and core <= cpus for core in cores):
        raise ValueError(f"{ENV_VARIABLE}: its worker cores are not CPUs of its plan")
    return Remembered(pid, None, cpus, workers, cores)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
