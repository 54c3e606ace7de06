"""`affmon export`: the pure state and families on hand-made samples and on a recorded H200
job, the HTTP endpoint on a spawned process with a known mask (parsed with
prometheus-client's own parser), a scrape while the sampler hangs, the command line's
errors, and the Grafana dashboard against what the exporter serves."""

from __future__ import annotations

import argparse
import json
import os
import pwd
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from affmon.collect.sampler import Sampler, Selection
from affmon.commands.export import listen_address
from affmon.core.model.samples import GpuSample, PcieLink, Sample
from affmon.export import catalogue as m
from affmon.export.catalogue import CATALOGUE
from affmon.export.families import Family, families
from affmon.export.service import Exporter
from affmon.export.state import ExportState, step
from affmon.sources.live import load_topology
from tests.helpers.export import (
    DASHBOARD,
    DOCS,
    REPO,
    affmon,
    dashboard_queries,
    exposition,
    fetch,
    metric_names,
    one_line_error,
    parsed,
    process,
    recorded,
    run,
    sample,
    series,
    serving,
    thread,
    topology,
    wait_for,
)
from tests.helpers.live import usable_cpus, workload

SPECS = {s.name: s for s in CATALOGUE}


# -- hand-made samples --------------------------------------------------------------------


def gpu(*, rx_rate=None, rx_total=None, lost=False) -> GpuSample:
    return GpuSample(
        index=0,
        name="NVIDIA H200",
        pci_bus_id="0000:3b:00.0",
        uuid="GPU-1",
        util_percent=None if lost else 40,
        mem_util_percent=None,
        mem_used_bytes=None if lost else 1 << 30,
        mem_total_bytes=None if lost else 141 << 30,
        pcie_tx_bytes_total=None,
        pcie_rx_bytes_total=rx_total,
        pcie_tx_window_bytes_per_s=None,
        pcie_rx_window_bytes_per_s=rx_rate,
        pcie_link=PcieLink(4, 16, 5, 16),
        power_w=None,
        sm_clock_mhz=None,
        mem_clock_mhz=None,
        processes=(),
        lost=lost,
    )


def labelled(fam: Family, **labels: str) -> list[float]:
    index = {name: i for i, name in enumerate(fam.spec.labels)}
    return [v for values, v in fam.series if all(values[index[k]] == want for k, want in labels.items())]


# -- counters: integrated, monotonic, dropped with the process ------------------------------


def test_process_counters_never_fall_when_a_thread_exits():
    s1 = sample(0, process(10, thread(10, 100, 10), thread(11, 50, 5, invol=3)))
    s2 = sample(1, process(10, thread(10, 130, 20), thread(11, 90, 9, invol=7)))
    # thread 11 exits; thread 12 is born in the interval: its whole count is new
    s3 = sample(2, process(10, thread(10, 160, 30), thread(12, 5, 1, invol=2)))
    assert series(run(s1, s2), "affmon_process_cpu_seconds_total") == {("10",): pytest.approx(0.220)}
    state = run(s1, s2, s3)  # 150 ms when first seen, +30 +40, then +30 +5: the live threads' sum would be 165
    assert series(state, "affmon_process_cpu_seconds_total") == {("10",): pytest.approx(0.255)}
    assert series(state, "affmon_process_run_queue_wait_seconds_total") == {("10",): pytest.approx(0.040)}
    assert series(state, "affmon_process_involuntary_switches_total") == {("10",): 9}  # 3, +4, +2


def test_a_reused_pid_starts_its_own_counters():
    old = process(10, thread(10, 900))
    new = process(10, thread(10, 7), start=555)  # same pid, another start time
    state = run(sample(0, old), sample(1, old), sample(2, new))
    assert series(state, "affmon_process_cpu_seconds_total") == {("10",): pytest.approx(0.007)}
    assert set(state.totals.processes) == {(10, 555)}


def test_a_thread_id_reused_by_a_new_thread_counts_from_zero():
    s0 = sample(0, process(10, thread(10, 100), thread(11, 400)))
    s1 = sample(1, process(10, thread(10, 100), thread(11, 500)))  # counters start here: 600 ms
    s2 = sample(2, process(10, thread(10, 100), thread(11, 20, start=9)))  # 11 exited, a new 11 ran 20 ms
    assert series(run(s0, s1, s2), "affmon_process_cpu_seconds_total") == {("10",): pytest.approx(0.620)}


def test_exited_processes_leave_no_series_and_no_findings():
    def tick(t: int) -> Sample:  # 10 runs 0.3 s and waits 0.6 s a second; 20 runs 0.2 s elsewhere
        return sample(t, process(10, thread(10, 300 * t, 600 * t)), process(20, thread(20, 200 * t)))

    state = run(*map(tick, range(3)))
    assert {(f.code, f.pid) for f in state.findings} >= {("STARVED", 10)}
    # the tracker alone would hold STARVED for clear_after intervals after the process went
    assert [f for f in state.tracker.update([]).active if f.pid == 10]
    gone = step(state, sample(3, tick(3).processes[1]), topology())
    assert [f for f in gone.findings if f.pid == 10] == [] and [k for k in gone.tracker.tracks if k[1] == 10] == []
    for family in families(gone, threads=True):
        if "pid" in family.spec.labels:
            assert labelled(family, pid="10") == [], family.name
    assert set(gone.totals.processes) == {(20, 100)}
    assert series(gone, "affmon_process_threads") == {("20",): 1}


def test_unknown_counters_give_no_series_rather_than_zero():
    p = process(10, thread(10, 100, mig=None))
    state = run(sample(0, p), sample(1, p))
    assert series(state, "affmon_process_migrations_total") == {}
    assert series(state, "affmon_process_cpu_seconds_total") != {}
    assert series(state, "affmon_process_wait_ratio") == {}  # neither ran nor waited: no ratio


def test_no_rates_before_the_second_sample():
    state = run(sample(0, process(10, thread(10, 100))))
    assert state.snapshot is None and state.samples_total == 1
    exporter_own = ("affmon_export_", "affmon_build_info", "process_")
    assert all(not f.series for f in families(state) if not f.name.startswith(exporter_own))
    assert series(state, "affmon_export_samples_total") == {(): 1}


# -- PCIe: 32-bit counters through window rates, 64-bit ones exact ---------------------------


def test_pcie_window_rates_are_integrated_into_a_counter():
    samples = [sample(2 * t, gpus=(gpu(rx_rate=rate),)) for t, rate in enumerate([999.0, 1000.0, 500.0])]
    assert series(run(*samples[:2]), "affmon_gpu_pcie_rx_bytes_total") == {("0", ""): 2000.0}
    assert series(run(*samples), "affmon_gpu_pcie_rx_bytes_total") == {("0", ""): 3000.0}
    assert series(run(*samples), "affmon_gpu_pcie_tx_bytes_total") == {}  # never known


def test_pcie_64_bit_totals_are_exact_and_a_lost_gpu_keeps_its_counter():
    totals = [10_000, 10_500, 11_000]
    samples = [sample(t, gpus=(gpu(rx_rate=1e9, rx_total=n),)) for t, n in enumerate(totals)]
    state = run(*samples)
    assert series(state, "affmon_gpu_pcie_rx_bytes_total") == {("0", ""): 11_000.0}
    lost = step(state, sample(3, gpus=(gpu(lost=True),)), topology())
    assert series(lost, "affmon_gpu_pcie_rx_bytes_total") == {("0", ""): 11_000.0}
    assert series(lost, "affmon_gpu_utilization_ratio") == {}


# -- families and the catalogue -------------------------------------------------------------


def test_per_thread_series_only_when_asked():
    p = process(10, thread(10, 100, 10), thread(11, 100, 10))
    state = run(sample(0, p), sample(1, p))
    plain = {f.name for f in families(state)}
    assert not [n for n in plain if n.startswith("affmon_thread_")]
    with_threads = {f.name: f for f in families(state, threads=True)}
    assert [v for v, _ in with_threads["affmon_thread_cpu_seconds_total"].series] == [
        ("10", "10"),
        ("10", "11"),
    ]
    assert dict(with_threads["affmon_thread_numa_node"].series)[("10", "11")] == 1  # CPU 2


def test_catalogue_names_units_and_labels():
    names = [s.name for s in CATALOGUE]
    assert len(names) == len(set(names))
    for s in CATALOGUE:
        assert re.fullmatch(r"affmon_[a-z0-9_]+", s.name) or s in m.SELF, s.name
        assert s.name.endswith("_total") == (s.kind == "counter"), s.name
        # labels the scrape itself sets would be renamed exported_* by Prometheus
        assert not {"job", "instance"} & set(s.labels), s.name
        assert len(set(s.labels)) == len(s.labels)
    for unit in ("seconds", "bytes", "ratio"):
        assert any(unit in n for n in names)
    for required in (
        "affmon_process_cpu_seconds_total",
        "affmon_process_run_queue_wait_seconds_total",
        "affmon_process_voluntary_switches_total",
        "affmon_process_involuntary_switches_total",
        "affmon_process_migrations_total",
        "affmon_process_wait_ratio",
        "affmon_process_threads",
        "affmon_process_mask_cpus",
        "affmon_process_numa_nodes_run_on",
        "affmon_finding_info",
        "affmon_gpu_utilization_ratio",
        "affmon_gpu_memory_used_bytes",
        "affmon_gpu_memory_total_bytes",
        "affmon_gpu_pcie_rx_bytes_total",
        "affmon_gpu_pcie_tx_bytes_total",
    ):
        assert required in names


def test_docs_describe_every_metric():
    text = DOCS.read_text()
    missing = [s.name for s in CATALOGUE if f"`{s.name}`" not in text]
    assert missing == []


def test_the_pure_part_imports_no_system_http_or_nvml_module():
    forbidden = ("prometheus_client", "psutil", "pynvml", "textual", "affmon.collect", "affmon.nvml", "affmon.commands")
    code = (
        "import sys\nimport affmon.export.catalogue, affmon.export.state, affmon.export.families, affmon.export.scale\n"
        f"print(','.join(sorted(m for m in sys.modules if m.startswith({forbidden!r}))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# -- a recorded H200 job (narrow mask): the same findings as diagnose, GPU series ---------------


@pytest.fixture(scope="module")
def narrow_state() -> ExportState:
    topo, samples = recorded("narrow")
    return run(*samples, topo=topo)


def test_recorded_job_findings_are_those_of_diagnose(narrow_state):
    from affmon.commands.diagnose import diagnose_run

    topo, samples = recorded("narrow")
    expected, _last, _ = diagnose_run(samples, topo, {})
    assert [(f.code, f.pid, f.severity) for f in narrow_state.findings] == [
        (f.code, f.pid, f.severity) for f in expected
    ]
    got = parsed(exposition(narrow_state))
    rows = {(s.labels["code"], s.labels["severity"], s.labels["gpu"]) for s in got["affmon_finding_info"][1]}
    assert ("GPU_STARVED", "bad", "0") in rows and ("MASK_TOO_NARROW", "bad", "") in rows


def test_the_exporter_runs_the_tick_the_monitor_runs():
    """One path through the rates and the rules: after the same samples the exporter holds
    the tick, its interval is the monitor's, and its sample count is the tick's. A sample
    that closes no interval (a replay starting again) moves the tick on and leaves the
    interval shown as it was."""
    from tests.helpers.recordings import load, monitor

    header, samples = load("hogs")
    mon = monitor("hogs")
    views = [v for v in map(mon.feed, samples) if v is not None]
    state = run(*samples, topo=header.topology)
    assert state.tick is not None and state.tick.snapshot is state.snapshot
    assert state.snapshot == views[-1].snapshot and state.findings == views[-1].findings
    assert state.samples_total == mon.samples_seen == len(samples)
    assert state.last_sample is samples[-1] and state.tracker is state.tick.tracker
    again = step(state, samples[0], header.topology)
    assert again.tick is not None and again.tick.snapshot is None and again.last_sample is samples[0]
    assert again.snapshot is state.snapshot and again.findings == state.findings and again.loops is state.loops
    assert again.totals is state.totals and again.samples_total == len(samples) + 1


# Families from what the narrow recording was made without (context, numa_maps, the loop
# probe); test_context_memory_and_loop_families covers them.
NEWER_THAN_NARROW = {m.PROCESS_CONTEXT_INFO, m.PROCESS_MEMORY, m.LOOP_SHARE, m.LOOP_GPU_BUSY}
# The exporter's own process_* series: read by the running exporter's sampling thread.
READ_WHEN_SERVING = set(m.SELF)
# Served only when the state is a recording's (affmon export --replay; tests/export/test_export_replay.py).
ONLY_REPLAYING = {m.EXPORT_REPLAY_ENDED, m.EXPORT_REPLAY_RESTARTS}


def test_recorded_job_as_exposition_types_labels_and_gpu(narrow_state):
    got = parsed(exposition(narrow_state, threads=True))
    for spec in CATALOGUE:
        if spec in NEWER_THAN_NARROW | READ_WHEN_SERVING | ONLY_REPLAYING:
            assert spec.name not in got, spec.name
            continue
        assert spec.name in got, f"{spec.name}: no series"
        kind, samples = got[spec.name]
        assert kind == spec.kind, spec.name
        assert all(set(s.labels) == set(spec.labels) for s in samples), spec.name
    (util,) = got["affmon_gpu_utilization_ratio"][1]
    assert util.labels == {"gpu": "0", "numa_node": ""} and util.value == pytest.approx(0.09)
    (rx,) = got["affmon_gpu_pcie_rx_bytes_total"][1]
    assert rx.value > 1e8  # 32-bit counters on the H200: integrated from the 20 ms windows
    job = {s.labels["pid"]: s.labels for s in got["affmon_process_info"][1]}
    root = next(p for p, labels in job.items() if labels["gpu"] == "0")
    assert job[root]["job_pid"] == root and len(job) == 5
    assert {labels["job_pid"] for labels in job.values()} == {root}  # the DataLoader workers belong to the rank


# -- live: a spawned process with a known mask, over HTTP --------------------------------------


def codes(exporter: Exporter) -> set[str]:
    return {f.code for f in exporter.state.findings}


def test_metrics_of_a_process_pinned_to_one_cpu_with_three_busy_threads():
    cpu = usable_cpus()[0]
    topo = load_topology()
    with ExitStack() as running:
        job = ExitStack()
        running.callback(job.close)
        w = job.enter_context(workload("--cpus", str(cpu), "--busy", "3"))
        pid = str(w["pid"])
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        sampler = Sampler("/", Selection(pids=(w["pid"],), others=True))
        exporter, url = running.enter_context(serving(sampler.sample, topo, interval_s=0.3, threads=True))
        wait_for(lambda: {"STARVED", "MASK_TOO_NARROW"} <= codes(exporter), 15, "STARVED and MASK_TOO_NARROW")
        got = parsed(fetch(url))

        for spec in CATALOGUE:
            assert got.get(spec.name, (spec.kind, []))[0] == spec.kind, spec.name

        def one(name: str) -> float:
            (s,) = [s for s in got[name][1] if s.labels.get("pid") == pid]
            assert set(s.labels) == set(SPECS[name].labels), name
            return float(s.value)

        assert one("affmon_process_mask_cpus") == 1
        assert one("affmon_process_threads") == 4  # main + 3 busy
        assert one("affmon_process_numa_nodes_run_on") == 1
        assert one("affmon_process_wait_ratio") > 0.4  # three threads share one CPU
        assert one("affmon_process_cpu_seconds_total") > 0.05
        assert one("affmon_process_run_queue_wait_seconds_total") > 0.05
        assert one("affmon_process_involuntary_switches_total") > 0
        (info,) = [s.labels for s in got["affmon_process_info"][1] if s.labels["pid"] == pid]
        user = pwd.getpwuid(os.getuid()).pw_name
        assert info == {
            "pid": pid,
            "name": comm,
            "user": user,
            "job_pid": pid,
            "training": "false",  # a plain python script on no GPU is not a training job
            "gpu": "",
            "gpu_numa_node": "",
        }
        findings = {(s.labels["code"], s.labels["severity"]): s.labels for s in got["affmon_finding_info"][1]}
        for code in ("STARVED", "MASK_TOO_NARROW"):
            assert findings[(code, "bad")] == {"code": code, "severity": "bad", "pid": pid, "gpu": ""}
        tids = {s.labels["tid"]: s.value for s in got["affmon_thread_last_cpu"][1] if s.labels["pid"] == pid}
        assert set(tids) == {pid, *map(str, w["busy"])} and set(tids.values()) == {cpu}
        busy_ratios = [s.value for s in got["affmon_thread_wait_ratio"][1] if s.labels["tid"] in map(str, w["busy"])]
        assert len(busy_ratios) == 3 and min(busy_ratios) > 0.3

        job.close()  # the process exits: its series go with the next sample
        wait_for(lambda: exporter.state.snapshot and not exporter.state.snapshot.process(int(pid)), 5, "exit seen")
        after = fetch(url)
    assert f'pid="{pid}"' not in after
    assert "affmon_export_samples_total" in after


def test_a_scrape_never_waits_for_the_sampler():
    """The third sample hangs (a GPU that stopped answering); scrapes go on serving the last state."""
    calls, hanging, release = [0], threading.Event(), threading.Event()
    p = process(10, thread(10, 100, 10))

    def slow_sample() -> Sample:
        calls[0] += 1
        if calls[0] >= 3:
            hanging.set()
            release.wait(20)
        return sample(calls[0], p)

    with serving(slow_sample, topology(), interval_s=0.05) as (_, url):
        try:
            assert hanging.wait(5), "the sampler never reached the hanging sample"
            started = time.monotonic()
            text = fetch(url, timeout_s=2)
            assert time.monotonic() - started < 1.0
            assert 'affmon_process_threads{pid="10"} 1.0' in text
            assert "affmon_export_samples_total 2.0" in text
        finally:
            release.set()


def test_a_failing_sample_is_counted_and_the_last_state_stays():
    p = process(10, thread(10, 100, 10))
    results: list[Sample | Exception] = [sample(0, p), sample(1, p), OSError("boom")]

    def flaky() -> Sample:
        item = results.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    exporter = Exporter(flaky, topology())
    for _ in range(3):
        exporter.tick()
    assert exporter.state.errors_total == 1 and exporter.state.samples_total == 2
    assert series(exporter.state, "affmon_process_threads") == {("10",): 1}


# -- the command line ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "listen",
    [
        "127.0.0.1",
        "127.0.0.1:99999",
        "127.0.0.1:http",
        "127.0.0.1:",
        "300.1.1.1:9808",
        "::1:9808",
        "[::zz]:9808",
        "a_b:80",
    ],
)
def test_a_bad_listen_value_is_one_line_and_exit_2(listen):
    assert "--listen" in one_line_error(affmon("export", "--listen", listen))


def test_a_port_in_use_is_one_line_and_exit_2():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        err = one_line_error(affmon("export", "--listen", f"127.0.0.1:{port}", "--interval", "0.2"))
    assert f"127.0.0.1:{port}" in err and "in use" in err


def test_a_pid_that_does_not_exist_is_one_line_and_exit_2():
    assert "no such process" in one_line_error(affmon("export", "--pid", "99999999", "--listen", "127.0.0.1:0"))


def test_listen_addresses_that_parse():
    assert listen_address("127.0.0.1:9808") == ("127.0.0.1", 9808)
    assert listen_address("[::1]:0") == ("::1", 0)
    assert listen_address(":9808") == ("0.0.0.0", 9808)
    assert listen_address("node-7.cluster:9808") == ("node-7.cluster", 9808)
    with pytest.raises(argparse.ArgumentTypeError):
        listen_address("9808")


def test_the_command_serves_on_loopback_and_stops_on_sigterm():
    proc = subprocess.Popen(
        [sys.executable, "-m", "affmon", "export", "--listen", "127.0.0.1:0", "--interval", "0.2"],
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert proc.stderr is not None
        ready, _, _ = select.select([proc.stderr], [], [], 20)
        line = proc.stderr.readline() if ready else ""
        match = re.search(r"serving http://127\.0\.0\.1:(\d+)/metrics", line)
        assert match, line
        url = f"http://127.0.0.1:{match[1]}/metrics"
        samples = re.compile(r"^affmon_export_samples_total (\S+)$", re.MULTILINE)
        wait_for(lambda: float(samples.findall(fetch(url))[0]) >= 2, 10, "two samples")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- the dashboard --------------------------------------------------------------------------


def test_every_metric_the_dashboard_queries_is_served(narrow_state):
    queries = dashboard_queries()
    assert len(queries) >= 20
    used = set().union(*map(metric_names, queries))
    served = set(parsed(exposition(narrow_state, threads=True)))
    assert used and used - served == set()
    # and the dashboard shows the core of the issue: wait ratio, findings, GPU use against PCIe
    for name in ("affmon_process_run_queue_wait_seconds_total", "affmon_finding_info", "affmon_gpu_utilization_ratio"):
        assert name in used
    assert any("affmon_gpu_utilization_ratio" in q or "affmon_gpu_pcie_rx_bytes_total" in q for q in queries)


def test_the_dashboard_check_catches_a_metric_that_does_not_exist(narrow_state):
    served = set(parsed(exposition(narrow_state, threads=True)))
    assert metric_names('rate(affmon_process_cpu_seconds[5m]) + affmon_gpu_util{gpu="0"}') - served == {
        "affmon_process_cpu_seconds",  # the family name without _total is not what is served
        "affmon_gpu_util",
    }


def test_dashboard_is_grafana_json():
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] and board["schemaVersion"] >= 36
    ids: list[int] = []

    def panels(items: list[dict]) -> Iterator[dict]:
        for p in items:
            yield p
            yield from panels(p.get("panels", []))

    for p in panels(board["panels"]):
        ids.append(p["id"])
        assert set(p["gridPos"]) == {"x", "y", "w", "h"} and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
            assert p["targets"] and all(t["expr"] for t in p["targets"])
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in board["templating"]["list"]}
    assert {"instance", "job"} <= variables


def test_context_memory_and_loop_families(narrow_state):
    """A rank with a Slurm context, numa_maps and a probed loop: one context series with
    bounded labels, one memory series per node, five shares summing to 1."""
    from dataclasses import replace

    from affmon.core.model.context import Context
    from affmon.core.model.loop import LoopBreakdown
    from affmon.core.model.samples import NodeMemory
    from affmon.core.rules.loop_report import LoopReport

    snap = narrow_state.snapshot
    target = next(p for p in snap.processes if p.sample.watched and p.sample.training)
    sample = replace(
        target.sample,
        context=Context(scheduler="slurm", slurm_job_id="4242", slurm_step="0", local_rank=1, numa_binding="node"),
        memory=NodeMemory({0: 3 << 30, 1: 1 << 20}, {0: 3 << 30}, mappings=9),
    )
    processes = tuple(replace(p, sample=sample) if p is target else p for p in snap.processes)
    shares = {"on_cpu": 0.1, "cpu_wait": 0.05, "data_wait": 0.6, "gpu_wait": 0.2, "other": 0.05}
    breakdown = LoopBreakdown(sample.pid, sample.pid, 1.0, shares, 0.34, True, 0.0, 20)
    report = LoopReport(sample.pid, sample.name, None, breakdown, "input", "", None)  # type: ignore[arg-type]
    state = replace(narrow_state, snapshot=replace(snap, processes=processes), loops={sample.pid: report})
    got = parsed(exposition(state))
    (context,) = got["affmon_process_context_info"][1]
    assert context.labels == {
        "pid": str(sample.pid),
        "scheduler": "slurm",
        "slurm_job": "4242.0",
        "pod_uid": "",
        "local_rank": "1",
        "numa_binding": "node",
    }
    memory = {s.labels["numa_node"]: s.value for s in got["affmon_process_memory_bytes"][1]}
    assert memory == {"0": float(3 << 30), "1": float(1 << 20)}
    loop = {s.labels["share"]: s.value for s in got["affmon_loop_share_ratio"][1]}
    assert loop == shares and sum(loop.values()) == pytest.approx(1.0)
    (busy,) = got["affmon_loop_gpu_busy_ratio"][1]
    assert busy.value == pytest.approx(0.34)
