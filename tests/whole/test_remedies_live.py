"""Jobs whose cure is not a new core set, on real processes: too many threads, a confined
loop thread, a loop that loads its own data, a stalled pipeline. The pins run in a private
PID namespace with their own journal (``tests/helpers/remedy_pins.py``); the loop's cases read a
real process with the loop probe and judge it with a GPU busy share given by the test (the
CI machine has no GPU). Bounds leave room for a machine loaded by other work: where a
figure depends on the load, the assertion is on what the kernel measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from affmon.collect.loop import LoopSampler, LoopWatcher
from affmon.core.model.cpuset import parse_cpulist
from affmon.core.model.loop import CPU_WAIT, GPU_WAIT, OTHER, LoopBreakdown, breakdown
from affmon.core.rules.base import DEFAULT_THRESHOLDS
from affmon.core.rules.loop import evaluate_loop, verdict
from tests.helpers.live import spawned

HERE = Path(__file__).parent.parent
PINS = HERE / "helpers" / "remedy_pins.py"
WORKLOAD = HERE / "helpers" / "remedy_workload.py"


def scenario(mode: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, str(PINS), mode], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    found: dict[str, Any] = json.loads(out.stdout)
    return found


def by_code(findings: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f["code"]: f for f in findings}


# -- too many threads ------------------------------------------------------------------


def test_eight_parallel_threads_a_cpu_on_every_cpu_are_oversubscribed_and_no_pin_is_made() -> None:
    got = scenario("oversubscribed")
    cpus = got["cpus"]
    findings = by_code(got["diagnose"]["findings"])
    over = findings["OVERSUBSCRIBED"]
    assert over["evidence"]["cpus_available"] == len(cpus)
    assert over["evidence"]["busy_threads"] > len(cpus)
    assert over["evidence"]["wait_ratio"] >= DEFAULT_THRESHOLDS.starved_warn
    main = over["evidence"]["processes"][0]
    assert main["pid"] == got["info"]["pid"] and main["busy_threads"] > len(cpus)
    assert f"torch.set_num_threads({len(cpus)})" in over["remedy"]
    # Its mask is every CPU it may have: too narrow it is not, and no suggestion pins anything.
    assert "MASK_TOO_NARROW" not in findings
    for f in findings.values():
        if f["suggestion"] is not None:
            assert f["suggestion"]["no_change"], f
    pin = got["pin"]
    assert pin["status"] == 0 and pin["changed"] is False and "no placement change can help" in pin["no_change"]
    assert [r["code"] for r in pin["remedies"]] == ["OVERSUBSCRIBED"]
    assert got["before"] == got["after"] and got["journal_lines"] == 0


def test_a_mask_narrower_than_the_cpus_it_may_have_is_still_too_narrow() -> None:
    """The negative of the above: one CPU of two for three busy threads can be widened."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")  # the CI machine has two
    with spawned(WORKLOAD, "threads", "--count", "3") as info:
        os_tids = [int(t) for t in os.listdir(f"/proc/{info['pid']}/task")]
        for tid in os_tids:
            os.sched_setaffinity(tid, {cpus[0]})
        out = subprocess.run(
            [sys.executable, "-m", "affmon", "diagnose", "--json", "--pid", str(info["pid"]), "--interval", "0.7"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    findings = by_code(json.loads(out.stdout)["findings"])
    assert "MASK_TOO_NARROW" in findings, findings
    narrow = findings["MASK_TOO_NARROW"]
    assert narrow["evidence"]["mask"] == str(cpus[0]) and narrow["evidence"]["cpus_available"] == len(cpus)
    assert not narrow["suggestion"]["no_change"] and parse_cpulist(narrow["suggestion"]["cpus"]) != {cpus[0]}


# -- a confined loop thread ----------------------------------------------------------


def test_a_confined_main_loop_and_feeder_are_named_and_the_pin_gives_only_them_the_job_cpus() -> None:
    got = scenario("confined")
    cpu = got["cpus"][0]
    tids = got["info"]["tids"]
    confined = by_code(got["diagnose"]["findings"]).get("CONFINED_THREAD")
    assert confined is not None, got["diagnose"]
    named = {t["tid"]: t for t in confined["evidence"]["threads"]}
    # The kernel measured each of them waiting (the rule's threshold); both are held to one CPU.
    assert set(named) <= {tids["main"], tids["pin_memory"]} and named
    assert all(t["mask"] == str(cpu) and t["wait_ratio"] >= DEFAULT_THRESHOLDS.starved_warn for t in named.values())
    assert named.get(tids["main"], {"role": "main loop"})["role"] == "main loop"
    job_cpus = sorted(parse_cpulist(confined["evidence"]["job_cpus"]))
    assert job_cpus == got["cpus"]
    pin = got["pin"]
    assert pin["status"] == 0 and pin["ok"], pin
    before, after = got["before"], got["after"]
    reasons = " ".join(pin["suggestion"]["reasons"])
    if "may run on fewer CPUs than the rest of the job" in reasons:
        # The restore: the two confined threads get the job's CPUs, every other mask is as it was.
        assert pin["cpus"] == confined["evidence"]["job_cpus"]
        for tid, mask in before.items():
            if int(tid) in (tids["main"], tids["pin_memory"]):
                assert after[tid] == job_cpus
            elif tid in after:
                assert after[tid] == mask
    else:
        # The rest of the job queued too in pin's own samples (a loaded machine): the planner
        # sized the whole job, and the confined threads got its new set with the rest.
        assert after[str(tids["main"])] == sorted(parse_cpulist(pin["cpus"]))
    assert got["journal_lines"] >= 1


# -- the loop: its own data, or a stalled pipeline -------------------------------------


def watch(pid: int, seconds: float) -> Any:
    sampler = LoopSampler(pid)
    with LoopWatcher([sampler], rate_hz=40.0) as watcher:
        time.sleep(0.3)
        watcher.windows()  # the probe has found the loop: measure from here
        time.sleep(seconds)
        (window,) = watcher.windows()
    return window


def queued_most(b: LoopBreakdown) -> bool:
    """Whether the kernel kept the loop waiting for a CPU more than anything else (a machine
    loaded by other work): then the loop is CPU-starved, and that is the verdict to expect."""
    others = (b.input_share, b.step_share, *(share for state, share in b.shares.items() if state in (GPU_WAIT, OTHER)))
    return b.shares[CPU_WAIT] > max(others)


def test_a_loop_loading_its_own_data_is_input_bound_and_told_to_use_workers() -> None:
    with spawned(WORKLOAD, "own_data") as info:
        window = watch(info["pid"], 2.5)
    assert window.frames_unavailable is None, window.frames_unavailable
    assert window.frame_probes and window.data_probes is not None
    b = breakdown(window, gpu_busy=0.2)
    assert b is not None and b.loading is not None
    # Of the probes that found it running and read its stack, most were in the data loader's frames.
    assert window.data_probes >= 0.6 * window.frame_probes, window
    findings = evaluate_loop(b, window.workers)
    if queued_most(b):
        assert verdict(b) in ("cpu_starved", "mixed") and not findings, b
        return
    assert verdict(b) == "input_bound", b
    (found,) = findings
    assert found.code == "INPUT_BOUND" and found.evidence["advice"]["action"] == "use_workers"
    assert "the loop loads its own data on the main thread" in found.message
    workers = found.evidence["advice"]["workers"]
    assert found.remedy == f"load the data in DataLoader workers: DataLoader(num_workers={workers})"
    assert 1 <= workers <= max(1, len(os.sched_getaffinity(0)) - 2)  # the loop and its feeder keep a CPU each


def test_a_loop_whose_time_is_its_own_step_stays_loop_bound() -> None:
    with spawned(WORKLOAD, "step") as info:
        window = watch(info["pid"], 2.5)
    b = breakdown(window, gpu_busy=0.2)
    assert b is not None and window.frame_probes
    assert window.data_probes == 0
    if queued_most(b):
        assert verdict(b) in ("cpu_starved", "mixed") and not evaluate_loop(b, window.workers), b
        return
    assert verdict(b) == "loop_bound", b
    assert [f.code for f in evaluate_loop(b, window.workers)] == ["LOOP_BOUND"]


def test_a_loop_waiting_on_workers_that_all_sleep_is_stalled_with_where_they_sleep() -> None:
    with spawned(WORKLOAD, "stalled", "--workers", "3") as info:
        window = watch(info["pid"], 2.0)
    workers = window.workers
    assert workers is not None and workers.count == 3
    assert {w.pid for w in workers.waits} == set(info["workers"])
    assert all(w.state == "S" for w in workers.waits)
    b = breakdown(window, gpu_busy=0.0)
    assert b is not None
    for busy in (0.0, None):  # with the GPU idle, and without a GPU at all
        b = breakdown(window, gpu_busy=busy)
        assert b is not None
        findings = evaluate_loop(b, workers)
        assert [f.code for f in findings] == ["STALLED"], findings
        (stalled,) = findings
        places = " ".join(p["where"] for p in stalled.evidence["stalled"])
        assert "futex" in places, stalled.evidence
        assert "no CPU placement can help" in stalled.message and stalled.remedy


def test_a_loop_fed_by_busy_workers_is_not_stalled() -> None:
    """The negative: workers that run (``tests/helpers/loop_workload.py queue``: one batch every 50
    ms) are read as running, and their sleeping places are not even read."""
    with spawned(HERE / "helpers" / "loop_workload.py", "queue") as info:
        window = watch(info["pid"], 2.0)
    workers = window.workers
    assert workers is not None and workers.count == 1
    b = breakdown(window, gpu_busy=0.0)
    assert b is not None
    assert "STALLED" not in [f.code for f in evaluate_loop(b, workers)]


def test_a_loop_bound_finding_says_where_the_loop_ran_by_its_python_frames():
    """The step loop (``remedy_workload.py step``) spends its CPU time in ``spin``, called by
    ``step`` and ``own_loop``: LOOP_BOUND names that place with most of the probes."""
    with spawned(WORKLOAD, "step") as info:
        window = watch(info["pid"], 2.5)
    b = breakdown(window, gpu_busy=0.2)
    assert b is not None
    if queued_most(b):  # no LOOP_BOUND on a loaded machine: where it ran is still read
        assert window.top_frames and "spin (remedy_workload.py)" in window.top_frames[0][0], window.top_frames
        return
    (found,) = [f for f in evaluate_loop(b, window.workers, window=window) if f.code == "LOOP_BOUND"]
    where = found.evidence["where"]
    assert where and "spin (remedy_workload.py)" in where[0]["place"], where
    assert where[0]["share"] >= 0.5  # the loop is in spin most of its time; the rest in sleep's caller
