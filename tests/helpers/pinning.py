"""What the tests that re-pin real processes on this machine share: its two CPUs ``A`` and
``B`` (a module that imports this one is skipped on a machine with fewer), each thread's
mask, system calls with a hook, and the process that makes threads on request."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from affmon.actions.threads import OsAffinity
from affmon.core.model.cpuset import CpuSet
from tests.helpers.live import Driven, driven, usable_cpus
from tests.helpers.proc import thread_masks

REPO = Path(__file__).resolve().parent.parent.parent
SPAWNER = Path(__file__).parent.parent / "helpers" / "thread_spawner.py"

if len(usable_cpus()) < 2:
    pytest.skip("these tests need two CPUs (CI has two)", allow_module_level=True)
A, B = usable_cpus()[:2]
BOTH = frozenset({A, B})


def masks(pid: int) -> dict[int, CpuSet]:
    """tid -> the mask the kernel reports, for every thread of ``pid`` that is alive."""
    return thread_masks(pid, skip_exited=True)


def cpus(*ids: int) -> CpuSet:
    return frozenset(ids)


class HookedOps(OsAffinity):
    """The real system calls, with ``hook(n, tid, cpus)`` run before the n-th set. The hook
    may raise (the set fails) or return True (the set is skipped: the thread escapes)."""

    def __init__(self, hook: Callable[[int, int, CpuSet], bool | None]) -> None:
        self.hook = hook
        self.calls: list[tuple[int, CpuSet]] = []

    def set(self, tid: int, cpus: CpuSet) -> None:
        self.calls.append((tid, cpus))
        if not self.hook(len(self.calls), tid, cpus):
            super().set(tid, cpus)


def spawner(*args: str) -> AbstractContextManager[Driven]:
    """``tests/helpers/thread_spawner.py``: a process that makes threads on request (its first line
    names the thread that creates them: ``info["creator"]``)."""
    return driven(SPAWNER, *args)
