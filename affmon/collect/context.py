"""Read what placed a process (``affmon.core.model.context``): its environment where permitted,
its cgroup path, the torchrun above it, and the kubelet's CPU manager state.

``/proc/PID/environ`` is readable by the process's own user and by root (ptrace read
permission); elsewhere the context comes from the cgroup path alone. The environment
shows what the process started with (a later ``setenv`` does not show), which is what a
scheduler and a launcher set. Contexts are read once per process (PID and start time)
by the sampler; the CPU manager state at most every ``STATE_REFRESH_S``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from affmon.collect.fs import read_text
from affmon.collect.procfs import ProcFs
from affmon.core.model.context import MAX_STATE_CHARS, Context, cgroup_path, context_of, environ_values

CPU_MANAGER_STATE = "/var/lib/kubelet/cpu_manager_state"
STATE_REFRESH_S = 30.0


class ContextReader:
    def __init__(self, proc: ProcFs, clock: Callable[[], float] = time.monotonic) -> None:
        self.proc = proc
        self.clock = clock
        self._state: str | None = None
        self._state_read_at = float("-inf")

    def _cpu_manager_state(self) -> str | None:
        now = self.clock()
        if now - self._state_read_at >= STATE_REFRESH_S:
            text = read_text(self.proc.root, CPU_MANAGER_STATE)
            self._state = text if text is not None and len(text) <= MAX_STATE_CHARS else None
            self._state_read_at = now
        return self._state

    def read(self, pid: int, launcher_argv: list[str] | None = None) -> Context:
        """The context of ``pid``; ``launcher_argv``: the command line of the torchrun
        process above it, if any (the sampler knows the process tree)."""
        raw_env = self.proc.read(pid, "environ")
        environ = None if raw_env is None else environ_values(raw_env)
        raw_cgroup = self.proc.read(pid, "cgroup")
        path = None if raw_cgroup is None else cgroup_path(raw_cgroup.decode("utf-8", "replace"))
        found = context_of(environ, path, launcher_argv, None)
        if found.pod_uid is not None:
            found = context_of(environ, path, launcher_argv, self._cpu_manager_state())
        return found
