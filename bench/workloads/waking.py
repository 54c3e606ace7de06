"""Threads that wake: the workload of the cost benchmarks (bench/cost/: sample_cost,
tui_cost, export_cost).

A thread that sleeps and never wakes is the cheapest case for a sampler: affmon re-reads
only the masks of a process whose CPU time did not move since its last sample. Threads on
a real machine wake, so the benchmarks run on threads that do.

As a program, one process::

    python -m bench.workloads.waking --threads 200 [--period 0.5] [--work-us 30] [--busy-duty 0.3,0.4,0.5]
                           [--sleeping] [--name waker] [--seconds 600]

``--threads`` counts every thread of the process, the main one included. Each wakes every
``--period`` seconds from a random phase, hashes a buffer sized (by a measurement of this
CPU at start) to take ``--work-us`` microseconds of CPU, and sleeps again. ``--busy-duty``
turns that many of the threads into busy-ish ones: each hashes for its share of every
100 ms and sleeps the rest (hashlib releases the GIL on buffers this large, so they run
in parallel). ``--sleeping``: the other threads block until the process ends instead (the
case the benchmarks measured before). ``--name``: the process's name (``comm``); the
benchmarks start it with a non-python ``argv[0]`` too, so that affmon does not take it
for a training process. Prints one JSON line, ``{"pid": ..., "threads": ...}``, once every
thread runs; exits after ``--seconds``.

``--runtime`` maps a stand-in libtorch (``map_runtime``), so that affmon takes the process
for a training one.

As a module: ``add_arguments`` and ``Population`` give both benchmarks the same set of
processes: ``--threads`` threads (2,000 by default) split over ``--processes`` processes,
plus one training-like python process of 12 threads, 3 of them busy-ish (30, 40 and 50%),
with a stand-in libtorch mapped; or, with ``--ranks N``, N training-like ranks
(``bench/workloads/ranks.py``) in its place.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import mmap
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import TracebackType

HERE = Path(__file__).resolve()
TRAINING_THREADS = 12
TRAINING_BUSY_DUTY = (0.3, 0.4, 0.5)
BUSY_PERIOD_S = 0.1
STACK_BYTES = 256 * 1024  # 10,000 threads at the default 8 MiB would reserve 80 GB of address space


def work_buffer(work_us: float) -> bytes:
    """A buffer whose SHA-256 takes about ``work_us`` of this thread's CPU time (the
    fastest of a few timed 1 MiB hashes, so that other load does not shrink it much)."""
    probe = bytes(1 << 20)
    best = float("inf")
    for _ in range(5):
        t0 = time.thread_time()
        hashlib.sha256(probe).digest()
        best = min(best, time.thread_time() - t0)
    per_byte = max(best, 1e-6) / len(probe)
    return bytes(max(64, int(work_us * 1e-6 / per_byte)))


def wake(period_s: float, buffer: bytes, phase_s: float, until: float) -> None:
    """Wake every ``period_s`` (first after ``phase_s``), hash ``buffer``, sleep again.
    A thread that falls a whole period behind (an overloaded machine) skips the wakes it
    missed rather than running them back to back."""
    due = time.monotonic() + phase_s
    while True:
        now = time.monotonic()
        if now >= until:
            return
        if due > now:
            time.sleep(min(due, until) - now)
        hashlib.sha256(buffer).digest()
        due += period_s
        now = time.monotonic()
        if due < now:
            due = now + period_s


def busy_ish(duty: float, until: float) -> None:
    """Hash for ``duty`` of every ``BUSY_PERIOD_S`` and sleep the rest: a thread at about
    that share of a CPU (less when the machine has none to give)."""
    chunk = bytes(64 * 1024)
    while True:
        start = time.monotonic()
        if start >= until:
            return
        while time.monotonic() - start < duty * BUSY_PERIOD_S:
            hashlib.sha256(chunk).digest()
        rest = start + BUSY_PERIOD_S - time.monotonic()
        if rest > 0:
            time.sleep(rest)


RUNTIME_NAME = "libtorch_cpu.so"


def map_runtime(use_torch: bool = False) -> object:
    """What keeps a deep-learning runtime in this process's maps, so that affmon takes it
    for a training process: ``torch`` itself, or an mmap of a one-page file named like
    PyTorch's CPU library (removed at once: ``maps`` still names it, with " (deleted)")."""
    if use_torch:
        import torch  # the GPU machine's own install, or a CPU build

        return torch
    folder = tempfile.mkdtemp(prefix="affmon-rank-")
    path = Path(folder) / RUNTIME_NAME
    path.write_bytes(bytes(mmap.PAGESIZE))
    with open(path, "rb") as f:
        kept = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    path.unlink()
    os.rmdir(folder)
    return kept


def block(until: float) -> None:
    """Sleep until ``until`` in one system call: a thread that never wakes."""
    time.sleep(max(0.0, until - time.monotonic()))


def parse_duties(text: str) -> tuple[float, ...]:
    """``"0.3,0.4"`` -> (0.3, 0.4); each share of a CPU must be in (0, 1]."""
    if not text:
        return ()
    try:
        duties = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None
    if not all(0 < d <= 1 for d in duties):
        raise argparse.ArgumentTypeError(f"each share of a CPU must be in (0, 1]: {text!r}")
    return duties


def positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def run_process(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, required=True, help="threads in all, the main one included")
    ap.add_argument("--period", type=positive, default=0.5, help="seconds between a thread's wakes")
    ap.add_argument("--work-us", type=positive, default=30.0, help="CPU microseconds of work per wake")
    ap.add_argument("--busy-duty", type=parse_duties, default=(), help="busy-ish threads' shares of a CPU")
    ap.add_argument("--sleeping", action="store_true", help="the other threads never wake")
    ap.add_argument("--name", default=None, help="the process's name (comm)")
    ap.add_argument("--seconds", type=positive, default=600.0)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--runtime", action="store_true", help="map a stand-in libtorch: affmon takes it for training")
    a = ap.parse_args(argv)
    if a.threads < max(1, len(a.busy_duty)):
        ap.error("--threads must be at least 1 and at least the number of busy-ish threads")
    if a.name:
        Path("/proc/self/comm").write_text(a.name[:15])
    runtime = map_runtime() if a.runtime else None
    threading.stack_size(STACK_BYTES)
    until = time.monotonic() + a.seconds
    rng = random.Random(a.seed)
    buffer = work_buffer(a.work_us)
    jobs: list[Callable[[], None]] = [partial(busy_ish, d, until) for d in a.busy_duty]
    for _ in range(a.threads - len(jobs)):
        jobs.append(
            partial(block, until) if a.sleeping else partial(wake, a.period, buffer, rng.uniform(0, a.period), until)
        )
    ready = threading.Barrier(len(jobs))

    def start(job: Callable[[], None]) -> None:
        ready.wait()
        job()

    for job in jobs[1:]:
        threading.Thread(target=start, args=(job,), daemon=True).start()
    # The main thread is the first job: it starts it once every other thread is waiting.
    ready.wait()
    print(json.dumps({"pid": os.getpid(), "threads": len(os.listdir("/proc/self/task"))}), flush=True)
    jobs[0]()
    del runtime


# -- the benchmarks' population -----------------------------------------------------------


def split(threads: int, processes: int) -> list[int]:
    """``threads`` over ``processes`` as evenly as whole threads allow (the first ones get
    the remainder); every process has at least one."""
    if processes <= 0:
        return []
    if threads < processes:
        raise ValueError(f"{threads} threads cannot fill {processes} processes")
    base, extra = divmod(threads, processes)
    return [base + (i < extra) for i in range(processes)]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The population's options, the same in both benchmarks."""
    ap.add_argument("--threads", type=int, default=2000, help="waking threads in all (2,000; 10,000: the large case)")
    ap.add_argument("--processes", type=int, default=10, help="processes they are split over; 0: nothing runs")
    ap.add_argument("--period", type=positive, default=0.5, help="seconds between a thread's wakes")
    ap.add_argument("--work-us", type=positive, default=30.0, help="CPU microseconds of work per wake")
    ap.add_argument(
        "--population-as",
        choices=("others", "python", "watched"),
        default="others",
        help="others: the processes are named 'waker', not python (default); python: they are plain python "
        "processes (no GPU or deep-learning runtime mapped; 'watched' is the old name, from when affmon watched "
        "every python process)",
    )
    ap.add_argument(
        "--ranks",
        type=int,
        default=0,
        help="training-like ranks (bench/workloads/ranks.py: a main thread, 24 intra-op threads, 6 workers of 2 "
        "threads, a pin-memory thread) in place of the training-like process of 12 threads",
    )
    ap.add_argument("--sleeping", action="store_true", help="also measure threads that never wake, as a second row")


def check_arguments(ap: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    if a.processes < 0 or a.threads < 0 or a.ranks < 0:
        ap.error("--threads, --processes and --ranks must not be negative")
    if a.processes and a.threads < a.processes:
        ap.error(f"--threads {a.threads} cannot fill --processes {a.processes}")


@dataclass(frozen=True)
class Shape:
    """One population: ``threads`` over ``processes`` (plus the training-like process when
    ``processes`` is not 0 and there are no ``ranks``; plus ``ranks`` training-like ranks);
    ``sleeping``: the non-busy threads never wake; ``others``: the processes are named
    ``waker``, not python."""

    threads: int
    processes: int
    sleeping: bool = False
    period_s: float = 0.5
    work_us: float = 30.0
    others: bool = True
    ranks: int = 0

    @classmethod
    def from_args(cls, a: argparse.Namespace, *, sleeping: bool = False) -> Shape:
        return cls(a.threads, a.processes, sleeping, a.period, a.work_us, a.population_as == "others", a.ranks)

    def label(self) -> str:
        ranks = f"{self.ranks} rank{'s' if self.ranks != 1 else ''}" if self.ranks else ""
        if not self.processes:
            return ranks or "nothing running"
        threads = f"{self.threads:,} {'sleeping' if self.sleeping else 'waking'}"
        return f"{threads} + {ranks}" if ranks else threads

    def describe(self) -> str:
        """The population in words, for a benchmark's heading."""
        parts = []
        if self.processes:
            kind = "waker" if self.others else "plain python"
            parts.append(f"{self.processes} {kind} processes of {self.threads:,} threads in all")
            if not self.ranks:
                parts.append(f"a training-like python process of {TRAINING_THREADS} threads (libtorch mapped)")
        if self.ranks:
            parts.append(
                f"{self.ranks} training-like rank{'s' if self.ranks != 1 else ''} (libtorch mapped; each a main "
                "thread busy a quarter of the time, 24 intra-op and a pin-memory thread, 6 workers of 2 threads)"
            )
        return " + ".join(parts) or "nothing running"


class StartError(Exception):
    """A workload process died before it said it was ready."""


class Population:
    """The processes of one ``Shape``, started on entry and killed on exit. ``pids``: the
    population's processes; ``training_pid``: the training-like process, or the first rank
    (None without either); ``rank_pids``: the ranks; ``worker_pids``: their workers."""

    def __init__(self, shape: Shape, seconds: float) -> None:
        self.shape = shape
        self.seconds = seconds
        self.procs: list[subprocess.Popen[str]] = []
        self.pids: list[int] = []
        self.training_pid: int | None = None
        self.rank_pids: list[int] = []
        self.worker_pids: list[int] = []

    def _start(self, args: list[str], argv0: str) -> None:
        common = ["--period", str(self.shape.period_s), "--work-us", str(self.shape.work_us)]
        common += ["--seconds", str(self.seconds)] + (["--sleeping"] if self.shape.sleeping else [])
        self.procs.append(
            subprocess.Popen(
                [argv0, str(HERE), *args, *common], executable=sys.executable, stdout=subprocess.PIPE, text=True
            )
        )

    def _start_rank(self) -> None:
        args = ["--period", str(self.shape.period_s), "--work-us", str(self.shape.work_us)]
        self.procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "bench.workloads.ranks", *args, "--seconds", str(self.seconds)],
                stdout=subprocess.PIPE,
                text=True,
                cwd=HERE.parent.parent.parent,
            )
        )

    def __enter__(self) -> Population:
        try:
            for n in split(self.shape.threads, self.shape.processes):
                if self.shape.others:
                    self._start(["--threads", str(n), "--name", "waker"], "waker")
                else:
                    self._start(["--threads", str(n)], sys.executable)
            if self.shape.processes and not self.shape.ranks:
                duty = ",".join(str(d) for d in TRAINING_BUSY_DUTY)
                self._start(["--threads", str(TRAINING_THREADS), "--busy-duty", duty, "--runtime"], sys.executable)
            for _ in range(self.shape.ranks):
                self._start_rank()
            for proc in self.procs:
                line = proc.stdout.readline() if proc.stdout else ""
                if not line:
                    raise StartError(f"workload process {proc.pid} exited with {proc.wait()} before it was ready")
                said = json.loads(line)
                self.pids.append(int(said["pid"]))
                self.worker_pids += [int(w) for w in said.get("workers", [])]
        except BaseException:
            self.stop()
            raise
        if self.shape.ranks:
            self.rank_pids = self.pids[len(self.pids) - self.shape.ranks :]
            self.pids = self.pids[: len(self.pids) - self.shape.ranks]
            self.training_pid = self.rank_pids[0]
        elif self.shape.processes:
            self.training_pid = self.pids.pop()
        return self

    def all_pids(self) -> list[int]:
        training = self.rank_pids + self.worker_pids if self.rank_pids else [self.training_pid]
        return self.pids + [p for p in training if p is not None]

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()  # a rank's workers die with it (PR_SET_PDEATHSIG)
        for proc in self.procs:
            proc.wait()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()


# -- what the population did -----------------------------------------------------------


def task_counters(pids: Sequence[int], proc: str = "/proc") -> dict[tuple[int, int], tuple[int, int]]:
    """(pid, tid) -> (CPU ns, times scheduled) from each thread's ``schedstat``; threads
    that exit while read are left out."""
    counters = {}
    for pid in pids:
        try:
            tids = os.listdir(f"{proc}/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"{proc}/{pid}/task/{tid}/schedstat") as f:
                    cpu_ns, _wait_ns, slices = f.read().split()
            except (OSError, ValueError):
                continue
            counters[(pid, int(tid))] = (int(cpu_ns), int(slices))
    return counters


@dataclass(frozen=True)
class Activity:
    """What a set of threads did between two ``task_counters`` readings ``seconds`` apart."""

    threads: int
    woke: int  # threads scheduled at least once
    wakes_per_thread_s: float  # median times scheduled per thread per second
    cpu_share: float  # CPU used, in CPUs

    def line(self) -> str:
        return (
            f"{self.woke:,} of {self.threads:,} threads ran; median {self.wakes_per_thread_s:.2f} "
            f"times scheduled per thread per s; {100 * self.cpu_share:.1f}% of a CPU in all"
        )


def activity(
    before: dict[tuple[int, int], tuple[int, int]], after: dict[tuple[int, int], tuple[int, int]], seconds: float
) -> Activity:
    common = sorted(set(before) & set(after))
    slices = sorted(after[k][1] - before[k][1] for k in common)
    cpu_ns = sum(after[k][0] - before[k][0] for k in common)
    median = slices[len(slices) // 2] if slices else 0
    return Activity(
        threads=len(common),
        woke=sum(1 for s in slices if s > 0),
        wakes_per_thread_s=median / seconds if seconds > 0 else 0.0,
        cpu_share=cpu_ns / 1e9 / seconds if seconds > 0 else 0.0,
    )


if __name__ == "__main__":
    run_process()
