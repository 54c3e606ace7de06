"""Sampling one training loop's thread at tens of Hz: what it is blocked on, and on what.

A ``LoopSampler`` watches one thread (a rank's main thread by default). Each ``probe``
reads ``/proc/PID/task/TID/syscall`` (one file: ``running``, or the call it sleeps in
with its arguments) and, for a call that waits on fds, what those fds are:

* ``read``/``recv*``/``ioctl``: the first argument;
* ``poll``/``ppoll``: the ``pollfd`` array, read from ``/proc/PID/mem`` (a plain read of
  the process's memory, as a debugger's peek: the process is never stopped);
* ``select``/``pselect6``: the read set's bitmap, the same way;
* ``epoll_*``: the fds the epoll instance watches, from ``/proc/PID/fdinfo/EPFD``;

then the ``/proc/PID/fd/N`` link of each. A pipe a child process (a DataLoader worker) also
holds is the data queue (``multiprocessing.Queue`` is a pipe). Sockets are not counted:
forked workers inherit the rank's sockets (a process group's TCP store), which carry no
batches. ``/dev/nvidia*`` is the GPU driver. A loop blocked in a futex is waiting for data
when a *feeder* thread of the same process (one found blocked on a worker's pipe: the
pin-memory thread) is then waiting on a worker or running.

``window`` closes an interval: the thread's ``schedstat`` delta (exact on-CPU and run-queue
time), the class counts of the probes, and the workers' schedstat and the idle capacity of
the job's CPUs (``/proc/stat``). Children, their fds and the feeder threads are looked up
again every ``refresh_s`` (2 s).

The kernel checks ``syscall`` and ``mem`` as a ptrace attach, fd links as a ptrace read:
the same user, or root (where Yama's ``ptrace_scope`` is 1, only root, or the process's
ancestor). Without it the probes are ``unknown`` and the breakdown says the blocked time
could not be split; on-CPU and run-queue shares stay exact.

Cost: ``bench/cost/loop_cost.py`` measures it per watched thread next to ``ps`` reading the
same thread at the same rate.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from affmon.collect.fs import UNAVAILABLE, KeptFile, is_live, list_dir, read_file, read_text, resolve
from affmon.collect.permission import why_not_readable
from affmon.collect.procfs import ProcFs
from affmon.collect.pyframes import DATA_LOADING_FILES, PythonStacks, frame_label, in_frames
from affmon.core.errors import ParseError
from affmon.core.model.loop import (
    DATA_WAIT,
    FD_DATA,
    FD_FIRST,
    FD_SET,
    STALL_CPUS,
    TOP_FRAMES,
    UNKNOWN,
    LoopWindow,
    Probe,
    SyscallState,
    TaskWait,
    WorkerStats,
    classify,
    fd_kind,
    parse_syscall,
)

MAX_POLL_FDS = 64  # fds of one poll read from memory; a DataLoader's waits have one
MAX_SELECT_FDS = 1024  # FD_SETSIZE
MAX_FEEDERS = 4
MAX_WAITS = 64  # worker threads whose sleeping place is read for a stalled pipeline
MAX_FRAME_LABELS = 256  # distinct places counted in one interval (a loop has a handful)
# multiprocessing's helper processes, by the module their command line runs
MP_HELPERS = (b"multiprocessing.resource_tracker", b"multiprocessing.forkserver", b"multiprocessing.semaphore_tracker")
FEEDER_RETRY_S = 0.5  # while the loop waits in a futex and no feeder is known, look for one this often
DEFAULT_RATE_HZ = 20.0


def parse_cpu_times(text: str) -> dict[int, tuple[int, int]]:
    """``/proc/stat``'s ``cpuN`` lines as CPU -> (idle + iowait, total) clock ticks (the first
    eight fields: user to steal). Malformed lines raise ``ParseError``."""
    found: dict[int, tuple[int, int]] = {}
    for line in text.split("\n"):
        if not line.startswith("cpu") or line.startswith("cpu "):
            continue
        name, *fields = line.split()
        if not name[3:].isdigit() or not name[3:].isascii() or len(fields) < 5:
            raise ParseError(f"bad /proc/stat line {line[:60]!r}")
        ticks = [int(f) for f in fields[:8] if f.isascii() and f.isdigit() and len(f) <= 20]
        if len(ticks) < min(8, len(fields)):
            raise ParseError(f"bad /proc/stat line {line[:60]!r}")
        found[int(name[3:])] = (ticks[3] + ticks[4], sum(ticks))
    return found


def parse_epoll_targets(text: str) -> list[int]:
    """The fds an epoll instance watches, from its ``fdinfo`` (``tfd: N events: ...`` lines)."""
    fds = []
    for line in text.split("\n"):
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "tfd:" and parts[1].isascii() and parts[1].isdigit():
            fds.append(int(parts[1]))
    return fds


def _parsed(data: bytes) -> SyscallState | None:
    try:
        return parse_syscall(data.decode("ascii", "replace"))
    except ParseError:
        return None


@dataclass(frozen=True, slots=True)
class _Mark:
    monotonic_s: float
    run_ns: int | None
    wait_ns: int | None
    workers: dict[int, tuple[int, int]]  # worker tid -> (run_ns, wait_ns)
    cpu_times: dict[int, tuple[int, int]]


class LoopSampler:
    """Probes one thread of ``pid`` (``tid``, default the main thread) under ``root``.

    Not thread-safe by itself: ``LoopWatcher`` serialises ``probe`` and ``window``."""

    def __init__(
        self,
        pid: int,
        tid: int | None = None,
        root: str = "/",
        machine: str | None = None,
        refresh_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pid = pid
        self.tid = pid if tid is None else tid
        self.fs = ProcFs(root)
        self.root = root
        self.machine = machine or os.uname().machine
        self.refresh_s = refresh_s
        self.clock = clock
        self.syscall_readable = True
        self.children: tuple[int, ...] = ()
        self.worker_links: frozenset[str] = frozenset()
        self.feeders: set[int] = set()
        self._refreshed_at = float("-inf")
        self._feeders_sought_at = float("-inf")
        self._counts: Counter[str] = Counter()
        # The loop's Python frames, read on the probes that find it running: time on the CPU
        # inside a data loader's frames is the loop loading its own data.
        self.memory = KeptFile(f"/proc/{pid}/mem")  # the process's memory: its poll sets, its frames
        self.stacks = PythonStacks(pid, self.tid, root, memory=self.memory)
        self._syscall_files: dict[int, KeptFile] = {}  # the loop thread's and the feeders', kept open
        self._frame_probes = 0
        self._data_probes = 0
        self._where: Counter[str] = Counter()  # running probes by where the stack was (frame_label)
        # A stalled pipeline's sleeping worker threads: by TID, the run and wait times they
        # had when their place was read, and that place (``_waits``).
        self._last_waits: dict[int, tuple[tuple[int, int], TaskWait]] = {}
        self.start_ticks = self._start_ticks()  # with the TID, the thread's identity
        self._refresh()
        self._mark = self._take_mark()

    # -- reading ---------------------------------------------------------------------

    def _kept_syscall(self, tid: int) -> bytes | None:
        """The ``syscall`` file of a thread read at every probe (the loop thread, a feeder).
        Live, it is opened once and read again at offset 0 each probe: one system call a
        probe instead of three (the probe's thread took about 59 us a probe reading it by
        path, woken from its sleep), and the file stays the thread's: once it exits, a read
        fails (gone) even if another task takes its number. Closed by ``close``, when the
        feeder is dropped, or when the sampler is collected."""
        if not self.fs.live:
            return self.fs.read_task(self.pid, tid, "syscall")
        kept = self._syscall_files.get(tid)
        if kept is None:
            kept = self._syscall_files[tid] = KeptFile(f"/proc/{self.pid}/task/{tid}/syscall")
        return kept.read(4096)

    def _drop_feeders(self, *tids: int) -> None:
        """Stop following these feeders (all of them when none is named)."""
        for tid in tids or tuple(self.feeders):
            self.feeders.discard(tid)
            kept = self._syscall_files.pop(tid, None) if tid != self.tid else None
            if kept is not None:
                kept.close()

    def close(self) -> None:
        """Close the files kept open (a sampler no longer probed). A later look opens them
        again rather than read a number the process may since have given another file."""
        for kept in self._syscall_files.values():
            kept.close()
        self._syscall_files.clear()
        self.memory.close()

    def _syscall(self, tid: int) -> SyscallState | None:
        """The thread's call, or None when unreadable (gone, not permitted) or garbled."""
        data = self.fs.read_task(self.pid, tid, "syscall")
        return None if data is None else _parsed(data)

    def _link(self, pid: int, fd: int) -> str | None:
        try:
            if is_live(self.root):
                return os.readlink(f"/proc/{pid}/fd/{fd}")
            real, _ = resolve(self.root, f"/proc/{pid}/fd")
            return os.readlink(f"{real}/{fd}")
        except OSError as exc:
            if exc.errno in UNAVAILABLE:
                return None
            raise

    def _memory(self, address: int, size: int) -> bytes | None:
        """``size`` bytes of the process's memory at ``address`` (live root only)."""
        if not is_live(self.root) or not 0 < address < 1 << 63 or size <= 0:
            return None
        try:
            data = os.pread(self.memory.fd(), size, address)
            if not data:  # the memory the file was opened on is gone (exited, or a new program)
                self.memory.close()
            return data or None
        except OSError as exc:  # EIO: an unmapped address (the call returned meanwhile)
            if exc.errno in UNAVAILABLE or exc.errno == errno.EFAULT:
                return None
            raise

    def _waited_fds(self, call: str, args: tuple[int, ...]) -> list[int]:
        if not args:
            return []
        if call in FD_FIRST:
            return [args[0]] if args[0] < 1 << 31 else []
        if call in ("poll", "ppoll"):
            count = min(args[1], MAX_POLL_FDS)
            raw = self._memory(args[0], 8 * count)
            if raw is None:
                return []
            fds = [int.from_bytes(raw[i : i + 4], "little", signed=True) for i in range(0, len(raw) - 7, 8)]
            return [fd for fd in fds if fd >= 0]
        if call in ("select", "pselect6"):
            count = min(args[0], MAX_SELECT_FDS)
            raw = self._memory(args[1], (count + 63) // 64 * 8)
            if raw is None:
                return []
            bits = int.from_bytes(raw, "little")
            return [fd for fd in range(count) if bits >> fd & 1]
        if call in FD_SET:  # epoll
            text = read_text(self.root, f"/proc/{self.pid}/fdinfo/{args[0]}")
            return [] if text is None else parse_epoll_targets(text)
        return []

    def _fd_kinds(self, state: SyscallState) -> tuple[str, ...]:
        call = state.name(self.machine)
        return tuple(fd_kind(self._link(self.pid, fd), self.worker_links) for fd in self._waited_fds(call, state.args))

    def _feeder_busy(self) -> bool:
        busy = False
        for tid in sorted(self.feeders):
            data = self._kept_syscall(tid)
            state = None if data is None else _parsed(data)
            if state is None:
                self._drop_feeders(tid)
            elif state.running or FD_DATA in self._fd_kinds(state):
                busy = True
        return busy

    def probe(self) -> str:
        """Look at the thread once; count and return the class of what it was doing."""
        if self.clock() - self._refreshed_at >= self.refresh_s:
            self._refresh()
        data = self._kept_syscall(self.tid)
        state = None if data is None else _parsed(data)
        if state is None:
            if data is None and self.fs.read_task(self.pid, self.tid, "stat") is not None:
                self.syscall_readable = False  # the thread is there: reading it is not allowed
            found = classify(Probe(UNKNOWN))
        elif state.running:
            found = classify(Probe(None))
            self._read_frames()
        else:
            call = state.name(self.machine)
            kinds = self._fd_kinds(state)
            if call == "futex" and not self.feeders and self.clock() - self._feeders_sought_at >= FEEDER_RETRY_S:
                self._find_feeders()  # a feeder found handling a batch at the last look: look again
            feeder = call == "futex" and self._feeder_busy()
            found = classify(Probe(call, kinds, feeder))
        self._counts[found] += 1
        return found

    def _read_frames(self) -> None:
        if self.stacks.unavailable is not None:
            return
        stack = self.stacks.stack()
        if stack is not None:
            self._frame_probes += 1
            if in_frames(stack, DATA_LOADING_FILES):
                self._data_probes += 1
            label = frame_label(stack)
            if label is not None and (label in self._where or len(self._where) < MAX_FRAME_LABELS):
                self._where[label] += 1

    # -- the rank's workers and feeder threads -----------------------------------------

    def _children(self) -> tuple[int, ...]:
        """The rank's worker processes: its children, less multiprocessing's own helpers (the
        resource tracker that ``spawn`` and ``forkserver`` start beside the workers, the fork
        server), which never carry a batch."""
        found: set[int] = set()
        for tid in self.fs.tids(self.pid):
            data = self.fs.read_task(self.pid, tid, "children")
            if data:
                found.update(int(w) for w in data.split() if w.isascii() and w.isdigit())
        return tuple(sorted(pid for pid in found if not self._helper(pid)))

    def _helper(self, pid: int) -> bool:
        data = read_file(self.root, f"/proc/{pid}/cmdline")
        return data is not None and any(name in data[:4096] for name in MP_HELPERS)

    def _refresh(self) -> None:
        self._refreshed_at = self.clock()
        self.stacks.forget_code()  # a code object freed since may have left its address to another
        self.children = self._children()
        links: set[str] = set()
        for child in self.children:
            for name in list_dir(self.root, f"/proc/{child}/fd"):
                if name.isascii() and name.isdigit():
                    link = self._link(child, int(name))
                    if link is not None and link.startswith("pipe:"):
                        links.add(link)
        self.worker_links = frozenset(links)
        if not links:
            self._drop_feeders()
        elif not self.feeders:  # a known feeder stays until it exits: no scan of every thread
            self._find_feeders()

    def _find_feeders(self) -> None:
        """Threads of the rank blocked on a worker's pipe now (sticky until they exit)."""
        self._feeders_sought_at = self.clock()
        if not self.worker_links:
            self._drop_feeders()
            return
        for tid in self.fs.tids(self.pid):
            if tid == self.tid or tid in self.feeders or len(self.feeders) >= MAX_FEEDERS:
                continue
            state = self._syscall(tid)
            if state is not None and not state.running and FD_DATA in self._fd_kinds(state):
                self.feeders.add(tid)

    def _worker_times(self) -> dict[int, tuple[int, int]]:
        times = {}
        for child in self.children:
            for tid in self.fs.tids(child):
                data = self.fs.read_task(child, tid, "schedstat")
                parts = data.split() if data else []
                if len(parts) >= 2 and all(p.isascii() and p.isdigit() for p in parts[:2]):
                    times[tid] = (int(parts[0]), int(parts[1]))
        return times

    def _start_ticks(self) -> int | None:
        try:
            found = self.fs.stat(self.pid, self.tid)
        except ParseError:
            return None
        return None if found is None else found.start_ticks

    def _take_mark(self) -> _Mark:
        sched = None
        if self.start_ticks is not None and self._start_ticks() == self.start_ticks:  # not a reused TID
            with contextlib.suppress(ParseError):
                sched = self.fs.schedstat(self.pid, self.tid)
        cpu_times: dict[int, tuple[int, int]] = {}
        data = read_file(self.root, "/proc/stat")
        if data is not None:
            with contextlib.suppress(ParseError):
                cpu_times = parse_cpu_times(data.decode("ascii", "replace"))
        return _Mark(
            self.clock(),
            None if sched is None else sched.cpu_ns,
            None if sched is None else sched.wait_ns,
            self._worker_times(),
            cpu_times,
        )

    def _domain(self) -> set[int]:
        cpus: set[int] = set()
        for pid in (self.pid, *self.children):
            mask = self.fs.affinity(pid, pid)
            if mask:
                cpus |= mask
        return cpus

    def _waits(self, times: dict[int, tuple[int, int]]) -> tuple[TaskWait, ...]:
        """Where each thread of the workers sleeps now (at most ``MAX_WAITS``): its state,
        ``wchan`` and the system call, for a pipeline whose workers did not run. A thread
        whose run and wait times (``times``, its ``schedstat`` at this window's mark) are
        those it had when its place was last read has not been on a CPU since, so it sleeps
        where it slept: that place is kept, not read again (three files a thread, every
        window of a stalled pipeline). One that was woken and has not run yet shows where it
        slept until it runs, as the sampler's threads do."""
        found: list[TaskWait] = []
        last = self._last_waits
        kept: dict[int, tuple[tuple[int, int], TaskWait]] = {}
        for child in self.children:
            for tid in self.fs.tids(child):
                if len(found) >= MAX_WAITS:
                    self._last_waits = kept
                    return tuple(found)
                now = times.get(tid)
                before = last.get(tid)
                if now is not None and before is not None and before[0] == now and before[1].pid == child:
                    found.append(before[1])
                    kept[tid] = before
                    continue
                try:
                    stat = self.fs.stat(child, tid)
                except ParseError:
                    stat = None
                if stat is None:
                    continue
                raw = self.fs.read_task(child, tid, "wchan")
                wchan = raw.decode("ascii", "replace").strip()[:64] if raw else None
                data = self.fs.read_task(child, tid, "syscall")
                state = None if data is None else _parsed(data)
                call = None if state is None else ("running" if state.running else state.name(self.machine))
                if state is not None and not state.running and state.number == -1:
                    call = "-"
                wait = TaskWait(child, tid, stat.state, wchan if wchan not in (None, "", "0") else None, call)
                found.append(wait)
                if now is not None:
                    kept[tid] = (now, wait)
        self._last_waits = kept
        return tuple(found)

    def _workers(self, old: _Mark, new: _Mark, waited_for_data: bool) -> WorkerStats:
        """The workers over the window; where their threads sleep only for a pipeline that
        looks stalled: the loop found waiting for data (``waited_for_data``) while the
        workers together ran less than ``STALL_CPUS`` of a CPU. Without a probe that found
        the loop waiting for data no rule reads those places, three files a worker thread:
        a window of one rank with twelve idle worker threads took 0.87-0.97 ms of CPU with
        them read and 0.39-0.44 without (``python -m bench.cost.loop_window_cost``)."""
        run = wait = 0
        for tid, (r1, w1) in new.workers.items():
            r0, w0 = old.workers.get(tid, (r1, w1))
            run += max(0, r1 - r0)
            wait += max(0, w1 - w0)
        seconds = new.monotonic_s - old.monotonic_s
        waits: tuple[TaskWait, ...] = ()
        if waited_for_data and self.children and seconds > 0 and run < STALL_CPUS * seconds * 1e9:
            waits = self._waits(new.workers)
        else:
            self._last_waits = {}
        domain = self._domain()
        free = None
        if domain and old.cpu_times and new.cpu_times:
            free = 0.0
            for cpu in domain:
                if cpu in old.cpu_times and cpu in new.cpu_times:
                    idle = new.cpu_times[cpu][0] - old.cpu_times[cpu][0]
                    total = new.cpu_times[cpu][1] - old.cpu_times[cpu][1]
                    free += min(1.0, max(0.0, idle / total)) if total > 0 else 0.0
        return WorkerStats(len(self.children), run, wait, len(domain), free, waits)

    def window(self) -> LoopWindow:
        """The interval since the last ``window`` (or since the sampler was made)."""
        old, new = self._mark, self._take_mark()
        counts, self._counts = self._counts, Counter()
        frames, data = self._frame_probes, self._data_probes
        self._frame_probes = self._data_probes = 0
        where, self._where = self._where, Counter()
        self._mark = new
        both = None not in (old.run_ns, new.run_ns, old.wait_ns, new.wait_ns)
        return LoopWindow(
            pid=self.pid,
            tid=self.tid,
            seconds=new.monotonic_s - old.monotonic_s,
            run_ns=(new.run_ns or 0) - (old.run_ns or 0) if both else None,
            wait_ns=(new.wait_ns or 0) - (old.wait_ns or 0) if both else None,
            probes=dict(counts),
            syscall_readable=self.syscall_readable,
            workers=self._workers(old, new, counts[DATA_WAIT] > 0),
            frame_probes=frames if frames else None,
            data_probes=data if frames else None,
            frames_unavailable=self.stacks.unavailable,
            top_frames=tuple(sorted(where.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_FRAMES]),
            refused_why=None if self.syscall_readable else why_not_readable(),
        )


class LoopWatcher:
    """One background thread probing every watched loop at ``rate_hz`` (each gap jittered
    uniformly between half and one and a half periods, so probes cannot lock onto a loop
    whose step has the same period). ``windows`` closes the interval of each;
    ``set_samplers`` changes which loops are probed (ranks come and go). With no loop to
    probe the thread sleeps until it is given one, instead of waking ``rate_hz`` times a
    second for nothing (each wake costs the thread 50-145 us of CPU on the 2-core VM:
    docs/loop.md, Cost).

    The thread is a daemon and ``stop`` joins it, so a watcher never keeps a process alive.
    A sampler whose read fails in an unexpected way (an ``OSError`` the readers do not turn
    into "gone") is dropped with the reason in ``failed``, instead of ending the thread."""

    def __init__(
        self, samplers: Iterable[LoopSampler], rate_hz: float = DEFAULT_RATE_HZ, seed: int | None = None
    ) -> None:
        self.samplers = list(samplers)
        self.rate_hz = rate_hz
        self.period_s = 1.0 / rate_hz
        self.failed: dict[int, str] = {}  # pid -> why its sampler was dropped
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._probing = threading.Event()  # set while there is a loop to probe, or on stop
        self._follow_samplers()
        self._random = random.Random(seed)
        self._thread = threading.Thread(target=self._run, name="affmon-loop", daemon=True)

    def __enter__(self) -> LoopWatcher:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if not self._thread.is_alive() and not self._stop.is_set():
            self._thread.start()

    def stop(self) -> None:
        with self._lock:  # not between another thread's look at ``_stop`` and its clear
            self._stop.set()
            self._probing.set()
        if self._thread.is_alive():
            self._thread.join()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        while self._probing.wait() and not self._stop.wait(self.period_s * self._random.uniform(0.5, 1.5)):
            with self._lock:
                for sampler in list(self.samplers):
                    try:
                        sampler.probe()
                    except (OSError, ParseError, ValueError) as exc:
                        self.failed[sampler.pid] = f"the probe failed: {exc}"
                        self.samplers.remove(sampler)
                self._follow_samplers()

    def set_samplers(self, samplers: Iterable[LoopSampler]) -> None:
        """Probe these from now on (a sampler already watched keeps its interval going)."""
        with self._lock:
            self.samplers = list(samplers)
            self._follow_samplers()

    def _follow_samplers(self) -> None:
        """The thread probes while there are samplers (called with the lock held)."""
        if self.samplers:
            self._probing.set()
        elif not self._stop.is_set():
            self._probing.clear()

    def windows(self) -> list[LoopWindow]:
        found = []
        with self._lock:
            for sampler in list(self.samplers):
                try:
                    found.append(replace(sampler.window(), rate_hz=self.rate_hz))
                except (OSError, ParseError, ValueError) as exc:
                    self.failed[sampler.pid] = f"the probe failed: {exc}"
                    self.samplers.remove(sampler)
            self._follow_samplers()
        return found
