"""Where a training loop's thread spends its time: five shares of one interval, summing to 1.

Pure: the collector (``affmon.collect.loop``) hands in what it read, this module says what
it means. The five shares of a thread's wall time over an interval:

* ``on_cpu``: running, from ``schedstat`` (exact);
* ``cpu_wait``: runnable but queued for a CPU, from ``schedstat`` (exact);
* ``data_wait``, ``gpu_wait``, ``other``: the rest (blocked) is split in proportion to the
  probes that found the thread blocked, each classified by the system call it sleeps in and
  what the file it waits on is (``classify``). The blocked total is exact; the split is a
  sample (tens of Hz, jittered so it cannot lock onto the loop's period).

One share is inferred, not seen: CUDA's default synchronisation spins in user space, so a
thread waiting for the GPU looks like a running one. When the stack sampler's probes are
missing, the on-CPU time is counted as waiting for the GPU when the GPU was busy at least
``spin_gpu_busy`` of the interval (a GPU that busy is the bottleneck: the loop's CPU work is
hidden behind it). ``LoopBreakdown.spin_inferred`` says how much of ``gpu_wait`` came that way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from affmon.core.errors import ParseError

ON_CPU = "on_cpu"
CPU_WAIT = "cpu_wait"
DATA_WAIT = "data_wait"
GPU_WAIT = "gpu_wait"
OTHER = "other"
SHARES = (ON_CPU, CPU_WAIT, DATA_WAIT, GPU_WAIT, OTHER)
BLOCKED_SHARES = (DATA_WAIT, GPU_WAIT, OTHER)

RUNNING = "running"  # a probe's class: on a CPU or on a run queue (schedstat splits the two)
UNKNOWN = "unknown"  # a probe that could not be read (no ptrace permission, thread gone)

# What an fd a blocked call waits on is (``fd_kind``).
FD_DATA = "data"  # a pipe shared with a worker process (the DataLoader's queues)
FD_GPU = "gpu"  # a /dev/nvidia* device
FD_OTHER = "other"

# System call numbers by machine (``uname -m``), from the kernel's syscall tables.
SYSCALL_NAMES: Mapping[str, Mapping[int, str]] = {
    "x86_64": {
        0: "read",
        2: "open",
        7: "poll",
        16: "ioctl",
        17: "pread64",
        19: "readv",
        23: "select",
        24: "sched_yield",
        35: "nanosleep",
        45: "recvfrom",
        47: "recvmsg",
        202: "futex",
        230: "clock_nanosleep",
        232: "epoll_wait",
        257: "openat",
        288: "accept4",
        270: "pselect6",
        271: "ppoll",
        281: "epoll_pwait",
        299: "recvmmsg",
        441: "epoll_pwait2",
    },
    "aarch64": {
        22: "epoll_pwait",
        29: "ioctl",
        56: "openat",
        63: "read",
        65: "readv",
        67: "pread64",
        72: "pselect6",
        73: "ppoll",
        98: "futex",
        101: "nanosleep",
        115: "clock_nanosleep",
        124: "sched_yield",
        207: "recvfrom",
        212: "recvmsg",
        242: "accept4",
        243: "recvmmsg",
        441: "epoll_pwait2",
    },
}

# Calls whose first argument is the fd they block on.
FD_FIRST = frozenset({"read", "readv", "pread64", "recvfrom", "recvmsg", "recvmmsg", "ioctl"})
# Calls that wait on a set of fds (the collector finds the set: poll's array, select's bitmap,
# an epoll instance's fdinfo).
FD_SET = frozenset({"poll", "ppoll", "select", "pselect6", "epoll_wait", "epoll_pwait", "epoll_pwait2"})


@dataclass(frozen=True, slots=True)
class SyscallState:
    """``/proc/PID/task/TID/syscall``: ``running``, or the call a blocked thread sleeps in.

    ``number`` is -1 for a thread blocked outside any call (a page fault, a D state);
    ``args`` are the six arguments."""

    running: bool
    number: int = -1
    args: tuple[int, ...] = ()

    def name(self, machine: str) -> str:
        return SYSCALL_NAMES.get(machine, {}).get(self.number, f"syscall {self.number}")


# The file as the kernel writes it: the call's number, then six arguments and the stack and
# program counters in lower-case hex, one space apart. Read 20 times a second for every
# probed loop: one match instead of a split and seven checks (the loop probe's thread took
# about 36 us a probe parsing, woken from its sleep); any other shape takes the full parse.
# Compiled at the first probe (``re``'s cache), not when the monitor starts.
_CANONICAL = r"(-?[0-9]{1,6})((?: 0x[0-9a-f]{1,16}){6})?(?: 0x[0-9a-f]{1,16})*\n?"


def parse_syscall(text: str) -> SyscallState:
    """Parse the ``syscall`` file: ``running``, ``-1 SP PC``, or ``NR A1..A6 SP PC`` (hex
    arguments). Anything else raises ``ParseError``."""
    found = re.fullmatch(_CANONICAL, text, re.ASCII)
    if found is not None:
        number = int(found.group(1))
        if number == -1:
            return SyscallState(running=False)
        args = found.group(2)
        if number >= 0 and args:
            return SyscallState(running=False, number=number, args=tuple(int(a, 16) for a in args.split()))
    return _parse_syscall_fields(text)


def _parse_syscall_fields(text: str) -> SyscallState:
    """``parse_syscall`` for any shape: fields split on white space, each checked."""
    parts = text.split()
    if parts == ["running"]:
        return SyscallState(running=True)
    if not parts:
        raise ParseError("empty syscall file")
    try:
        number = int(parts[0], 10) if parts[0].lstrip("-").isdigit() and parts[0].isascii() else None
        if number is None or number < -1 or len(parts[0]) > 6:
            raise ValueError(parts[0])
        if number == -1:
            return SyscallState(running=False)
        if len(parts) < 7:
            raise ValueError("too few fields")
        args = tuple(_hex(a) for a in parts[1:7])
    except ValueError:
        raise ParseError(f"bad syscall line {text.strip()[:60]!r}") from None
    return SyscallState(running=False, number=number, args=args)


def _hex(text: str) -> int:
    if not (text.startswith("0x") and 2 < len(text) <= 18 and all(c in "0123456789abcdef" for c in text[2:])):
        raise ValueError(text)
    return int(text, 16)


def fd_kind(link: str | None, worker_links: frozenset[str]) -> str:
    """What an fd is, from its ``/proc/PID/fd/N`` link: ``data`` when a worker process holds
    the same pipe (``worker_links``: the pipe links of the children's fds), ``gpu`` for an
    NVIDIA device, else ``other``."""
    if link is None:
        return FD_OTHER
    if link in worker_links:
        return FD_DATA
    if link.startswith("/dev/nvidia"):
        return FD_GPU
    return FD_OTHER


@dataclass(frozen=True, slots=True)
class Probe:
    """What one look at the loop thread found.

    ``call`` is the system call's name (None: running or runnable; ``unknown``: not
    readable); ``fd_kinds`` what the fds it waits on are; ``feeder_busy`` whether a thread
    of the same process that feeds the loop from the workers (a pin-memory thread) was then
    waiting on a worker's pipe or running."""

    call: str | None
    fd_kinds: tuple[str, ...] = ()
    feeder_busy: bool = False


def classify(probe: Probe) -> str:
    """One probe's class: ``running``, ``unknown``, or a blocked share.

    Blocked on a worker's pipe: data. On an NVIDIA fd, or yielding the CPU
    (CUDA's yield mode): GPU. A futex while a feeder thread waits on or handles a batch:
    data (the loop waits for the queue the feeder fills). Anything else (files, sleeps,
    other locks, sockets of a collective): other."""
    if probe.call is None:
        return RUNNING
    if probe.call == UNKNOWN:
        return UNKNOWN
    if FD_DATA in probe.fd_kinds:
        return DATA_WAIT
    if FD_GPU in probe.fd_kinds or probe.call == "sched_yield":
        return GPU_WAIT
    if probe.call == "futex" and probe.feeder_busy:
        return DATA_WAIT
    return OTHER


@dataclass(frozen=True, slots=True)
class TaskWait:
    """Where one sleeping thread of a worker sleeps: its ``stat`` state (``S``, ``D``), the
    kernel function it waits in (``wchan``; None where unreadable) and the system call
    (None where unreadable, ``-`` outside one)."""

    pid: int
    tid: int
    state: str
    wchan: str | None
    syscall: str | None


@dataclass(frozen=True, slots=True)
class WorkerStats:
    """The loop's worker processes (the rank's children) over the same interval.

    ``run_ns``/``wait_ns``: their threads' schedstat deltas summed. ``domain_cpus``: CPUs the
    rank and its workers may run on; ``free_cpus``: idle capacity of those CPUs over the
    interval (from ``/proc/stat``), in CPUs; None when unknown. ``waits``: where each of
    their threads slept at the interval's end, read only when the workers together ran
    less than ``STALL_CPUS`` of a CPU while the loop was found waiting for data (a stalled
    pipeline; otherwise empty)."""

    count: int
    run_ns: int
    wait_ns: int
    domain_cpus: int
    free_cpus: float | None
    waits: tuple[TaskWait, ...] = ()

    def cpus_used(self, seconds: float) -> float:
        return self.run_ns / (seconds * 1e9) if seconds > 0 else 0.0

    @property
    def wait_ratio(self) -> float | None:
        total = self.run_ns + self.wait_ns
        return self.wait_ns / total if total > 0 else None


@dataclass(frozen=True, slots=True)
class LoopWindow:
    """What the collector saw of one loop thread between two marks.

    ``run_ns``/``wait_ns`` are schedstat deltas (None: schedstat unreadable). ``probes``
    counts each class (``classify``) of the probes taken in the window. ``spin_probes``: on-CPU
    probes a stack sampler placed in a GPU synchronisation, out of ``stack_probes`` on-CPU
    probes it read (both None without a stack sampler). ``rate_hz``: the probing rate asked
    for (the probes taken say what was achieved)."""

    pid: int
    tid: int
    seconds: float
    run_ns: int | None
    wait_ns: int | None
    probes: Mapping[str, int] = field(default_factory=dict)
    syscall_readable: bool = True
    workers: WorkerStats | None = None
    spin_probes: int | None = None
    stack_probes: int | None = None
    rate_hz: float | None = None
    # Of the probes that found the thread running, those whose Python stack could be read
    # (``frame_probes``) and of those, the ones inside a data loader's frames
    # (``data_probes``: torch.utils.data, ...): None where no stack was read; then
    # ``frames_unavailable`` says why (not CPython, a version affmon does not read, no
    # permission).
    frame_probes: int | None = None
    data_probes: int | None = None
    frames_unavailable: str | None = None
    # Where the running probes found the loop (``pyframes.frame_label``: the user's own
    # frame, and the library's it was in), the most found first, with their counts.
    top_frames: tuple[tuple[str, int], ...] = ()
    # Why the syscall file was refused, said for who asked (``collect.permission``); None
    # where it was read, or the collector did not say.
    refused_why: str | None = None

    @property
    def probes_taken(self) -> int:
        return sum(self.probes.values())


def _sum(values: list[int | None]) -> int | None:
    return None if any(v is None for v in values) else sum(v or 0 for v in values)


def merge_windows(windows: list[LoopWindow]) -> LoopWindow:
    """Consecutive windows of one thread as one (``diagnose`` over its whole run): times and
    probe counts add up; a counter unknown in any window is unknown in the sum, and the
    syscall file counts as readable only when it was in every window. The workers' idle
    capacity is the mean over the windows, weighted by their length."""
    if not windows:
        raise ValueError("no windows to merge")
    first = windows[0]
    probes: dict[str, int] = {}
    for w in windows:
        for name, count in w.probes.items():
            probes[name] = probes.get(name, 0) + count
    seen = [w.workers for w in windows if w.workers is not None]
    workers = None
    if seen:
        free = [(w.seconds, w.workers.free_cpus) for w in windows if w.workers is not None]
        known = [(s, f) for s, f in free if f is not None]
        span = sum(s for s, _ in known)
        workers = WorkerStats(
            max(w.count for w in seen),
            sum(w.run_ns for w in seen),
            sum(w.wait_ns for w in seen),
            max(w.domain_cpus for w in seen),
            sum(s * f for s, f in known) / span if known and len(known) == len(free) and span > 0 else None,
            next((w.waits for w in reversed(seen) if w.waits), ()),  # the newest places read
        )
    return LoopWindow(
        pid=first.pid,
        tid=first.tid,
        seconds=sum(w.seconds for w in windows),
        run_ns=_sum([w.run_ns for w in windows]),
        wait_ns=_sum([w.wait_ns for w in windows]),
        probes=probes,
        syscall_readable=all(w.syscall_readable for w in windows),
        workers=workers,
        spin_probes=_sum([w.spin_probes for w in windows]),
        stack_probes=_sum([w.stack_probes for w in windows]),
        rate_hz=first.rate_hz,
        frame_probes=_sum_known([w.frame_probes for w in windows]),
        data_probes=_sum_known([w.data_probes for w in windows]),
        frames_unavailable=windows[-1].frames_unavailable,
        top_frames=_merged_frames(windows),
        refused_why=windows[-1].refused_why,
    )


def _merged_frames(windows: list[LoopWindow]) -> tuple[tuple[str, int], ...]:
    counts: dict[str, int] = {}
    for w in windows:
        for label, n in w.top_frames:
            counts[label] = counts.get(label, 0) + n
    return tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_FRAMES])


def _sum_known(values: list[int | None]) -> int | None:
    """The stack probes of several windows: a window without them adds none."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


@dataclass(frozen=True, slots=True)
class LoopBreakdown:
    """The five shares of a loop thread's interval (summing to 1) and how they were had.

    ``blocked_split``: False when the blocked time could not be split (no probe of it was
    readable): it is then all in ``other`` and ``unavailable`` says why. ``spin_inferred``:
    the part of ``gpu_wait`` moved from on-CPU time by the GPU-busy rule (0 when a stack
    sampler measured it, or when the rule did not apply)."""

    pid: int
    tid: int
    seconds: float
    shares: Mapping[str, float]
    gpu_busy: float | None
    blocked_split: bool
    spin_inferred: float
    blocked_probes: int
    unavailable: str | None = None
    # The part of ``on_cpu`` spent in a data loader's frames (the loop loading its own
    # data), as a share of the interval: None where no Python stack was read.
    loading: float | None = None

    def share(self, name: str) -> float:
        return self.shares[name]

    @property
    def largest(self) -> str:
        return max(SHARES, key=lambda s: self.shares[s])

    @property
    def input_share(self) -> float:
        """Waiting for data plus loading it on the loop's own thread."""
        return self.shares[DATA_WAIT] + (self.loading or 0.0)

    @property
    def step_share(self) -> float:
        """On the CPU outside a data loader's frames: the step's own Python and launches."""
        return self.shares[ON_CPU] - (self.loading or 0.0)

    def to_json(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "tid": self.tid,
            "seconds": round(self.seconds, 3),
            **{name: round(self.shares[name], 3) for name in SHARES},
            "gpu_busy": None if self.gpu_busy is None else round(self.gpu_busy, 3),
            "spin_inferred": round(self.spin_inferred, 3),
            "loading": None if self.loading is None else round(self.loading, 3),
            "blocked_split": self.blocked_split,
            "blocked_probes": self.blocked_probes,
            "unavailable": self.unavailable,
        }


SPIN_GPU_BUSY = 0.9
TOP_FRAMES = 5  # places a window keeps, the most found first
# Workers that together ran less than this many CPUs over an interval may all be asleep:
# the collector then reads where each of their threads sleeps (``WorkerStats.waits``).
STALL_CPUS = 0.05


def breakdown(window: LoopWindow, gpu_busy: float | None, spin_gpu_busy: float = SPIN_GPU_BUSY) -> LoopBreakdown | None:
    """The window's five shares, beside ``gpu_busy`` (the GPU's busy share of the same
    interval, 0..1, None when unknown). None when schedstat was unreadable or the window is
    empty: then nothing here is exact."""
    if window.run_ns is None or window.wait_ns is None or window.seconds <= 0:
        return None
    wall_ns = window.seconds * 1e9
    run = max(0.0, float(window.run_ns))
    wait = max(0.0, float(window.wait_ns))
    # The two marks are a few microseconds apart from the schedstat reads: clamp, never scale up.
    total = max(wall_ns, run + wait)
    on_cpu, cpu_wait = run / total, wait / total
    blocked = max(0.0, 1.0 - on_cpu - cpu_wait)
    counts = {name: int(window.probes.get(name, 0)) for name in BLOCKED_SHARES}
    seen = sum(counts.values())
    shares = {ON_CPU: on_cpu, CPU_WAIT: cpu_wait, DATA_WAIT: 0.0, GPU_WAIT: 0.0, OTHER: 0.0}
    unavailable = None
    if seen:
        for name in BLOCKED_SHARES:
            shares[name] = blocked * counts[name] / seen
    else:
        shares[OTHER] = blocked
        if not window.syscall_readable:
            why = window.refused_why or "needs ptrace permission: the same user, or root"
            unavailable = f"the thread's syscall file is not readable ({why})"
        elif blocked >= 0.05:
            unavailable = "no probe found the thread blocked"
    spin = 0.0
    if window.spin_probes is not None and window.stack_probes:
        moved = on_cpu * min(1.0, window.spin_probes / window.stack_probes)
        shares[ON_CPU] -= moved
        shares[GPU_WAIT] += moved
    elif gpu_busy is not None and gpu_busy >= spin_gpu_busy:
        spin = shares[ON_CPU]
        shares[GPU_WAIT] += spin
        shares[ON_CPU] = 0.0
    loading = None
    if window.frame_probes and window.data_probes is not None:
        loading = shares[ON_CPU] * min(1.0, window.data_probes / window.frame_probes)
    return LoopBreakdown(
        pid=window.pid,
        tid=window.tid,
        seconds=window.seconds,
        shares=shares,
        gpu_busy=gpu_busy,
        blocked_split=bool(seen),
        spin_inferred=spin,
        blocked_probes=seen,
        unavailable=unavailable,
        loading=loading,
    )


_WORDS = {DATA_WAIT: "data", GPU_WAIT: "GPU", ON_CPU: "CPU", CPU_WAIT: "waiting for a CPU", OTHER: "other"}


def describe(b: LoopBreakdown, floor: float = 0.01) -> str:
    """One line, largest share first: ``GPU busy 34%; loop: data 61%, GPU 22%, CPU 12%,
    waiting for a CPU 3%``. Shares under ``floor`` are left out."""
    gpu = "GPU busy -" if b.gpu_busy is None else f"GPU busy {b.gpu_busy:.0%}"
    parts = [
        f"{_WORDS[n]} {b.shares[n]:.0%}" + (_loading(b) if n == ON_CPU else "")
        for n in sorted(SHARES, key=lambda n: -b.shares[n])
        if b.shares[n] >= floor
    ]
    return f"{gpu}; loop: {', '.join(parts) or 'idle'}"


def _loading(b: LoopBreakdown) -> str:
    return f" (loading data {b.loading:.0%})" if b.loading is not None and b.loading >= 0.01 else ""
