"""The per-tick sampler: which processes to watch, and every thread of them.

``Sampler.sample()`` returns one frozen ``Sample``. It keeps small caches between ticks
(command lines, user names, the last ``sched`` counters) keyed by PID/TID *and* start
time, so a reused PID never inherits another process's data.

Cost, cheapest first: every process's ``stat`` is read each tick, but a line that reads as
it did at the last tick (most processes, most ticks) is not parsed again, and a carried
process (below) whose line did not change is handed out as the same ``ProcessSample``
object, which the rates reuse in turn (``Reuse``: every such reuse, and its switch).
``/proc`` is listed again only when the kernel has given out a PID since the last listing
(``ProcFs.listed_pids``). A kernel thread's name
may change without an exec (a kernel worker names the work it is doing): it stays the same
process, and, having no other threads, has no task directory listed. A process whose CPU
time did not move by a clock tick since the last sample has only its threads' masks read
(``sched_getaffinity``, one system call each), and a full read at least every
``QUIET_REREAD_EVERY`` samples. A thread of a process that is not watched (sampled only as
evidence of what else runs on the watched processes' CPUs) has its ``stat`` and mask read,
nothing else: CPU time by the clock tick, where it ran, its mask; its wait, switches and
migrations are unknown. A watched thread: its ``schedstat`` and the mask; ``stat`` only
when it was not asleep at the last tick or has been scheduled since; ``sched`` (switches,
migrations) only when its ``schedstat`` moved (a thread that was not scheduled cannot have
switched), the previous counters carried otherwise, and only when it ran at least
``LIGHT_RUN_NS`` since (a thread that woke for a few microseconds has its switches and
migrations unknown that tick). A watched process's ``status`` (its owner and
``Mems_allowed``) and its cgroup's cpuset are read when it is first watched, when its main
thread's mask changes, and at least every ``QUIET_REREAD_EVERY`` samples.

A watched process's context (``affmon.collect.context``: Slurm, Kubernetes, torchrun) is
read once; the pages per NUMA node (``numa_maps``) of a watched training process, and of a
process named by ``--pid``, every few seconds, the period stretched by what the last read
cost times the number of such processes (it walks the page tables, and parsing its lines
in Python costs more than the walk for a small process): all the walks together stay
within the share of the time ``numa_maps.reread_period_s`` gives one. On a machine whose
memory is all on one node there is nothing to walk for: its ``statm`` says the same
(``numa_maps.read_one_node``).

A process that is not watched and not training, whose whole CPU time (``/proc/PID/stat``,
read for every process anyway) grew by less than ``CARRY_BELOW_PERCENT`` of one CPU since
its last sample, cannot hold a thread any rule counts (a contender, an occupant to move):
its threads are not read at all. They are carried from the last read with
``ProcessSample.threads_read`` False, so no per-thread rate spans the interval (and the
process's own CPU share comes from its ``cpu_ns``); they are read again as soon as the
process uses more, and at least every ``CARRY_REREAD_EVERY`` samples (the first time after a
share of that set by the PID, so that processes seen together are read again apart: with
10,000 threads of ten processes read again on one tick, the monitor's memory rose by 2.2 MiB
at that tick, and kept it).

Which processes are training: those NVML lists on a GPU, the known launchers, and python
processes that have a GPU or deep-learning runtime mapped (``/proc/PID/maps`` names
libtorch, libcuda, libcudart, libnccl, TensorFlow or XLA; libtorch with no GPU is a
CPU-only training job), checked when first seen and again, until found, at most every
``RUNTIME_RECHECK_S`` and only when the process's address space has changed size since
(``vsize`` in ``stat``, read anyway: loading a library grows it). A python process's
``maps`` has two lines a thread (its stack and guard page): 3,048 lines, 151 kB, for one of
1,000 threads (measured on the 2-core development machine), read in full to find nothing
every ten seconds without that. Where ``maps`` cannot be read (another user's process, without root) a python
process counts as training, as it looks. Which are watched: the training ones, and the
python processes below a launcher or a training process (a rank before it has imported
torch, a worker started with ``spawn``), which are part of the job but not training ranks.
Another python process (a notebook without torch, a preprocessing script, an agent) is
sampled as any other process is, its threads carried while it is quiet; ``--pid`` or
``--all`` (``Selection``) watches it. affmon's own processes (any affmon, not only this one)
are never watched.
"""

from __future__ import annotations

import os
import pwd
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import TypeVar

from affmon.collect.cgroup import Mount, cgroup_cpuset, read_mounts
from affmon.collect.context import ContextReader
from affmon.collect.numa_maps import memory_node, read_numa_maps, read_one_node, reread_period_s
from affmon.collect.procfs import (
    CLOCK_TICKS_PER_S,
    PF_KTHREAD,
    ProcFs,
    SchedCounters,
    SchedStat,
    StatFields,
    StatusFields,
    cmdline_argv,
    parse_cmdline,
    parse_schedstat,
    parse_stat_bytes,
)
from affmon.collect.selection import (
    LAUNCHERS,
    RUNTIME_RECHECK_S,
    is_affmon,
    is_training_candidate,
    maps_runtime,
    scan_maps,
)
from affmon.core.errors import ParseError, SourceError
from affmon.core.model import tree
from affmon.core.model.context import Context
from affmon.core.model.cpuset import CpuSet
from affmon.core.model.samples import GpuSample, NodeMemory, ProcessSample, Sample, ThreadSample

_MOUNTS_REFRESH_S = 30.0
# A process whose CPU time (utime + stime of all its threads, in clock ticks) did not move
# since the last sample had no thread scheduled for a tick's worth: its threads' stat and
# schedstat are not read again, only their masks; but at least every this many samples
# they are, so that a state (a thread blocked in D, woken but not yet run) is never
# staler than that.
QUIET_REREAD_EVERY = 5
# States in which a thread is not on a run queue: sleeping (S) and idle kernel threads (I).
_ASLEEP = frozenset({"S", "I"})
# An unwatched process below this share of one CPU (all its threads together) cannot hold a
# thread any rule counts: contenders and occupants start at 10% of a CPU or more.
CARRY_BELOW_PERCENT = 5.0
# A watched thread that ran less than this since its last sample has no ``sched`` read.
LIGHT_RUN_NS = 1_000_000
CARRY_REREAD_EVERY = 30


@dataclass(frozen=True)
class Selection:
    """Which processes to watch. ``pids``: these and their descendants only. Otherwise
    every PID NVML lists on a GPU, training launchers, python processes with a GPU or
    deep-learning runtime mapped, and the python processes below those; ``all`` widens to
    every process. ``others``: also sample every other process, unwatched,
    to see what else runs on the watched processes' CPUs. affmon never samples itself."""

    pids: tuple[int, ...] = ()
    all: bool = False
    others: bool = False


@dataclass
class _ProcessMemo:
    start_ticks: int
    comm: str
    argv: list[str]
    cmdline: str | None
    candidate: bool
    # The ``schedstat`` line each watched thread was last read with: unparsed, it tells
    # that the thread was not scheduled since.
    schedstat: dict[int, bytes] = field(default_factory=dict)
    # The owner (real UID), read once per process: an unwatched process's status is not
    # read each tick, but isolation must know whose it is.
    uid: int | None = None
    cpu_ticks: int = -1  # the whole process's utime + stime at the last full read
    quiet_ticks: int = 0  # samples since then that found it quiet
    affmon: bool = False
    runtime: bool | None = None  # a GPU/deep-learning runtime mapped (None: unknown)
    runtime_checked_s: float = float("-inf")
    runtime_vsize: int | None = -1  # the address space's size when ``maps`` was last scanned
    seen_ticks: int = -1  # utime + stime at the last sample, read or carried
    seen_s: float = float("-inf")  # when that was
    carried: int = 0  # samples in a row whose threads were carried, not read
    ppid: int = 0
    context: Context | None = None  # read once, the first time it is watched
    memory: NodeMemory | None = None  # numa_maps, for a watched training process
    memory_due_s: float = float("-inf")
    # Its threads' samples as last read, by TID, and handed out: a carried process hands
    # out the same tuple again (``Reuse.threads``), so the next snapshot can tell its
    # threads are unchanged by identity. (No TID-keyed map is kept beside it between
    # reads: 10,000 threads' worth was 0.4 MB.)
    samples: tuple[ThreadSample, ...] = ()
    # A carried process's sample as last handed out, and the stat it was made from: while
    # the stat is the same object (its line unchanged, ``Reuse.stat``), the sample is
    # handed out again.
    carried_sample: ProcessSample | None = None
    carried_stat: StatFields | None = None
    # A watched process's status and cgroup cpuset as last read, its main thread's mask
    # then, and the samples since (``Sampler._limits``).
    limits: tuple[StatusFields | None, CpuSet | None, CpuSet | None, int] | None = None


class Reuse:
    """The sampler's one reuse of what did not change: where what it read of a process or a
    thread says that nothing in it moved since the sample before, it hands out the object
    it made then, not a new equal one. That sameness is a contract the rates read
    (``affmon.core.model.rates.handed_back``): a sample handed out again moved by zero, and
    its rates of the interval before are handed out again in turn, not computed. The
    places, each through this object:

    * a process's ``stat`` line that reads as it did: the fields parsed from it then
      (``stat``), not parsed again;
    * a carried process whose ``stat`` is those same fields: its ``ProcessSample`` of the
      sample before, as it is (``Sampler._read_process``, under ``on``);
    * a carried process's threads: the tuple of them last read (``threads``);
    * a thread asleep and not scheduled since (its ``schedstat`` line unchanged), a thread
      of a quiet process whose mask is unchanged, a thread of an unwatched process whose
      ``stat`` and mask read the same: its ``ThreadSample`` of the sample before
      (``thread``).

    Off (``Sampler(reuse=False)``), as psutil's ``oneshot`` cache is outside its block: the
    same files are read and the same choices made, but each of those is a new object equal
    to the one reused (a line parsed again, a sample copied), so every value is the same,
    no object is, and the rates take their general path. For tests, and to measure what
    the reuse saves."""

    __slots__ = ("on",)

    # What it saves, measured on the 2-core development machine (load average 5 to 11 from
    # other work), 2,000 waking threads in 10 unwatched processes and a training-like one,
    # a sample a second; the sampler's CPU per sample, median of 15, three runs of each,
    # alternating: on 3.7, 6.0 and 3.6 ms; off 11.2, 12.3 and 14.1 ms. On:
    #   python -m bench.cost.sample_cost --rounds 15
    # off (one line):
    #   python -c 'import functools, affmon.collect.sampler as s; s.Sampler.__init__ = functools.partialmethod(
    #   s.Sampler.__init__, reuse=False); from bench.cost.sample_cost import main; main()' --rounds 15
    def __init__(self, on: bool = True) -> None:
        self.on = on

    def stat(self, raw: bytes, kept: tuple[bytes, StatFields] | None) -> StatFields | None:
        """The fields parsed at the last sample from the ``stat`` line ``kept`` holds, when
        ``raw`` reads as that line did; None: ``raw`` is to be parsed."""
        return kept[1] if self.on and kept is not None and kept[0] == raw else None

    def thread(self, prev: ThreadSample) -> ThreadSample:
        """A thread's sample, nothing in it having moved: ``prev``, or an equal copy."""
        return prev if self.on else replace(prev)

    def threads(self, samples: tuple[ThreadSample, ...]) -> tuple[ThreadSample, ...]:
        """A carried process's threads as last read: the same tuple, or one of equal copies."""
        return samples if self.on else tuple(replace(t) for t in samples)


class _MemoParents(Mapping[int, int | None]):
    """Each process's parent as its memo holds it (the ``ppid`` of its ``stat`` when first
    seen), read through the memos, not copied out of them: a parent map (``tree``)."""

    __slots__ = ("_memo",)

    def __init__(self, memo: Mapping[int, _ProcessMemo]) -> None:
        self._memo = memo

    def __getitem__(self, pid: int) -> int | None:
        return self._memo[pid].ppid

    def __contains__(self, pid: object) -> bool:
        return pid in self._memo

    def __iter__(self) -> Iterator[int]:
        return iter(self._memo)

    def __len__(self) -> int:
        return len(self._memo)


GpuSource = Callable[[], tuple[GpuSample, ...]]
T = TypeVar("T")
V = TypeVar("V", str, int)


class Sampler:
    def __init__(
        self,
        root: str = "/",
        selection: Selection | None = None,
        gpu_source: GpuSource | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        reuse: bool = True,
    ) -> None:
        self.proc = ProcFs(root)
        self.root = root
        self.selection = selection or Selection()
        self.gpu_source = gpu_source
        self.clock = clock
        self.reuse = Reuse(reuse)  # what did not change, handed out again (``Reuse``)
        self._self_pid = os.getpid() if self.proc.live else -1
        self._memo: dict[int, _ProcessMemo] = {}
        self._stat_lines: dict[int, tuple[bytes, StatFields]] = {}  # each process's stat as last read
        self._users: dict[int, str | None] = {}
        self._contexts = ContextReader(self.proc, clock)
        self._mounts: tuple[Mount, ...] = ()
        self._mounts_read_at = float("-inf")
        self._memory_readers = 1  # the processes whose numa_maps this sample reads (``_placement``)
        self._memory_node: int | None = None  # the one node with memory (memory_node), when so
        self._memory_node_read = False

    def check_pids(self) -> None:
        """Raise ``SourceError`` naming the first ``--pid`` that does not exist."""
        for pid in self.selection.pids:
            if self.proc.stat(pid) is None:
                raise SourceError(f"no such process: {pid}")

    def is_python(self, pid: int) -> bool:
        """Whether the process last sampled as ``pid`` is a python interpreter or a training
        launcher (by its name and command line); False for a PID not sampled."""
        memo = self._memo.get(pid)
        return memo is not None and memo.candidate

    def sample(self) -> Sample:
        start = self.clock()
        wall = time.time()
        gpus = self.gpu_source() if self.gpu_source else ()
        gpu_pids: dict[int, list[tuple[int, int | None]]] = {}
        for gpu in gpus:
            for proc in gpu.processes:
                gpu_pids.setdefault(proc.pid, []).append((gpu.index, proc.used_memory_bytes))
        if start - self._mounts_read_at > _MOUNTS_REFRESH_S:
            self._mounts = read_mounts(self.root)
            self._mounts_read_at = start
        stats = self._process_stats(start)
        parents = {pid: stat.ppid for pid, stat in stats.items()}
        followed, training = self._training(stats, parents, gpu_pids, start)
        watched = self._select(stats, parents, followed, training)
        wanted = set(stats) if self.selection.others else watched
        named = set(self.selection.pids)
        self._memory_readers = max(1, sum(1 for pid in watched if pid in training or pid in named))
        processes = []
        for pid in sorted(wanted):
            sample = self._read_process(
                stats[pid], gpu_pids.get(pid, []), start, watched=pid in watched, training=pid in training
            )
            if sample is not None:
                processes.append(sample)
        self._memo = {pid: m for pid, m in self._memo.items() if pid in stats}
        return Sample(
            monotonic_s=start,
            wall_time_s=wall,
            duration_s=self.clock() - start,
            processes=tuple(processes),
            gpus=gpus,
        )

    # -- selection ---------------------------------------------------------------

    def _process_stats(self, now: float) -> dict[int, StatFields]:
        """Every process's ``stat``. A line that reads as it did at the last sample (most
        processes, most ticks: nothing in it moved) keeps the fields parsed then, the same
        object, which tells ``_read_process`` the process is unchanged."""
        stats = {}
        lines: dict[int, tuple[bytes, StatFields]] = {}
        before = self._stat_lines
        for pid, raw in self.proc.stats(p for p in self.proc.listed_pids(now) if p != self._self_pid):
            stat = self.reuse.stat(raw, before.get(pid))
            if stat is None:
                try:
                    stat = parse_stat_bytes(raw)
                except ParseError:
                    continue
            lines[pid] = (raw, stat)
            stats[pid] = stat
        self._stat_lines = lines
        return stats

    def _memo_for(self, stat: StatFields) -> _ProcessMemo:
        memo = self._memo.get(stat.pid)
        if (
            memo is not None
            and memo.comm != stat.comm
            and memo.start_ticks == stat.start_ticks
            and stat.flags & PF_KTHREAD
        ):
            # A kernel worker's name says what work it is doing ("kworker/1:0-events"); it
            # changes most ticks, and a kernel thread never execs: the same process.
            memo.comm = stat.comm
        # comm changes on exec, start time on PID reuse: either invalidates the cache.
        if memo is None or memo.start_ticks != stat.start_ticks or memo.comm != stat.comm:
            raw = self.proc.read(stat.pid, "cmdline")
            argv = cmdline_argv(raw) if raw else []
            memo = _ProcessMemo(
                start_ticks=stat.start_ticks,
                comm=stat.comm,
                argv=argv,
                cmdline=None if raw is None else parse_cmdline(raw),
                candidate=is_training_candidate(stat.comm, argv),
                affmon=is_affmon(stat.comm, argv),
                ppid=stat.ppid,
            )
            status = _or_none(self.proc.status, stat.pid)
            memo.uid = status.uid if status else None
            self._memo[stat.pid] = memo
        return memo

    def _training(
        self, stats: dict[int, StatFields], parents: tree.ParentMap, gpu_pids: Mapping[int, object], now: float
    ) -> tuple[set[int], set[int]]:
        """(followed: the python processes under a launcher or a training process, which
        are part of a job whether or not they have mapped a runtime yet; training: those on
        a GPU, the launchers, and the python processes with a runtime mapped or unknown).
        affmon's own processes are neither."""
        candidates = set()
        launchers = set()
        training = {pid for pid in gpu_pids if pid in stats}
        for pid, stat in stats.items():
            if stat.flags & PF_KTHREAD:  # never a training process
                continue
            memo = self._memo_for(stat)
            if not memo.candidate or memo.affmon:
                continue
            candidates.add(pid)
            if (
                memo.runtime is not True
                and now - memo.runtime_checked_s >= RUNTIME_RECHECK_S
                and (stat.vsize_bytes is None or stat.vsize_bytes != memo.runtime_vsize)
            ):
                memo.runtime = self._runtime(pid)
                memo.runtime_checked_s = now
                memo.runtime_vsize = stat.vsize_bytes
            if stat.comm in LAUNCHERS or any(os.path.basename(a) in LAUNCHERS for a in memo.argv[:2]):
                launchers.add(pid)
                training.add(pid)
            elif memo.runtime is not False:
                training.add(pid)
        below = tree.descendants(training | launchers, parents)
        return (below & candidates) | training, training

    def _runtime(self, pid: int) -> bool | None:
        if self.proc.live:
            return scan_maps(f"/proc/{pid}/maps")
        return maps_runtime(self.proc.read(pid, "maps"))

    def _select(
        self, stats: dict[int, StatFields], parents: tree.ParentMap, followed: set[int], training: set[int]
    ) -> set[int]:
        if self.selection.all:
            chosen = set(stats)
        elif self.selection.pids:
            chosen = tree.descendants(self.selection.pids, parents) & set(stats)
        else:
            chosen = followed | training
        return {pid for pid in chosen if not self._memo_for(stats[pid]).affmon}

    # -- reading ---------------------------------------------------------------

    def _user(self, uid: int | None) -> str | None:
        if uid is None:
            return None
        if uid not in self._users:
            try:
                self._users[uid] = pwd.getpwuid(uid).pw_name
            except KeyError:
                self._users[uid] = str(uid)
        return self._users[uid]

    def _read_process(
        self, stat: StatFields, gpu_use: list[tuple[int, int | None]], now: float, *, watched: bool, training: bool
    ) -> ProcessSample | None:
        pid = stat.pid
        memo = self._memo.get(pid)
        if (
            self.reuse.on
            and memo is not None
            and stat is memo.carried_stat  # its stat line reads as at the last tick, which carried it
            and memo.carried_sample is not None
            and memo.carried < CARRY_REREAD_EVERY
            and not (watched or training or gpu_use)
        ):
            memo.carried += 1  # carried again, as below, without the checks that cannot have changed:
            # the same line has the same start time and name, and its CPU time has not moved
            memo.seen_s = now
            return memo.carried_sample
        memo = self._memo_for(stat)
        cpu_ticks = stat.utime_ticks + stat.stime_ticks
        carry = (
            not watched
            and not training
            and not gpu_use
            and bool(memo.samples)
            and memo.carried < CARRY_REREAD_EVERY
            and self.proc.live
            and _percent(cpu_ticks - memo.seen_ticks, now - memo.seen_s) < CARRY_BELOW_PERCENT
        )
        memo.seen_ticks, memo.seen_s = cpu_ticks, now
        if carry:  # (its stat line as it was at the last tick, which carried it: handed out above)
            memo.carried += 1
            memo.carried_sample = self._process_sample(stat, memo, None, None, gpu_use, watched, training, read=False)
            memo.carried_stat = stat
            return memo.carried_sample
        memo.carried_sample = memo.carried_stat = None
        # A process read for the first time starts its run of carried samples part way,
        # by its PID: processes first seen together (all of them, at the monitor's start)
        # are then not all read again on the same tick, every CARRY_REREAD_EVERY samples.
        memo.carried = 0 if memo.samples else pid % CARRY_REREAD_EVERY
        seen: dict[int, ThreadSample] = {}
        seen_raw: dict[int, bytes] = {}
        previous = {t.tid: t for t in memo.samples}
        previous_raw = memo.schedstat
        # The values its threads share (their name, flags, start time, often their CPU
        # time), held once: 108 bytes a thread fewer, measured on 1,000 waking threads.
        shared = _Shared()
        quiet = cpu_ticks == memo.cpu_ticks and memo.quiet_ticks < QUIET_REREAD_EVERY and self.proc.live
        # A kernel thread has no other threads: no listing of its task directory.
        for tid in (pid,) if stat.flags & PF_KTHREAD else self.proc.tids(pid):
            before = previous.get(tid)
            raw = previous_raw.get(tid)
            try:
                if quiet and before is not None:
                    thread = self._quiet_thread(pid, tid, before)
                elif watched:
                    thread, raw = self._read_thread(pid, tid, before, raw, shared)
                else:
                    thread, raw = self._read_other_thread(pid, tid, before, shared), None
            except ParseError:
                thread = None
            if thread is not None:
                seen[thread.tid] = thread  # a sample handed out again keys by its own tid: one int
                if raw is not None:
                    seen_raw[thread.tid] = raw
        memo.samples = tuple(seen[tid] for tid in sorted(seen))
        memo.schedstat = seen_raw
        memo.cpu_ticks = cpu_ticks
        memo.quiet_ticks = memo.quiet_ticks + 1 if quiet else 0
        if not seen:
            return None  # exited while we read it
        status, cgroup_cpus = None, None
        if watched:  # others are only "what else runs where": their threads suffice
            status, cgroup_cpus = self._limits(memo, pid, seen.get(pid))
            self._placement(memo, pid, now, training)
        else:
            memo.limits = None
        return self._process_sample(stat, memo, status, cgroup_cpus, gpu_use, watched, training, read=True)

    def _limits(
        self, memo: _ProcessMemo, pid: int, main: ThreadSample | None
    ) -> tuple[StatusFields | None, CpuSet | None]:
        """A watched process's ``status`` (owner, ``Mems_allowed``) and its cgroup's cpuset,
        read again when its main thread's mask changed since the last read (a cpuset
        change moves every task's mask with it), when it was last read
        ``QUIET_REREAD_EVERY`` samples ago, or every sample in a recorded tree; else as last
        read. Each unknown on its own: a bad status must not also hide the cgroup."""
        mask = main.allowed_cpus if main is not None else None
        kept = memo.limits
        if kept is not None and self.proc.live and kept[2] == mask and kept[3] < QUIET_REREAD_EVERY:
            memo.limits = (kept[0], kept[1], mask, kept[3] + 1)
            return kept[0], kept[1]
        status = _or_none(self.proc.status, pid)
        cgroup_cpus = _or_none(cgroup_cpuset, self.root, pid, self._mounts)
        memo.limits = (status, cgroup_cpus, mask, 1)
        return status, cgroup_cpus

    def _process_sample(
        self,
        stat: StatFields,
        memo: _ProcessMemo,
        status: StatusFields | None,
        cgroup_cpus: CpuSet | None,
        gpu_use: list[tuple[int, int | None]],
        watched: bool,
        training: bool,
        *,
        read: bool,
    ) -> ProcessSample:
        memory = [m for _, m in gpu_use if m is not None]
        uid = status.uid if status else memo.uid
        return ProcessSample(
            pid=stat.pid,
            start_ticks=stat.start_ticks,
            ppid=stat.ppid,
            name=stat.comm,
            uid=uid,
            user=self._user(uid),
            cmdline=memo.cmdline,
            mems_allowed=status.mems_allowed if status else None,
            cgroup_cpus=cgroup_cpus,
            threads=memo.samples if read else self.reuse.threads(memo.samples),
            gpu_indices=tuple(sorted({index for index, _ in gpu_use})),
            gpu_memory_bytes=sum(memory) if memory else None,
            watched=watched,
            training=training,
            kernel=bool(stat.flags & PF_KTHREAD),
            cpu_ns=_tick_ns(stat),
            threads_read=read,
            memory=memo.memory,
            context=memo.context,
        )

    def _placement(self, memo: _ProcessMemo, pid: int, now: float, training: bool) -> None:
        """What placed a watched process (once), and where the pages are of a training
        process or one named by ``--pid``, whatever it runs (``numa_maps``, every few
        seconds: ``reread_period_s`` of what the last read cost)."""
        if memo.context is None:
            memo.context = self._contexts.read(pid, self._launcher_argv(pid))
        if (training or pid in self.selection.pids) and now >= memo.memory_due_s:
            if not self._memory_node_read:
                self._memory_node, self._memory_node_read = memory_node(self.root), True
            t0 = time.perf_counter()
            try:
                if self._memory_node is not None:
                    memo.memory = read_one_node(pid, self._memory_node, self.root)  # no walk to do
                else:
                    memo.memory = read_numa_maps(pid, self.root)
            except ParseError:
                memo.memory = None
            # The walks of all of them together, not each one's, stay within the share of the
            # wall time ``reread_period_s`` allows one: 4 ranks with 6 workers each are 28.
            memo.memory_due_s = now + reread_period_s((time.perf_counter() - t0) * self._memory_readers)

    def _launcher_argv(self, pid: int) -> list[str] | None:
        """The command line of the nearest torchrun above the process (at most 8 levels up,
        through processes the sampler holds a memo of)."""
        for up in islice(tree.ancestors(pid, _MemoParents(self._memo)), 8):
            parent = self._memo[up]
            if (
                parent.comm == "torchrun"
                or "torch.distributed.run" in parent.argv[:4]
                or any(os.path.basename(a) == "torchrun" for a in parent.argv[:2])
            ):
                return parent.argv
        return None

    def _quiet_thread(self, pid: int, tid: int, prev: ThreadSample) -> ThreadSample | None:
        """A thread of a process that used less than one clock tick of CPU since the last
        sample: only its mask is read again (one system call; a pin can change it without
        the thread running)."""
        affinity = self.proc.affinity(pid, tid)
        if affinity is None:
            return None  # exited
        if affinity == prev.allowed_cpus:
            return self.reuse.thread(prev)
        return replace(prev, allowed_cpus=affinity)

    def _read_other_thread(self, pid: int, tid: int, prev: ThreadSample | None, shared: _Shared) -> ThreadSample | None:
        """A thread of a process that is not watched, only "what else runs where": where it
        ran, how much CPU it took and its mask are all the rules ask of it, so ``stat``
        (CPU time by the clock tick) and the mask, never ``schedstat`` or ``sched``. Its
        wait, switches and migrations are unknown."""
        stat = self.proc.stat(pid, tid)
        if stat is None:
            return None
        affinity = _or_none(self.proc.affinity, pid, tid)
        cpu_ns = _tick_ns(stat)
        if (
            prev is not None
            and prev.start_ticks == stat.start_ticks
            and prev.name == stat.comm  # a kernel worker renames itself for a tick's work
            and prev.cpu_ns == cpu_ns
            and prev.psr == stat.processor
            and prev.state == stat.state
            and prev.allowed_cpus == affinity
            and prev.wait_ns is None
        ):
            return self.reuse.thread(prev)  # nothing the rules read has changed
        return _thread_sample(tid, stat, affinity, cpu_ns, None, None, shared)

    def _read_thread(
        self, pid: int, tid: int, prev: ThreadSample | None, prev_raw: bytes | None, shared: _Shared
    ) -> tuple[ThreadSample | None, bytes | None]:
        """The thread's sample and the ``schedstat`` line it was read with; no sample when
        the thread is gone (or its ``stat``, which says who it is, cannot be read). Any
        other file that is missing or unparsable is an unknown field, not a missing thread.
        ``prev_raw``: the ``schedstat`` line ``prev`` was read with."""
        raw = self.proc.read_task(pid, tid, "schedstat")
        affinity = _or_none(self.proc.affinity, pid, tid)
        if (
            prev is not None
            and raw is not None
            and raw == prev_raw
            and prev.wait_ns is not None  # schedstat known (not "0 0 0")
            and prev.state in _ASLEEP
        ):
            # Asleep at the last tick and not scheduled since (run time, wait time and
            # timeslices all unchanged): stat and sched cannot have moved. The one thing
            # missed is a thread woken but not yet run, shown as asleep until it runs.
            if affinity == prev.allowed_cpus:
                return self.reuse.thread(prev), raw
            return replace(prev, allowed_cpus=affinity), raw
        schedstat = None if raw is None else _or_none(parse_schedstat, raw.decode("ascii", "replace"))
        stat = self.proc.stat(pid, tid)
        if stat is None:
            return None, None
        if prev is not None and prev.start_ticks != stat.start_ticks:
            prev = None  # TID reused by a new thread
        if prev is not None and schedstat is not None and raw == prev_raw:
            # Not scheduled since the last tick: switch and migration counters unchanged.
            counters: SchedCounters | None = SchedCounters(
                prev.voluntary_switches, prev.involuntary_switches, prev.migrations
            )
        elif (
            prev is not None
            and schedstat is not None
            and prev.cpu_ns is not None
            and 0 <= schedstat.cpu_ns - prev.cpu_ns < LIGHT_RUN_NS
        ):
            # It ran, but briefly (a thread that wakes, does a little, sleeps): where it ran and
            # how long it waited are read above; its switches and migrations, from the costliest
            # file, are left unknown this tick.
            counters = None
        else:
            counters = _or_none(self.proc.sched, pid, tid)
            if counters is None:
                status = _or_none(self.proc.status, pid, tid)
                if status is not None:
                    counters = SchedCounters(status.voluntary_switches, status.involuntary_switches, None)
        cpu_ns = schedstat.cpu_ns if schedstat is not None else _tick_ns(stat)
        return _thread_sample(tid, stat, affinity, cpu_ns, schedstat, counters, shared), raw


class _Shared:
    """One object for each value among equal ones: called with a value, returns the first
    equal value it was called with. For one process's threads, whose names, flags and
    start times are mostly alike (a pool's threads); bounded by that process's threads."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[str | int, str | int] = {}

    def __call__(self, value: V) -> V:
        return self._seen.setdefault(value, value)  # type: ignore[return-value]


def _percent(ticks: int, seconds: float) -> float:
    """CPU share of one CPU (100 = one CPU busy) from a clock-tick delta over ``seconds``."""
    if seconds <= 0 or ticks < 0:
        return float("inf")  # no interval to judge by: read it
    return 100.0 * ticks / CLOCK_TICKS_PER_S / seconds


def _tick_ns(stat: StatFields) -> int:
    """CPU time from ``stat`` (user + system), by the clock tick, in nanoseconds."""
    return (stat.utime_ticks + stat.stime_ticks) * 1_000_000_000 // CLOCK_TICKS_PER_S


def _thread_sample(
    tid: int,
    stat: StatFields,
    affinity: CpuSet | None,
    cpu_ns: int | None,
    schedstat: SchedStat | None,
    counters: SchedCounters | None,
    shared: _Shared,
) -> ThreadSample:
    """One thread's sample from what was read of it; what was not read is unknown. A value
    equal to one that another thread of its process has is held as that same object
    (``shared``)."""
    return ThreadSample(
        tid=tid,
        start_ticks=shared(stat.start_ticks),
        name=shared(stat.comm),
        state=stat.state,
        psr=stat.processor,
        flags=shared(stat.flags),
        cpu_ns=None if cpu_ns is None else shared(cpu_ns),
        wait_ns=schedstat.wait_ns if schedstat else None,
        timeslices=schedstat.timeslices if schedstat else None,
        voluntary_switches=counters.voluntary_switches if counters else None,
        involuntary_switches=counters.involuntary_switches if counters else None,
        migrations=counters.migrations if counters else None,
        allowed_cpus=affinity,
    )


def _or_none(read: Callable[..., T], *args: object) -> T | None:
    """``read(*args)``, or None (unknown) when what it read cannot be parsed."""
    try:
        return read(*args)
    except ParseError:
        return None
