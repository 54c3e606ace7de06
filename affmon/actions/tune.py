"""``affmon tune``: let the job's own progress choose its placement, a closed loop.

The ``Tuner`` measures the starting placement twice (the run-to-run spread), then tries
each candidate placement the planner proposes (``advice.candidate_placements``): it pins
the job there (``pin``, journaled, moving the others off when the candidate says so), lets
it settle, measures a window, and puts everything back (``undo``) before the next one. The
best two are measured again when they are within the spread; the best is then pinned once
more and left in force: an ordinary journal entry, so one ``affmon undo PID`` restores the
masks from before tune started, of the job and of every process it moved. Scores and the
choice: ``affmon.core.plan.tuning``.

A candidate that breaks a rule of the planner (a CPU outside the job's allowed CPUs, a
physical core split) is listed as refused and never pinned. A split placement (main loop
and DataLoader workers on separate cores) is one journal entry: a pin of its whole set,
with the isolation, which records every thread's old mask; then the part each of its
processes goes to, written into the entry (``Journal.refine``); then the two parts, set
by pins that add nothing to the journal. The journal stays locked from the first pin to
the last part, so no other affmon interleaves. The drift rule then expects each process's
own part, and undo puts back every recorded thread, and every task created since that
carries one of the entry's masks, even after a crash between the parts.

For a front end on a worker thread: ``prepare()`` samples the job and lists the
candidates, ``step()`` does one unit of work (one measured placement) and returns False
when done, ``abort()`` (any thread) stops at once, restores, and makes ``step()`` finish;
``rows`` and ``result()`` are immutable values, and ``on_change`` is called with each
changed row from the worker thread.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from affmon.actions.isolate import judge
from affmon.actions.journal import Journal, JournalError, ProcessKey
from affmon.actions.lease import Lease, stale_note
from affmon.actions.pin import PinResult, pin
from affmon.actions.threads import AffinityOps
from affmon.actions.undo import undo
from affmon.collect.sampler import Sampler
from affmon.core.errors import AffmonError, SourceError
from affmon.core.model.cpuset import CpuSet
from affmon.core.model.domains import allowed_pool, fmt_cpus
from affmon.core.model.jobs import Job
from affmon.core.model.rates import Snapshot
from affmon.core.model.topology import Topology
from affmon.core.model.window import sample_window
from affmon.core.plan.advice import INIT_IS_NO_JOB, candidate_placements, job_of, movable_occupants
from affmon.core.plan.placements import Placement
from affmon.core.plan.tuning import (
    SCORE_UNITS,
    Choice,
    Measure,
    ScoreKind,
    choose,
    mean,
    placement_problem,
    spread_of_rows,
    window_measure,
)

RowStatus = Literal["waiting", "running", "measured", "refused", "failed", "skipped"]
Isolation = Literal["auto", "never", "all"]
Propose = Callable[[Job, Snapshot, Sequence[Snapshot]], list[Placement]]


def _propose(job: Job, snapshot: Snapshot, window: Sequence[Snapshot]) -> list[Placement]:
    return candidate_placements(job, snapshot, window=window)


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the table: row 0 is the starting placement, as found."""

    number: int
    description: str
    cpus: CpuSet | None  # None: the starting placement's mask is unknown
    isolate: tuple[tuple[int, int], ...]  # (PID, start) of the processes moved off its CPUs
    status: RowStatus
    measures: tuple[Measure, ...] = ()
    score: float | None = None  # the mean of the measures' scores
    note: str = ""
    placement: Placement | None = None


@dataclass(frozen=True)
class TuneResult:
    pid: int
    score_kind: ScoreKind
    spread: float | None
    rows: tuple[Row, ...]
    chosen: int | None  # the row kept (0: the starting placement); None when aborted or failed
    why: str
    pinned: PinResult | None  # the pin left in force (None: nothing changed)
    aborted: bool
    error: str | None

    @property
    def unit(self) -> str:
        return SCORE_UNITS[self.score_kind]


MOVED_OFF = ", the other busy processes moved off"
LEFT = ", the others left where they are"


def described(description: str, moved: tuple[tuple[int, int], ...]) -> str:
    """A row's words as it will be run: moving others off only where it moves someone (the
    planner's words are its intent; with ``--no-isolate``, or nothing movable, nothing moves)."""
    base = description.removesuffix(MOVED_OFF).removesuffix(LEFT)
    if base == description:
        return description  # a placement that says nothing of the others (the split, the whole domain)
    return base + (f", {len(moved)} other busy process(es) moved off" if moved else LEFT)


class _Aborted(Exception):
    """abort() was called: restore and stop."""


# Tuners between prepare and their end, so that a signal that ends the whole program
# (SIGHUP when the terminal goes, SIGTERM, SIGQUIT) can stop each and wait for its restore.
_RUNNING: weakref.WeakSet[Tuner] = weakref.WeakSet()


def abort_running(timeout_s: float = 30.0) -> int:
    """Abort every tuner of this process and wait until each has put its trial back and
    given its lease up (at most ``timeout_s`` in all); the number still running after."""
    tuners = list(_RUNNING)
    for tuner in tuners:
        tuner.abort()
    end = time.monotonic() + timeout_s
    for tuner in tuners:
        if tuner.started:
            tuner.done.wait(max(0.0, end - time.monotonic()))
        else:
            tuner.release()  # prepared, never run: nothing to put back
    return sum(1 for t in tuners if t.started and not t.done.is_set())


class Tuner:
    def __init__(
        self,
        pid: int,
        *,
        start_ticks: int,
        sampler: Sampler,
        topology: Topology,
        journal: Journal,
        settle_s: float = 3.0,
        window_s: float = 8.0,
        with_children: bool = True,
        isolation: Isolation = "auto",
        max_candidates: int = 6,
        interval_s: float = 1.0,
        tick_s: float = 1.0,
        ops: AffinityOps | None = None,
        root: str = "/",
        propose: Propose = _propose,
        my_uid: int | None = None,
        on_change: Callable[[Row], None] | None = None,
    ) -> None:
        self.pid = pid
        self.start_ticks = start_ticks
        self.sampler = sampler
        self.topology = topology
        self.journal = journal
        self.settle_s = settle_s
        self.window_s = window_s
        self.with_children = with_children
        self.isolation = isolation
        self.max_candidates = max_candidates
        self.interval_s = interval_s
        self.tick_s = tick_s
        self.ops = ops
        self.root = root
        self.propose = propose
        self.my_uid = os.geteuid() if my_uid is None else my_uid
        self.on_change = on_change
        self.score_kind: ScoreKind = "cpu"
        self.gpu_indices: frozenset[int] = frozenset()
        self._rows: list[Row] = []
        self._prepared_rows: tuple[Row, ...] | None = None  # the rows as listed, before set_isolation
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._steps: Iterator[None] | None = None
        self._result: TuneResult | None = None
        self._applied = False  # a trial's pin is in force (abort must undo it)
        self._pinned: PinResult | None = None  # the last pin of the job tune made
        self._entry_id: str | None = None  # the journal entry of the trial in force
        self.started = False  # step() has run: a trial may be in force until ``done``
        self.done = threading.Event()  # the run has ended and everything is put back
        self._lease: Lease | None = None  # held from prepare to the end: no other affmon acts on the job
        self.notes: list[str] = []  # what the front end should say once (a stale lease found)

    # -- the API a front end drives ---------------------------------------------------

    @property
    def rows(self) -> tuple[Row, ...]:
        with self._lock:
            return tuple(self._rows)

    def abort(self) -> None:
        """Stop as soon as possible and put back what the current trial changed. Safe from
        any thread and from a signal handler."""
        self._stop.set()

    @property
    def aborted(self) -> bool:
        return self._stop.is_set()

    def prepare(self) -> tuple[Row, ...]:
        """Sample the job over two intervals and list the rows (nothing changes)."""
        if not self._rows:
            self._prepare()
        return self.rows

    def step(self) -> bool:
        """One unit of work; False once the result is ready (``result()``)."""
        if self._result is not None:
            return False
        if self._steps is None:
            self.prepare()
            self.started = True
            self._steps = self._run()
        try:
            next(self._steps)
            return True
        except StopIteration:
            return self._result is None

    def run(self) -> TuneResult:
        while self.step():
            pass
        return self.result()

    def result(self) -> TuneResult:
        if self._result is None:
            raise RuntimeError("tune has not finished")
        return self._result

    # -- preparing ------------------------------------------------------------------

    def _prepare(self) -> None:
        if self.pid == 1:
            raise AffmonError(INIT_IS_NO_JOB)
        window = self._sample_window()
        snapshot = window[-1]
        job = job_of(snapshot, self.pid)
        if job is None or job.root.sample.start_ticks != self.start_ticks:
            raise SourceError(f"PID {self.pid} exited while affmon sampled it")
        if self._lease is None:
            lease = Lease((self.pid, self.start_ticks), job.root.sample.uid)
            lease.acquire()  # LeaseHeld: another affmon tunes this job; nothing was changed
            self._lease = lease
            _RUNNING.add(self)
            note = stale_note(self.pid, lease.stale)
            if note is not None:
                self.notes.append(note)
        try:
            self._list_rows(job, snapshot, window)
        except BaseException:
            self.release()
            raise

    def set_isolation(self, on: bool) -> tuple[Row, ...]:
        """Before the run: with ``on`` False, no row moves anyone (each row that would moves
        no one, and one that is then the same as another is skipped); True puts the rows back
        as prepared. The rows as they now stand."""
        if self._steps is not None:
            raise RuntimeError("isolation is chosen before the run")
        with self._lock:
            if self._prepared_rows is None:
                self._prepared_rows = tuple(self._rows)
            rows = list(self._prepared_rows)
            if not on:
                seen: set[tuple[CpuSet | None, CpuSet | None]] = set()
                for i, row in enumerate(rows):
                    if row.placement is not None and row.status == "waiting":
                        placement = replace(row.placement, isolate=False)
                        key = (placement.cpus, placement.main_cpus)
                        status: RowStatus = "skipped" if key in seen else "waiting"
                        note = "the same as another row without isolation" if status == "skipped" else ""
                        seen.add(key)
                        rows[i] = replace(
                            row,
                            isolate=(),
                            placement=placement,
                            description=described(placement.description, ()),
                            status=status,
                            note=note,
                        )
            self._rows = rows
        return self.rows

    def release(self) -> None:
        """Give the job's lease back (at the end of the run, or when it never started)."""
        _RUNNING.discard(self)
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def _list_rows(self, job: Job, snapshot: Snapshot, window: Sequence[Snapshot]) -> None:
        self.gpu_indices = frozenset(i for m in job.members for i in m.sample.gpu_indices)
        utils = [g.sample.util_percent for g in snapshot.gpus if g.sample.index in self.gpu_indices]
        self.score_kind = "gpu" if any(u is not None for u in utils) else "cpu"
        main = job.root.sample.main_thread
        mask = None if main is None or main.allowed_cpus is None else main.allowed_cpus & self.topology.online_cpus
        cgroup = job.root.sample.cgroup_cpus
        pool, _ = allowed_pool(self.topology, (cgroup & self.topology.online_cpus) if cgroup else None)
        what = "unknown" if mask is None else fmt_cpus(mask)
        rows = [Row(0, f"the starting placement: CPUs {what}, as found", mask, (), "waiting")]
        seen: set[tuple[CpuSet, CpuSet | None, tuple[tuple[int, int], ...]]] = set()
        if mask is not None:
            seen.add((mask, None, ()))
        tried = 0
        for placement in self.propose(job, snapshot, window):
            problem = placement_problem(self.topology, placement, pool)
            if problem is not None:
                rows.append(Row(len(rows), placement.description, placement.cpus, (), "refused", note=problem))
                continue
            if placement.main_cpus is not None and not self.with_children:
                continue  # the workers are not pinned, so there is nothing to split
            moved = self._to_move(snapshot, job, placement)
            if placement.isolate and not moved:
                placement = replace(placement, isolate=False)  # nothing movable: the same as leaving them
            key = (placement.cpus, placement.main_cpus, moved)
            if key in seen or tried >= self.max_candidates:
                continue
            seen.add(key)
            tried += 1
            text = described(placement.description, moved)  # what the row does; the planner's words stay its intent
            rows.append(Row(len(rows), text, placement.cpus, moved, "waiting", placement=placement))
        with self._lock:
            self._rows = rows

    def _sample_window(self) -> tuple[Snapshot, ...]:
        window = sample_window(self.sampler.sample, self.topology, self.interval_s, intervals=2, wait=self._stop.wait)
        if not window:
            raise AffmonError("tune was interrupted before it changed anything")
        return window

    def _to_move(self, snapshot: Snapshot, job: Job, placement: Placement) -> tuple[tuple[int, int], ...]:
        """(PID, start) of the others to move off the placement's CPUs, by isolate's manners."""
        if not placement.isolate or self.isolation == "never":
            return ()
        found = []
        for o in movable_occupants(snapshot, job, placement.cpus):
            process = snapshot.process(o.pid)
            if process is None:
                continue
            s = process.sample
            # Judged as the pin will judge it, from /proc: its user, session and cgroup.
            why = judge(s.pid, s.start_ticks, job_pid=self.pid, isolate_all=self.isolation == "all", root=self.root)
            if why is None:
                found.append((s.pid, s.start_ticks))
        return tuple(sorted(found))

    # -- the loop -------------------------------------------------------------------

    def _run(self) -> Iterator[None]:
        try:
            # Two passes, each candidate once a pass, alternated with the starting placement:
            # start, candidates, start, candidates in reverse, start (``core.tuning``: noise).
            candidates = [r.number for r in self.rows[1:] if r.status == "waiting"]
            for number in (0, *candidates, 0, *reversed(candidates), 0):
                if self.rows[number].status in ("failed", "refused"):
                    continue  # a candidate whose pin failed is not tried again
                self._measure_row(number, again=bool(self.rows[number].measures))
                yield
            tried = [r for r in self.rows[1:] if r.status in ("measured", "failed")]
            if tried and all(r.status == "failed" for r in tried):
                # Nothing could be tried (no permission, a cpuset that refuses every candidate):
                # an error, not "the starting placement stays".
                raise AffmonError(f"no candidate could be tried: {tried[0].note}; nothing was changed")
            spread = self._spread()
            choice = choose([r.score for r in self.rows], spread or 0.0, SCORE_UNITS[self.score_kind])
            pinned = self._keep(choice)
            self._finish(choice.row, choice.why, pinned, None)
        except _Aborted:
            self._restore()
            self._skip_waiting()
            self._finish(None, "aborted: the masks from before tune started are back", None, None, aborted=True)
        except AffmonError as exc:
            restored = self._restore()
            self._skip_waiting()
            why = "" if restored else "; run `affmon undo` to put the rest back"
            self._finish(None, f"stopped: {exc}{why}", None, str(exc))

    def _spread(self) -> float | None:
        """The largest difference between two windows of one placement (``core.tuning``)."""
        repeats = [[s for m in r.measures if (s := m.score(self.score_kind)) is not None] for r in self.rows]
        return spread_of_rows(repeats)

    def _measure_row(self, number: int, again: bool = False) -> None:
        if self._stop.is_set():
            raise _Aborted()
        row = self.rows[number]
        self._set(replace(row, status="running", note="measuring again" if again else ""))
        if row.placement is not None:
            failure = self._apply(row)
            if failure is not None:
                self._set(replace(row, status="failed", note=failure))
                return
            self._wait(self.settle_s)
        measured = self._window()
        if row.placement is not None:
            self._restore(check=True)
        row = self.rows[number]
        measures = (*row.measures, measured)
        scores = [s for m in measures if (s := m.score(self.score_kind)) is not None]
        self._set(replace(row, status="measured", measures=measures, score=mean(scores), note=""))

    def _apply(self, row: Row) -> str | None:
        """Pin the job as ``row`` says; why not, in one line (nothing is then in force).
        The journal stays locked throughout, so a split is one change to other affmons."""
        placement = row.placement
        assert placement is not None
        try:
            with self.journal.locked():
                return self._apply_locked(placement, row.isolate)
        except JournalError as exc:  # locking, or recording a split's parts
            if self._applied:
                self._restore()
            return f"the pin failed: {exc}"

    def _apply_locked(self, placement: Placement, isolate: tuple[tuple[int, int], ...]) -> str | None:
        result = self._pin(placement.cpus, isolate)
        self._pinned = result
        self._entry_id = result.journal_id
        if not result.ok:
            if result.changed and not result.rolled_back:
                self._applied = True
                self._restore()
            return f"the pin failed: {result.error}"
        self._applied = True
        if placement.main_cpus is not None and placement.worker_cpus is not None:
            problem = self._split(result.journal_id, placement.main_cpus, placement.worker_cpus)
            if problem is not None:
                self._restore()
                return problem
        return None

    def _pin(self, cpus: CpuSet, isolate: tuple[tuple[int, int], ...]) -> PinResult:
        return pin(
            self.pid,
            cpus,
            start_ticks=self.start_ticks,
            with_children=self.with_children,
            root=self.root,
            ops=self.ops,
            journal=self.journal,
            isolate=bool(isolate),
            isolate_candidates=isolate,
            isolate_all=self.isolation == "all",
        )

    def _split(self, entry_id: str | None, main: CpuSet, workers: CpuSet) -> str | None:
        """The parts of a split, inside the whole set's entry ``entry_id``: first which
        process goes where is written into it (the main process on ``main``, every other
        process it pinned on ``workers``), then the parts are set by pins that add nothing
        to the journal, since the entry already holds every thread's old mask. Workers
        started since the whole pin are found in a fresh sample and go on ``workers`` too
        (undo knows them as processes started after the pin)."""
        sample = self.sampler.sample()
        me: ProcessKey = (self.pid, self.start_ticks)
        others: dict[int, int] = {}
        if entry_id is not None:
            entry = self.journal.get(entry_id)
            parts = {key: main if key == me else workers for key in entry.pinned_processes()}
            self.journal.refine(entry_id, parts)
            others.update((pid, start) for pid, start in parts if (pid, start) != me)
        for p in sample.processes:
            if p.ppid == self.pid:
                others.setdefault(p.pid, p.start_ticks)
        results = [pin(self.pid, main, start_ticks=self.start_ticks, root=self.root, ops=self.ops)]
        for child, start in others.items():
            results.append(pin(child, workers, start_ticks=start, with_children=True, root=self.root, ops=self.ops))
        gone = ("no such process", "is no longer the process chosen")  # a worker that exited meanwhile
        failed = next((r for r in results if not r.ok and not any(g in (r.error or "") for g in gone)), None)
        return None if failed is None else f"the split failed: {failed.error}"

    def _restore(self, check: bool = False) -> bool:
        """Undo the trial's pin (its own journal entry, never a pin made meanwhile by someone
        else) and check that every thread it recorded got back the mask it had before;
        True when nothing is left to put back. With ``check``, a failure stops the run."""
        if not self._applied:
            return True
        if self._entry_id is None:  # a dry run's pin: nothing was journaled, nothing to undo
            self._applied = False
            return True
        recorded = {r.tid: r for r in self.journal.get(self._entry_id).threads}
        result = undo(self.journal, self.pid, ops=self.ops, root=self.root, entry_id=self._entry_id)
        self._applied = not result.ok
        if check and not result.ok:
            raise AffmonError(f"could not restore after a trial: {result.error}")
        moved = [
            t
            for t in result.threads
            if t.status == "restored"
            and t.tid in recorded
            and t.after is not None
            and t.after != recorded[t.tid].old_cpus
        ]
        if check and moved:
            t = moved[0]
            raise AffmonError(
                f"after the trial, thread {t.tid} of PID {t.pid} has CPUs {fmt_cpus(t.after or frozenset())}, not the "
                f"{fmt_cpus(recorded[t.tid].old_cpus)} it had before: something else changed its mask meanwhile"
            )
        return result.ok

    def _keep(self, choice: Choice) -> PinResult | None:
        if choice.row == 0:
            return None
        row = self.rows[choice.row]
        assert row.placement is not None
        failure = self._apply(row)
        if failure is not None:
            raise AffmonError(f"could not pin the chosen placement (row {row.number}): {failure}")
        self._applied = False  # in force on purpose: ``affmon undo PID`` takes it back
        return self._pinned

    def _window(self) -> Measure:
        """Sample every ``tick_s`` for ``window_s``; the window's measure."""
        window = sample_window(self.sampler.sample, self.topology, self.tick_s, seconds=self.window_s, wait=self._wait)
        return window_measure(window, self.pid, self.with_children, self.gpu_indices)

    def _wait(self, seconds: float) -> None:
        if self._stop.wait(seconds):
            raise _Aborted()

    # -- bookkeeping ----------------------------------------------------------------

    def _set(self, row: Row) -> None:
        with self._lock:
            self._rows[row.number] = row
        if self.on_change is not None:
            self.on_change(row)

    def _skip_waiting(self) -> None:
        for row in self.rows:
            if row.status in ("waiting", "running"):
                self._set(replace(row, status="skipped", note="not tried: tune stopped"))

    def _finish(
        self, chosen: int | None, why: str, pinned: PinResult | None, error: str | None, *, aborted: bool = False
    ) -> None:
        self.release()
        self._result = TuneResult(
            pid=self.pid,
            score_kind=self.score_kind,
            spread=self._spread() if self.rows else None,
            rows=self.rows,
            chosen=chosen,
            why=why,
            pinned=pinned,
            aborted=aborted,
            error=error,
        )
        self.done.set()
