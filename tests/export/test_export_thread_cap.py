"""``--threads`` is bounded: per-thread series for at most ``--max-threads`` threads, the
busiest first, and a gauge that says how many were left out; the body grows linearly with
the threads served and stops growing at the cap."""

from __future__ import annotations

import subprocess
import sys
import time

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from affmon.export import MAX_THREADS
from affmon.export.catalogue import CATALOGUE
from affmon.export.collector import StateCollector
from affmon.export.families import families
from affmon.export.render import Renderer
from affmon.export.state import ExportState
from bench.attacks.export_flood import affmon_export, exporter, many_threads, scrape
from tests.helpers.export import parsed, process, run, sample, thread

THREAD_FAMILIES = [s.name for s in CATALOGUE if s.per_thread and "pid" in s.labels]
LEFT_OUT = "affmon_export_threads_left_out"


def busy_state(*cpu_ms_per_process: list[int], first_tid: int = 100_000) -> ExportState:
    """Two samples a second apart; thread ``i`` of a process ran ``cpu_ms[i]`` ms and waited
    as long in between. TIDs count up from ``first_tid`` (their width is the same at any N)."""
    tid = first_tid
    before, after = [], []
    for n, cpu_ms in enumerate(cpu_ms_per_process):
        pid = 10 + n
        tids = list(range(tid, tid + len(cpu_ms)))
        tid += len(cpu_ms)
        before.append(process(pid, *(thread(t, 1000, 1000) for t in tids)))
        after.append(process(pid, *(thread(t, 1000 + ms, 1000 + ms) for t, ms in zip(tids, cpu_ms, strict=True))))
    return run(sample(0, *before), sample(1, *after))


def thread_series(state: ExportState, max_threads: int) -> dict[str, list[tuple[str, ...]]]:
    return {
        f.name: [labels for labels, _ in f.series]
        for f in families(state, threads=True, max_threads=max_threads)
        if f.name in THREAD_FAMILIES
    }


def left_out(state: ExportState, max_threads: int) -> float:
    (family,) = [f for f in families(state, threads=True, max_threads=max_threads) if f.name == LEFT_OUT]
    ((_, value),) = family.series
    return value


def text(state: ExportState, max_threads: int) -> str:
    registry = CollectorRegistry()
    registry.register(StateCollector(lambda: state, threads=True, max_threads=max_threads))
    return generate_latest(registry).decode()


def test_a_process_with_more_threads_than_the_cap_serves_the_busiest_and_counts_the_rest():
    state = busy_state(list(range(50)))  # thread 100000 + i ran i ms
    served = thread_series(state, max_threads=10)
    assert set(served) == set(THREAD_FAMILIES)
    busiest = {str(100_000 + i) for i in range(40, 50)}
    for name, labels in served.items():
        assert {labels_[1] for labels_ in labels} == busiest, name
    assert left_out(state, max_threads=10) == 40


def test_the_cap_holds_in_the_exposition_prometheus_reads():
    state = busy_state(list(range(300)), list(range(300)))
    got = parsed(text(state, max_threads=25))
    assert len(got["affmon_thread_cpu_seconds_total"][1]) == 25
    assert len(got["affmon_thread_last_cpu"][1]) == 25
    (left,) = got[LEFT_OUT][1]
    assert left.value == 575


def test_under_the_cap_every_thread_is_served_and_none_left_out():
    state = busy_state([5, 1, 3])
    assert len(thread_series(state, max_threads=3)["affmon_thread_cpu_seconds_total"]) == 3
    assert left_out(state, max_threads=3) == 0


def test_the_left_out_gauge_is_served_only_with_threads():
    state = busy_state([5, 1, 3])
    assert LEFT_OUT not in {f.name for f in families(state)}


def test_the_default_cap_bounds_a_process_of_many_threads():
    state = busy_state([1] * (MAX_THREADS + 500))
    assert len(thread_series(state, MAX_THREADS)["affmon_thread_cpu_seconds_total"]) == MAX_THREADS
    assert left_out(state, MAX_THREADS) == 500
    by_default = {f.name: f for f in families(state, threads=True)}  # no max_threads given: MAX_THREADS
    assert len(by_default["affmon_thread_cpu_seconds_total"].series) == MAX_THREADS


def test_the_server_renders_with_the_cap():
    state = busy_state(list(range(40)))
    made = Renderer(lambda: state, threads=True, max_threads=7).rendering(
        {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics"}
    )
    got = parsed(made.body.decode())
    assert len(got["affmon_thread_wait_ratio"][1]) == 7
    assert got[LEFT_OUT][1][0].value == 33


@settings(max_examples=40, deadline=None)
@given(
    processes=st.lists(st.lists(st.integers(0, 20), max_size=30), min_size=1, max_size=3),
    cap=st.integers(1, 100),
)
def test_any_state_serves_at_most_the_cap_and_never_a_less_busy_thread_than_one_left_out(processes, cap):
    state = busy_state(*processes)
    served = thread_series(state, cap)
    busy = {str(100_000 + i): ms for i, ms in enumerate(ms for p in processes for ms in p)}
    total = len(busy)
    cpu = {labels_[1] for labels_ in served["affmon_thread_cpu_seconds_total"]}
    assert len(cpu) == min(cap, total)
    for name, labels in served.items():
        assert len(labels) <= cap, name
        assert {labels_[1] for labels_ in labels} <= cpu, name
    assert left_out(state, cap) == total - len(cpu)
    if cpu and len(cpu) < total:
        assert min(busy[t] for t in cpu) >= max(busy[t] for t in set(busy) - cpu)


# -- growth: the body is linear in the threads served, flat past the cap ----------------------


def body_bytes(threads: int, max_threads: int) -> int:
    return len(text(busy_state([7] * threads), max_threads))


def test_the_body_grows_linearly_below_the_cap_and_not_at_all_above_it():
    """Body size is the deterministic proxy for formatting cost (prometheus-client formats
    each series once): 4x the threads, at most 4x the bytes (plus a little for the longer
    numbers), and past the cap the same size whatever the count."""
    n = 250
    small, large = body_bytes(n, max_threads=10 * n), body_bytes(4 * n, max_threads=10 * n)
    assert 3 * small < large <= 4.2 * small, (small, large)
    capped = body_bytes(4 * n, max_threads=n), body_bytes(16 * n, max_threads=n)
    assert abs(capped[1] - capped[0]) <= 0.01 * capped[0], capped
    assert capped[0] <= 1.05 * small, (capped, small)


def test_max_threads_must_be_a_positive_count():
    for bad in ("0", "-3", "many"):
        out = subprocess.run(
            [sys.executable, "-m", "affmon", "export", "--threads", "--max-threads", bad],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 2, out.stderr
        lines = out.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("affmon: ") and "--max-threads" in lines[0], out.stderr
        assert "Traceback" not in out.stderr


def test_the_command_serves_at_most_max_threads_of_a_live_process():
    """``affmon export --threads --max-threads 5`` on a live process of 41 threads: 5 served,
    36 counted as left out, in what a Prometheus-like scrape reads."""
    with many_threads(40) as pid, exporter([*affmon_export(pid, interval_s=0.3), "--max-threads", "5"]) as ex:
        deadline = time.monotonic() + 60
        got: dict[str, tuple[str, list]] = {}
        while not got.get("affmon_thread_cpu_seconds_total", ("", []))[1]:  # rates from the second sample
            assert time.monotonic() < deadline, "no per-thread series within 60 s"
            time.sleep(0.3)
            _, body = scrape(ex.url, timeout_s=10)
            got = parsed(body) if body else {}
        assert len(got["affmon_thread_cpu_seconds_total"][1]) == 5
        assert {s.labels["pid"] for s in got["affmon_thread_cpu_seconds_total"][1]} == {str(pid)}
        assert got[LEFT_OUT][1][0].value == 36
