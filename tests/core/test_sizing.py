"""The suggestion is sized by what the job needs over the window that raised the finding, and
neighbours are judged by their share of a crowded CPU: on the H200 recordings and on
synthetic samples built from schedstat-like counters (run and run-queue wait, ns)."""

from __future__ import annotations

import dataclasses
import gzip

from hypothesis import given, settings
from hypothesis import strategies as st

from affmon.commands.diagnose import diagnose_run, findings_text
from affmon.core.model.jobs import find_jobs
from affmon.core.model.topology import Topology
from affmon.core.plan.advice import candidate_placements, job_of, occupants, propose_pin, suggest_for_job
from affmon.core.plan.need import for_need, job_need
from affmon.core.recording.format import read_recording
from affmon.core.rules.base import RuleInputs
from affmon.core.rules.evaluate import evaluate
from tests.helpers.sizing import RECORDINGS, Spec, machine, recording, samples_of, snaps


def spinners(first_pid: int, count: int, cpus: frozenset[int], run_ms: int, intervals: int, psr: int = 0) -> list[Spec]:
    """Unwatched busy loops (their wait is unknown, as the sampler reads unwatched threads)."""
    return [
        (pid, 1, "spin", False, False, False, [(pid, psr, cpus, [(run_ms, None)] * intervals)])
        for pid in range(first_pid, first_pid + count)
    ]


# -- sizing --------------------------------------------------------------------------------


def test_a_starved_job_gets_a_cpu_per_busy_thread_measured_over_the_window():
    # 16 hogs beside a ResNet job with 4 workers: 7 busy threads wanting 4.7 CPUs (run + wait).
    # Sized by that demand x 1.25 the job got 6 CPUs, fewer than its busy threads.
    _, window = recording("hogs")
    (job,) = find_jobs(window[-1])
    s = suggest_for_job(job, window[-1], window=window)
    assert len(s.cpus) >= 7
    sized = next(r for r in s.reasons if r.startswith("Sized for"))
    assert "7 threads needed a CPU" in sized and "4 intervals" in sized and "4 DataLoader workers" in sized
    assert not any("rank" in line for line in (*s.reasons, *s.warnings))


def test_a_window_of_earlier_intervals_kept_for_the_sizing_alone_sizes_the_same():
    # The monitor keeps the earlier intervals of its window as ``for_need`` makes them: on
    # the hogs recording that drops the 16 hogs and every other unwatched process.
    _, window = recording("hogs")
    light = [for_need(s) for s in window[:-1]] + [window[-1]]
    assert all(len(a.processes) < len(b.processes) for a, b in zip(light[:-1], window, strict=False))
    assert all(p.sample.watched for s in light[:-1] for p in s.processes)
    assert all({p.pid for p in s.current.processes} == {p.sample.pid for p in s.processes} for s in light[:-1])
    (job,) = find_jobs(window[-1])
    assert job_need(job, light) == job_need(job, window)
    assert suggest_for_job(job, window[-1], window=light) == suggest_for_job(job, window[-1], window=window)


def test_a_process_is_sized_over_the_intervals_it_was_seen_in():
    _, window = recording("hogs")
    (job,) = find_jobs(window[-1])
    other = next(p for p in window[-1].processes if not p.sample.watched and not p.sample.kernel)
    alone = job_of(window[-1], other.sample.pid)
    assert alone is not None
    # an unwatched process is in every whole snapshot, and only in the last of a light window
    assert job_need(alone, window).intervals == len(window) == 4
    light = [for_need(s) for s in window[:-1]] + [window[-1]]
    assert job_need(alone, light).intervals == 1
    assert "over the last interval (" in job_need(alone, light).sentence
    # a job not yet there in the first two intervals: sized over the two it was in
    gone = [dataclasses.replace(s, processes=()) for s in window[:2]] + window[2:]
    need = job_need(job, gone)
    assert need.intervals == 2 and need.window_s == sum(s.interval_s for s in window[2:])


def test_diagnose_sizes_over_its_own_samples():
    topology, _ = recording("hogs")
    with gzip.open(RECORDINGS / "hogs.jsonl.gz", "rt", encoding="utf-8") as f:
        samples = list(read_recording(f, "hogs")[1])
    findings, _, _ = diagnose_run(samples, topology, {})
    suggestion = next(f.suggestion for f in findings if f.suggestion)
    cpus = {c for part in suggestion["cpus"].split(",") for c in _expand(part)}
    assert len(cpus) >= 7
    assert any("over the last 4 intervals" in r for r in suggestion["reasons"])


def _expand(part: str) -> range:
    lo, _, hi = part.partition("-")
    return range(int(lo), int(hi or lo) + 1)


def job_with_a_stalled_worker(n: int = 4) -> list[Spec]:
    """A rank and one DataLoader worker on ``n`` CPUs full of spinners. In the first interval
    the worker ran 400 ms and queued 500; in the last it ran 30 ms and did not queue: its
    pipeline was blocked on the starved main loop."""
    every = frozenset(range(n))
    job: list[Spec] = [
        (100, 1, "python3", True, True, False, [(100, 0, every, [(300, 400), (300, 400)])]),
        (101, 100, "pt_data_worker", True, True, False, [(101, 1, every, [(400, 500), (30, 0)])]),
    ]
    return job + spinners(200, 2 * n, every, 100, 2, psr=2)


def test_a_worker_that_needed_a_cpu_earlier_in_the_window_still_counts():
    topology = machine(4)
    window = snaps(topology, job_with_a_stalled_worker())
    job = job_of(window[-1], 100)
    assert job is not None and len(job.members) == 2
    last_second = suggest_for_job(job, window[-1])
    over_window = suggest_for_job(job, window[-1], window=window)
    assert len(last_second.cpus) == 1  # the worker ran 3% of the last second: a floor of 5% leaves it out
    assert len(over_window.cpus) == 2
    assert any("1 main loop, 1 DataLoader worker" in r for r in over_window.reasons)


def test_a_worker_that_ran_at_all_needs_a_cpu():
    # The same worker, running 60 ms of each second and never queueing: under the 20% of a
    # busy thread, yet a worker that runs is part of the pipeline.
    every = frozenset(range(4))
    specs: list[Spec] = [
        (100, 1, "python3", True, True, False, [(100, 0, every, [(300, 400), (300, 400)])]),
        (101, 100, "pt_data_worker", True, True, False, [(101, 1, every, [(60, 0), (60, 0)])]),
        *spinners(200, 8, every, 100, 2, psr=2),
    ]
    window = snaps(machine(4), specs)
    job = job_of(window[-1], 100)
    assert job is not None
    assert len(suggest_for_job(job, window[-1], window=window).cpus) == 2


@settings(max_examples=60, deadline=None)
@given(
    n_cpus=st.integers(2, 16),
    demands=st.lists(st.tuples(st.integers(200, 1000), st.integers(0, 800)), min_size=1, max_size=12),
)
def test_never_fewer_cpus_than_busy_threads_where_the_domain_allows(n_cpus, demands):
    every = frozenset(range(n_cpus))
    threads = [
        (100 + i, i % n_cpus, every, [(run, min(wait, 1000 - run))] * 2) for i, (run, wait) in enumerate(demands)
    ]
    specs: list[Spec] = [(100, 1, "python3", True, True, False, threads), *spinners(500, n_cpus, every, 100, 2)]
    window = snaps(machine(n_cpus), specs)
    job = job_of(window[-1], 100)
    assert job is not None
    s = suggest_for_job(job, window[-1], window=window)
    assert len(s.cpus) >= min(len(demands), n_cpus)
    if len(demands) > n_cpus:
        assert any("needs" in w and "has only" in w for w in s.warnings)


# -- the text ------------------------------------------------------------------------------


def test_no_isolation_is_offered_when_the_suggestion_is_every_cpu():
    every = frozenset({0, 1})
    specs: list[Spec] = [
        (100, 1, "python3", True, True, False, [(100, 0, every, [(400, 500)] * 3), (102, 1, every, [(400, 500)] * 3)]),
        *spinners(200, 2, every, 500, 3),
    ]
    topology = machine(2)
    window = snaps(topology, specs)
    job = job_of(window[-1], 100)
    assert job is not None
    s = suggest_for_job(job, window[-1], window=window)
    assert s.cpus == every
    assert s.move_off == ()
    assert not any("--isolate" in w for w in s.warnings)
    assert any("nowhere to move them" in w for w in s.warnings)
    proposal = propose_pin(window[-1], 100, window=window)
    assert proposal is not None and proposal.move_off == ()
    findings, last, _ = diagnose_run(samples_of(specs), topology, {})
    text = findings_text(findings, last, 3)
    # Every thread already has every CPU and nothing can move off them: a pin would change
    # nothing, so none is offered, and the text says so.
    assert "no pin: every thread of the job already has CPUs 0-1" in text
    assert "affmon pin" not in text and "--isolate" not in text
    assert proposal.no_change is not None and "no placement change can help" in proposal.no_change


# -- neighbours ------------------------------------------------------------------------------


def job_on_cpu0_among_spinners(job_run_ms: int, job_wait_ms: int, spinners_n: int, spin_ms: int) -> list[Spec]:
    one = frozenset({0})
    return [
        (100, 1, "python3", True, True, True, [(100, 0, one, [(job_run_ms, job_wait_ms)] * 3)]),
        *spinners(200, spinners_n, one, spin_ms, 3),
        # A daemon at 6% on an otherwise quiet CPU, and a process whose rate is unknown.
        (300, 1, "daemon", False, False, False, [(300, 3, frozenset({3}), [(60, None)] * 3)]),
    ]


def test_spinners_sharing_a_saturated_cpu_are_contenders():
    # Six spinners share CPU 0 with the job's thread: 120 ms each, under the 20% floor.
    topology = machine(4, gpu=True)
    window = snaps(topology, job_on_cpu0_among_spinners(280, 700, 6, 120))
    found = {f.code: f for f in evaluate(window[-1], RuleInputs(topology))}
    assert "CONTENDED" in found
    named = {o["pid"] for o in found["CONTENDED"].evidence["others"]}
    assert named == set(range(200, 206))
    (job,) = [j for j in find_jobs(window[-1]) if j.pid == 100]
    movers = {o.pid for o in occupants(window[-1], job.pids)}
    assert movers == set(range(200, 206))  # the daemon on CPU 3 is no contender


def test_a_neighbour_whose_rate_is_unknown_is_not_a_contender():
    specs = job_on_cpu0_among_spinners(280, 700, 6, 120)
    specs.append((400, 1, "quiet", False, False, False, [(400, 0, frozenset({0}), [(0, None)] * 3)]))
    topology = machine(4, gpu=True)
    window = snaps(topology, specs)
    unknown = [s for s in window[-1].processes if s.sample.pid == 400]
    assert unknown  # rates from the counters, which moved by zero
    found = {f.code: f for f in evaluate(window[-1], RuleInputs(topology))}
    assert 400 not in {o["pid"] for o in found["CONTENDED"].evidence["others"]}


def test_one_thread_on_one_cpu_is_contended_not_a_narrow_mask():
    # The thread wanted 1.02 CPUs of its one-CPU mask (counters jitter): the spinners are the cause.
    topology = machine(4, gpu=True)
    window = snaps(topology, job_on_cpu0_among_spinners(300, 720, 6, 120))
    codes = {f.code for f in evaluate(window[-1], RuleInputs(topology))}
    assert "CONTENDED" in codes and "MASK_TOO_NARROW" not in codes


@settings(max_examples=60, deadline=None)
@given(n_cpus=st.integers(1, 4), jitter=st.integers(0, 200), extra=st.integers(0, 3))
def test_no_narrow_mask_while_busy_threads_do_not_outnumber_its_cpus(n_cpus, jitter, extra):
    mask = frozenset(range(n_cpus))
    threads = [(100 + i, i, mask, [(500, 500 + jitter)] * 2) for i in range(max(1, n_cpus - extra))]
    specs: list[Spec] = [(100, 1, "python3", True, True, True, threads)]
    topology = machine(4, gpu=True)
    window = snaps(topology, specs)
    assert "MASK_TOO_NARROW" not in {f.code for f in evaluate(window[-1], RuleInputs(topology))}


# -- a watched process that is not training --------------------------------------------------


def monitor_beside_a_rank() -> list[Spec]:
    """A rank on the GPU on CPUs 2-3, and a watched python monitor (no GPU, no torch) pinned
    to CPU 0 with three spinners there."""
    return [
        (100, 1, "python3", True, True, True, [(100, 2, frozenset({2, 3}), [(500, 0)] * 3)]),
        (150, 1, "glances", True, False, False, [(150, 0, frozenset({0}), [(250, 700)] * 3)]),
        *spinners(200, 3, frozenset({0}), 250, 3),
    ]


def test_a_monitor_gets_its_cpu_findings_but_is_no_rank():
    topology = machine(4, gpu=True)
    specs = monitor_beside_a_rank()
    window = snaps(topology, specs)
    jobs = {j.pid: j for j in find_jobs(window[-1])}
    assert set(jobs) == {100, 150}
    assert jobs[100].training and not jobs[150].training
    found = [f for f in evaluate(window[-1], RuleInputs(topology)) if f.pid == 150]
    assert {f.code for f in found} == {"STARVED", "CONTENDED"}
    assert not any("rank" in f.message or "training" in f.message for f in found)
    findings, last, _ = diagnose_run(samples_of(specs), topology, {})
    text = findings_text(findings, last, 3)
    assert text.splitlines()[0] == "watched 1 training job (1 process), and 1 other watched process over 3 intervals"
    rank = suggest_for_job(jobs[100], window[-1], window=window)
    assert not any("training process" in line and "150" in line for line in (*rank.reasons, *rank.warnings))


# -- candidate placements -------------------------------------------------------------------


def whole_cores(topology: Topology, cpus: frozenset[int], pool: frozenset[int]) -> bool:
    return all(core.cpus & pool <= cpus or not core.cpus & cpus for core in topology.cores)


def test_candidate_placements_obey_the_planners_rules_on_the_recordings():
    for name in ("hogs", "clean", "narrow", "single_core", "overlap", "ddp2_overlap"):
        topology, window = recording(name)
        for job in find_jobs(window[-1]):
            found = candidate_placements(job, window[-1], window=window)
            suggestion = suggest_for_job(job, window[-1], window=window)
            assert found and found[0].cpus == suggestion.cpus, name
            pool = topology.allowed_cpus & topology.online_cpus
            for p in found:
                assert p.cpus <= pool and whole_cores(topology, p.cpus, pool), (name, p)
                if p.isolate:
                    assert pool - p.cpus, (name, p)  # somewhere for the others to go
                if p.main_cpus is not None:
                    assert p.worker_cpus and not p.main_cpus & p.worker_cpus
                    assert p.main_cpus | p.worker_cpus == p.cpus
            assert len({p.description for p in found}) == len(found)
            sizes = {len(p.cpus) for p in found}
            if len(suggestion.cpus) < len(pool):
                assert max(sizes) > len(suggestion.cpus), name  # a wider one
            if len(suggestion.cpus) > 1:
                assert min(sizes) < len(suggestion.cpus), name  # a narrower one
    topology, window = recording("hogs")
    (job,) = find_jobs(window[-1])
    found = candidate_placements(job, window[-1], window=window)
    assert {p.isolate for p in found if p.cpus == found[0].cpus and p.main_cpus is None} == {True, False}
    assert any(p.main_cpus is not None for p in found)
