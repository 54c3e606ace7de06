"""What every diagnosis rule is built from: the finding, its severity, the thresholds,
the rules' inputs, and a job's busy threads (a thread is *busy* when it wanted a CPU, ran or
waited on a run queue, for at least ``busy_demand`` of the interval) and GIL turn groups.
Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import Any

from affmon.core.model.cpuset import CpuSet
from affmon.core.model.jobs import Job, demand, is_python, wait_ratio
from affmon.core.model.rates import ProcessRates, ThreadRates
from affmon.core.model.topology import Topology


class Severity(IntEnum):
    INFO = 0
    WARN = 1
    BAD = 2

    def __str__(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class Thresholds:
    """Every threshold the rules use, with its default and why (docs/findings.md).

    ================================  =======  ==============================================
    field                             default  meaning
    ================================  =======  ==============================================
    busy_demand                       0.20     a thread is busy when run + run-queue wait
                                               fill at least 20% of the interval
    starved_warn / starved_bad        0.10 /   run-queue wait ratio of the job's busy
                                      0.25     threads (measured on an H200: 0.00 healthy,
                                               0.45 hogs, 0.61 narrow mask; bcc's runqlat
                                               and the 25% CPU-throttling alert convention)
    narrow_factor                     1.0      busy threads' CPU demand above this many
                                               times the CPUs of their mask ...
    narrow_margin_cpus                0.25     ... plus this many CPUs, with more busy
                                               threads than CPUs (one thread's demand
                                               jitters just above 1.0)
    other_busy_percent                20.0     another process's thread is a contender
                                               from this CPU % on, or from half its fair
                                               share of a crowded CPU (``Neighbours``)
    neighbour_floor_percent           5.0      ... but never below this CPU %
    cross_numa_share                  0.20     share of busy threads that ran off the
                                               GPU's NUMA node
    gpu_util_low                      50       GPU utilisation % called "well below"
    pcie_traffic_bytes_per_s          100e6    traffic that makes a slow link matter
    raise_after / clear_after         2 / 3    consecutive intervals to raise / to clear
    turn_min_threads                  3        threads of one python process that take
                                               turns on the GIL (``turn_groups``): at
                                               least this many ran ...
    turn_switches_per_s               25.0     ... each blocking this often a second (the
                                               GIL's 5 ms switch interval gives ~200 on an
                                               idle machine, ~70 on a loaded one; threads
                                               that drop the GIL, 6-8) ...
    turn_run_cpus                     1.25     ... and together they ran at most this many
                                               CPUs, none more than twice their median ...
    turn_asleep                       0.20     ... each asleep at least this share of the
                                               interval (a thread waiting for the lock
                                               sleeps: spinning ones, 0.37-0.88; ones in
                                               zlib, runnable all along, 0.00-0.04)
    ================================  =======  ==============================================
    """

    busy_demand: float = 0.20
    starved_warn: float = 0.10
    starved_bad: float = 0.25
    narrow_factor: float = 1.0
    narrow_margin_cpus: float = 0.25
    other_busy_percent: float = 20.0
    neighbour_floor_percent: float = 5.0
    cross_numa_share: float = 0.20
    gpu_util_low: float = 50.0
    pcie_traffic_bytes_per_s: float = 100e6
    raise_after: int = 2
    clear_after: int = 3
    turn_min_threads: int = 3
    turn_switches_per_s: float = 25.0
    turn_run_cpus: float = 1.25
    turn_asleep: float = 0.20


DEFAULT_THRESHOLDS = Thresholds()


@dataclass(frozen=True)
class Finding:
    code: str
    severity: Severity
    pid: int | None  # the job's root process; None for a GPU nobody watched uses
    tids: tuple[int, ...]
    message: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    suggestion: Mapping[str, Any] | None = None  # {"cpus": "...", "move_off": [pids]}
    # What to change where no core set is the cure (a thread budget, more DataLoader
    # workers, a stuck pipeline): one sentence, display text; None where the cure is a pin.
    remedy: str | None = None

    @property
    def key(self) -> tuple[str, int | None]:
        return (self.code, self.pid)

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": str(self.severity),
            "pid": self.pid,
            "tids": list(self.tids),
            "message": self.message,
            "evidence": dict(self.evidence),
            "suggestion": None if self.suggestion is None else dict(self.suggestion),
            "remedy": self.remedy,
        }


def busy_threads(job: Job, seconds: float, t: Thresholds) -> list[tuple[ProcessRates, ThreadRates]]:
    """The job's threads that wanted a CPU ``busy_demand`` of the interval, less those that
    take turns on the GIL (``turn_groups``): their run-queue wait is the hand-over of the
    lock, not a want of CPUs, and more CPUs do not help them (``GIL_BOUND`` says so)."""
    turns = {th.sample.tid for g in turn_groups(job, seconds, t) for th in g.threads}
    return [(p, th) for p, th in job.threads() if demand(th, seconds) >= t.busy_demand and th.sample.tid not in turns]


@dataclass(frozen=True)
class TurnGroup:
    """Threads of one python process that take turns on the GIL: Python's threads (by
    name), each ran, each blocked ``turn_switches_per_s`` times a second or more (a thread
    that waits for the GIL sleeps on a futex and is woken to take it: a voluntary switch)
    and each slept ``turn_asleep`` of the interval or more (while one holds the lock the
    others sleep), together they ran about one CPU, evenly, and they queued
    ``starved_warn`` of the time or more. Eight pure-Python threads spinning, measured on 2
    CPUs: 0.12-0.15 CPU each, 1.0 in all, ~200 voluntary switches/s each and 25-30% of
    their time in the run queue, whether allowed one CPU or two; with the machine loaded,
    0.05 each and ~70 switches/s.
    Threads in C code that drops the GIL (zlib) blocked 3-20 times/s, and once 82 times/s on
    a loaded 2-CPU machine, where six of them ran 1.0 CPU together: but they were runnable
    96-100% of the interval, where spinning ones were 12-63% (idle, and beside eight CPU
    hogs)."""

    process: ProcessRates
    threads: tuple[ThreadRates, ...]
    run_cpus: float  # CPUs they ran together
    demand_cpus: float  # their run + run-queue wait

    @property
    def need_cpus(self) -> float:
        """The CPUs they can use: what they ran, at least one (they hold the GIL in turn)."""
        return max(1.0, self.run_cpus)


def _python_thread_name(thread: str, process: str) -> bool:
    """A thread Python started: named as its process (CPython before 3.14 leaves a new
    thread its creator's name) or ``Thread-N (target)`` (3.14 names them). Native pools
    name theirs (``pt_data_pin``, ``pt_autograd_0``: a training step hands work among
    them, blocking as often as GIL turns do, and that is no GIL-bound job)."""
    return thread == process or thread.startswith("Thread-")


TURN_RAN = 0.01  # a thread in the group ran at least 1% of the interval (4 spinning on a
# loaded 2-CPU machine ran 5% each)


def turn_groups(job: Job, seconds: float, t: Thresholds) -> list[TurnGroup]:
    groups = []
    for p in job.members:
        if len(p.threads) < t.turn_min_threads or not is_python(p):
            continue
        ran = [
            (th, (th.cpu_ns_delta or 0) / (seconds * 1e9))
            for th in p.threads
            if th.cpu_ns_delta is not None
            and _python_thread_name(th.sample.name, p.sample.name)
            and (th.voluntary_switches_per_s or 0.0) >= t.turn_switches_per_s
            and th.cpu_ns_delta >= seconds * 1e9 * TURN_RAN
            and demand(th, seconds) <= 1.0 - t.turn_asleep
        ]
        if len(ran) < t.turn_min_threads:
            continue
        runs = sorted(r for _, r in ran)
        total = sum(runs)
        if total > t.turn_run_cpus or runs[-1] > 2 * runs[len(runs) // 2]:
            continue  # more than one CPU's work, or one thread doing it: not turns
        wanted = sum(demand(th, seconds) for th, _ in ran)
        if wanted < t.busy_demand or (wait_ratio(th for th, _ in ran) or 0.0) < t.starved_warn:
            continue  # no queue to explain: their turns cost nothing a CPU could give
        groups.append(TurnGroup(p, tuple(th for th, _ in ran), total, wanted))
    return groups


def severity_of(value: float, warn: float, bad: float) -> Severity | None:
    if value >= bad:
        return Severity.BAD
    if value >= warn:
        return Severity.WARN
    return None


def tids_of(threads: Iterable[tuple[ProcessRates, ThreadRates]], most: int = 16) -> tuple[int, ...]:
    return tuple(sorted(th.sample.tid for _, th in threads))[:most]


def rounded(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


# -- context ---------------------------------------------------------------------------


ExpectedMasks = Mapping[tuple[int, int], CpuSet]


@dataclass(frozen=True)
class CutShort:
    """A pin of affmon, or its undo, killed half way (its journal entry is pending and no
    affmon is working on it): some threads of the process may still have ``cpus``, and
    ``affmon undo PID`` (``pid``: the PID the pin was asked for) finishes putting them back."""

    cpus: CpuSet
    pid: int


class ExpectedPins(dict[tuple[int, int], CpuSet]):
    """``ExpectedMasks`` as the journal gives them, with ``cut_short``: (PID, start ticks)
    -> a pin or undo of that process killed half way, which is not a pin other software
    reset (the drift rule says to run ``affmon undo`` again instead)."""

    def __init__(
        self,
        expected: Mapping[tuple[int, int], CpuSet] | None = None,
        cut_short: Mapping[tuple[int, int], CutShort] | None = None,
    ) -> None:
        super().__init__(expected or {})
        self.cut_short: Mapping[tuple[int, int], CutShort] = dict(cut_short or {})
        self.unsure = False  # read while an affmon held the journal's lock: read it again


@dataclass(frozen=True)
class RuleInputs:
    topology: Topology
    thresholds: Thresholds = DEFAULT_THRESHOLDS
    # (PID, start ticks) -> the mask affmon set: a process that reused a pinned PID is not it
    expected_masks: ExpectedMasks = field(default_factory=dict)


def worst_first(findings: Iterable[Finding]) -> list[Finding]:
    """Findings in the one order every front end shows them: worst first, then by PID and code."""
    return sorted(findings, key=lambda f: (-f.severity, f.pid or 0, f.code))


def merge_same_code(findings: list[Finding]) -> list[Finding]:
    """One finding per (code, pid): the worst, with the other messages' evidence kept."""
    if len(findings) <= 1:
        return findings
    worst = max(findings, key=lambda f: f.severity)
    rest = [f for f in findings if f is not worst]
    return [
        replace(
            worst,
            message="; ".join([worst.message, *(f.message for f in rest)]),
            evidence={**worst.evidence, "also": [dict(f.evidence) for f in rest]},
        )
    ]
