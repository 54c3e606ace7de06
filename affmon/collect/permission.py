"""Why another process's ptrace-gated files (``syscall``, ``mem``, fd links) could not be
read, said for who is asking: to a user, that it needs the same user or root; to root,
what actually stopped it, since "or root" is no advice to root."""

from __future__ import annotations

import os

CAP_SYS_PTRACE = 19
USER_ADVICE = "needs ptrace permission: the same user, or root"


def _yama_scope(root: str = "/") -> str | None:
    try:
        with open(os.path.join(root, "proc/sys/kernel/yama/ptrace_scope"), encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return None


def _has_cap_sys_ptrace() -> bool | None:
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> CAP_SYS_PTRACE & 1)
    except (OSError, ValueError, IndexError):
        return None
    return None


def why_not_readable(euid: int | None = None) -> str:
    """One clause: why a ptrace-gated file of another process was refused."""
    if (os.geteuid() if euid is None else euid) != 0:
        scope = _yama_scope()
        if scope in ("1", "2"):
            return f"{USER_ADVICE} (Yama's ptrace_scope is {scope}: only root, or the process's parent, may read it)"
        return USER_ADVICE
    if _yama_scope() == "3":
        return "refused even to root: Yama's ptrace_scope is 3 (no process may read another's)"
    if _has_cap_sys_ptrace() is False:
        return "refused even to root: this affmon runs without CAP_SYS_PTRACE (a container drops it)"
    return "refused even to root: the process is not dumpable, or a security module (SELinux, AppArmor) refused it"
