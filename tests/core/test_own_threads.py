"""OVERSUBSCRIBED and CONFINED_THREAD, raised and not raised, on synthetic samples built from
schedstat-like counters (run and run-queue wait per interval) and on the H200 recordings;
the pin affmon offers for each (none that changes nothing, the job's CPUs for a confined
thread); the thread budget; the loop's own loading and STALLED on made windows."""

from __future__ import annotations

import pytest

from affmon.commands.diagnose import diagnose_run, findings_text
from affmon.core.model.cpuset import format_cpulist
from affmon.core.model.loop import DATA_WAIT, LoopWindow, TaskWait, WorkerStats, breakdown, describe
from affmon.core.plan.advice import NOTHING_TO_PLACE, attach_suggestions, job_of, propose_pin, suggest_for_job
from affmon.core.recording.loop import window_from_json, window_to_json
from affmon.core.rules.base import RuleInputs
from affmon.core.rules.evaluate import evaluate, reconciled
from affmon.core.rules.loop import evaluate_loop, suggested_workers, verdict
from affmon.core.rules.threads import thread_budget
from tests.helpers.sizing import Spec, machine, recording, samples_of, snaps

ALL2 = frozenset({0, 1})
CPU0 = frozenset({0})


def codes_of(specs: list[Spec], n: int = 2) -> dict[str, object]:
    topology = machine(n)
    window = snaps(topology, specs)
    return {f.code: f for f in evaluate(window[-1], RuleInputs(topology))}


# -- OVERSUBSCRIBED -------------------------------------------------------------------


def busy_threads(count: int, mask: frozenset[int], run_ms: int, wait_ms: int) -> list:
    return [(100 + i, i % len(mask), mask, [(run_ms, wait_ms)] * 3) for i in range(count)]


def test_eight_busy_threads_on_every_cpu_of_two_are_oversubscribed_with_a_budget():
    specs: list[Spec] = [(100, 1, "python3", True, True, False, busy_threads(8, ALL2, 250, 750))]
    found = codes_of(specs)
    over = found["OVERSUBSCRIBED"]
    assert over.evidence["busy_threads"] == 8 and over.evidence["cpus_available"] == 2
    assert over.evidence["wait_ratio"] == 0.75
    assert "torch.set_num_threads(2)" in over.remedy and "it runs 8 busy threads" in over.remedy
    assert "MASK_TOO_NARROW" not in found  # its mask is every CPU it may have


def test_two_busy_threads_on_two_cpus_are_not_oversubscribed():
    specs: list[Spec] = [(100, 1, "python3", True, True, False, busy_threads(2, ALL2, 900, 100))]
    assert "OVERSUBSCRIBED" not in codes_of(specs)


def test_many_threads_that_do_not_queue_are_not_oversubscribed():
    """Eight threads that each want a quarter of a CPU fit two CPUs: no wait, no finding."""
    specs: list[Spec] = [(100, 1, "python3", True, True, False, busy_threads(8, ALL2, 220, 0))]
    assert "OVERSUBSCRIBED" not in codes_of(specs)


def test_a_narrow_mask_is_too_narrow_and_oversubscribed_only_beyond_every_cpu():
    """Three busy threads on CPU 0 of two: wider is possible (MASK_TOO_NARROW); even both
    CPUs are fewer than three threads wanting one each (OVERSUBSCRIBED too)."""
    specs: list[Spec] = [(100, 1, "python3", True, True, False, busy_threads(3, CPU0, 333, 667))]
    found = codes_of(specs)
    assert "MASK_TOO_NARROW" in found and "OVERSUBSCRIBED" in found
    specs = [(100, 1, "python3", True, True, False, busy_threads(2, CPU0, 500, 500))]
    found = codes_of(specs)
    assert "MASK_TOO_NARROW" in found and "OVERSUBSCRIBED" not in found


def test_workers_over_budget_are_named_and_told_one_thread_each():
    specs: list[Spec] = [
        (100, 1, "python3", True, True, False, busy_threads(1, ALL2, 300, 700)),
        (200, 100, "python3", True, True, False, [(200 + i, 0, ALL2, [(150, 850)] * 3) for i in range(4)]),
        (300, 100, "python3", True, True, False, [(300 + i, 1, ALL2, [(150, 850)] * 3) for i in range(4)]),
    ]
    over = codes_of(specs)["OVERSUBSCRIBED"]
    assert "one thread in each DataLoader worker" in over.remedy and "2 of them run up to 4 busy threads" in over.remedy
    assert over.evidence["budget"] == {"cpus": 2, "main_threads": 1, "worker_threads": 1, "workers": 1}
    assert "at most 1 DataLoader worker on 2 CPUs" in over.remedy  # one worker, said as one


def test_the_thread_budget_leaves_the_loop_a_cpu():
    assert thread_budget(16, 6) == thread_budget(16, 6)
    b = thread_budget(16, 6)
    assert (b.workers, b.worker_threads, b.main_threads) == (6, 1, 10)
    b = thread_budget(4, 8)
    assert (b.workers, b.main_threads) == (3, 1)
    assert thread_budget(1, 0).main_threads == 1


def test_no_pin_changes_nothing_on_an_oversubscribed_job():
    specs: list[Spec] = [(100, 1, "python3", True, True, False, busy_threads(8, ALL2, 250, 750))]
    topology = machine(2)
    window = snaps(topology, specs)
    proposal = propose_pin(window[-1], 100, window=window)
    assert proposal is not None and proposal.no_change is not None
    assert "already has CPUs 0-1" in proposal.no_change
    findings, last, _ = diagnose_run(samples_of(specs), topology, {})
    text = findings_text(findings, last, 3)
    assert "what to change: fewer threads, not other CPUs" in text
    assert "affmon pin" not in text and "no pin: every thread of the job already has CPUs 0-1" in text


# -- CONFINED_THREAD --------------------------------------------------------------------


def confined_job(main_wait: int) -> list[Spec]:
    """A main loop and a feeder held to CPU 0 (each wanting it: they queue), a helper thread
    and a worker wide and mostly idle."""
    return [
        (
            100,
            1,
            "python3",
            True,
            True,
            False,
            [
                (100, 0, CPU0, [(600, main_wait)] * 3),
                (101, 0, CPU0, [(400, main_wait)] * 3),
                (102, 1, ALL2, [(10, 0)] * 3),
            ],
        ),
        (200, 100, "python3", True, True, False, [(200, 1, ALL2, [(100, 0)] * 3)]),
    ]


def test_a_main_loop_and_feeder_narrower_than_their_job_and_waiting_are_confined():
    found = codes_of(confined_job(400))
    confined = found["CONFINED_THREAD"]
    assert {t["tid"] for t in confined.evidence["threads"]} == {100, 101}
    assert confined.evidence["job_cpus"] == "0-1"
    assert [t["role"] for t in confined.evidence["threads"]] == ["main loop", "thread of the main process"]
    assert "MASK_TOO_NARROW" not in found  # the narrow mask is the threads', not the job's


def test_a_thread_narrower_than_its_job_that_does_not_wait_is_not_confined():
    assert "CONFINED_THREAD" not in codes_of(confined_job(0))


def test_the_suggestion_for_confined_threads_is_the_job_cpus_and_the_pin_says_what_it_changed():
    specs = confined_job(400)
    topology = machine(2)
    window = snaps(topology, specs)
    job = job_of(window[-1], 100)
    assert job is not None
    s = suggest_for_job(job, window[-1], window=window)
    assert s.cpus == ALL2 and s.move_off == ()
    assert "100 (main loop, on 0)" in s.reasons[0]
    proposal = propose_pin(window[-1], 100, window=window)
    assert proposal is not None and proposal.no_change is None
    found = attach_suggestions(evaluate(window[-1], RuleInputs(topology)), window[-1], window=window)
    confined = next(f for f in found if f.code == "CONFINED_THREAD")
    assert confined.suggestion is not None and confined.suggestion["cpus"] == format_cpulist(ALL2)
    assert confined.suggestion["no_change"] is None


def test_a_job_with_no_placement_finding_is_offered_no_pin():
    """A busy thread alone on its CPU, nothing else there: no finding a core set cures."""
    specs: list[Spec] = [(100, 1, "python3", True, True, False, [(100, 0, CPU0, [(950, 0)] * 3)])]
    topology = machine(2)
    window = snaps(topology, specs)
    proposal = propose_pin(window[-1], 100, window=window)
    assert proposal is not None and proposal.no_change == NOTHING_TO_PLACE


@pytest.mark.parametrize("name", ["clean", "pinned", "hogs", "narrow", "single_core", "overlap"])
def test_the_h200_recordings_raise_neither(name):
    """None of the recorded placements has more busy threads than the H200's 16 CPUs, nor a
    thread narrower than its job: neither finding is raised there."""
    topology, window = recording(name)
    for snap in window:
        assert not {f.code for f in evaluate(snap, RuleInputs(topology))} & {"OVERSUBSCRIBED", "CONFINED_THREAD"}


# -- the loop: its own loading, a stalled pipeline ----------------------------------------


def loop_window(**kwargs: object) -> LoopWindow:
    base: dict[str, object] = {
        "pid": 100,
        "tid": 100,
        "seconds": 1.0,
        "run_ns": 900_000_000,
        "wait_ns": 0,
        "probes": {"running": 18, DATA_WAIT: 0, "other": 2},
        "workers": WorkerStats(0, 0, 0, 16, 14.0),
    }
    base.update(kwargs)
    return LoopWindow(**base)  # type: ignore[arg-type]


def test_cpu_time_in_data_frames_is_input_not_the_step():
    w = loop_window(frame_probes=18, data_probes=15)
    b = breakdown(w, gpu_busy=0.2)
    assert b is not None and b.loading == pytest.approx(0.9 * 15 / 18)
    assert verdict(b) == "input_bound"
    (found,) = evaluate_loop(b, w.workers)
    assert found.code == "INPUT_BOUND" and found.evidence["advice"]["action"] == "use_workers"
    assert found.remedy == f"load the data in DataLoader workers: DataLoader(num_workers={suggested_workers(0.75, 16)})"
    assert "(loading data 75%)" in describe(b)


def test_cpu_time_outside_data_frames_is_the_step():
    w = loop_window(frame_probes=18, data_probes=1)
    b = breakdown(w, gpu_busy=0.2)
    assert b is not None and verdict(b) == "loop_bound"
    assert [f.code for f in evaluate_loop(b, w.workers)] == ["LOOP_BOUND"]


def test_without_frames_and_without_workers_loop_bound_names_both_remedies():
    w = loop_window()
    b = breakdown(w, gpu_busy=0.2)
    assert b is not None and b.loading is None
    (found,) = evaluate_loop(b, w.workers)
    assert found.code == "LOOP_BOUND" and "DataLoader(num_workers=N)" in found.message


def test_suggested_workers_keep_up_with_the_step_and_fit_the_cpus():
    assert suggested_workers(0.75, 16) == 5  # 1.5 x 0.75 / 0.25 = 4.5
    assert suggested_workers(0.5, 16) == 2
    assert suggested_workers(0.95, 4) == 2  # the loop and its feeder keep a CPU each
    assert suggested_workers(0.9, 2) == 1


SLEEPING = (TaskWait(200, 200, "S", "futex_wait_queue", "futex"), TaskWait(201, 201, "D", "nfs_wait_bit", "read"))


def stalled_window(run_ns: int = 1_000_000, worker_run_ns: int = 0) -> LoopWindow:
    return loop_window(
        run_ns=run_ns,
        probes={DATA_WAIT: 20},
        workers=WorkerStats(2, worker_run_ns, 0, 16, 15.0, SLEEPING),
    )


def test_a_loop_waiting_on_sleeping_workers_is_stalled_with_where_they_sleep():
    w = stalled_window()
    for busy in (0.0, None):
        b = breakdown(w, gpu_busy=busy)
        assert b is not None
        (found,) = evaluate_loop(b, w.workers)
        assert found.code == "STALLED"
        places = {p["where"] for p in found.evidence["stalled"]}
        assert places == {"futex_wait_queue (futex)", "nfs_wait_bit (read), uninterruptible"}


@pytest.mark.parametrize(
    ("run_ns", "worker_run_ns", "busy"),
    [
        (50_000_000, 0, 0.0),  # the loop works on batches: slow, not stalled
        (1_000_000, 200_000_000, 0.0),  # the workers run
        (1_000_000, 0, 0.8),  # the GPU is busy
    ],
)
def test_not_stalled_when_anything_moves(run_ns, worker_run_ns, busy):
    w = stalled_window(run_ns, worker_run_ns)
    b = breakdown(w, gpu_busy=busy)
    assert b is not None
    assert "STALLED" not in [f.code for f in evaluate_loop(b, w.workers)]


def test_the_new_window_fields_survive_a_recording():
    w = loop_window(frame_probes=18, data_probes=15, frames_unavailable=None, workers=stalled_window().workers)
    again = window_from_json(window_to_json(w), 100)
    assert again == w
    w = loop_window(frames_unavailable="Python 3.14: not read")
    assert window_from_json(window_to_json(w), 100) == w


def test_input_bound_under_its_own_threads_says_so_instead_of_asking_for_workers():
    specs: list[Spec] = [(100, 1, "python3", True, True, False, busy_threads(8, ALL2, 250, 750))]
    topology = machine(2)
    window = snaps(topology, specs)
    found = evaluate(window[-1], RuleInputs(topology))
    w = loop_window(
        probes={DATA_WAIT: 20}, run_ns=50_000_000, workers=WorkerStats(2, 1_500_000_000, 900_000_000, 2, 0.0)
    )
    b = breakdown(w, gpu_busy=0.1)
    assert b is not None
    loop = evaluate_loop(b, w.workers)
    assert [f.code for f in loop] == ["INPUT_BOUND"] and loop[0].evidence["advice"]["action"] == "more_cpus"
    merged = reconciled(found + loop)
    (input_bound,) = [f for f in merged if f.code == "INPUT_BOUND"]
    assert input_bound.evidence["advice"] == {"action": "thread_budget"}
    assert "OVERSUBSCRIBED" in input_bound.message and input_bound.remedy is None
