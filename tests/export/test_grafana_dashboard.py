"""The Grafana dashboard (contrib/grafana/affmon.json) as a Grafana user meets it, on a real
Prometheus (Debian's binary, as tests/run unpacks it) scraping:

* a planted process pinned to one CPU with three busy threads (a plain python script: a
  job, but not a training job), served by two exporters on two scrape jobs (``affmon``, and
  ``affmon-threads`` with ``--threads``, as docs/export.md advises), both relabelled to one
  ``instance``, the host's name;
* a recorded H200 training rank with its DataLoader workers and its GPU (an exporter fed
  the ``narrow`` recording, then its last sample for ever);
* a target that does not answer (a host whose exporter is down).

Every target of every panel is run with its variables substituted as Grafana substitutes
them (All, one host, one job; ``$__rate_interval`` 1m and 20s) and must return data; the
three table panels' transformations (``merge``, then ``organize``) are applied as Grafana
applies them, by a reimplementation of Grafana's merge transformer (``merge`` below: its
key is every field all frames share, rows merged where no value conflicts), and must give
one row per entity with every identity column filled. Node and Grafana's own
``@grafana/data`` are not used: the reimplementation is tested here against the cases
Grafana's documentation gives, and against the dashboard as it was, whose tables it
reproduces as the one-row-per-query tables a user saw.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from affmon.collect.sampler import Sampler, Selection
from affmon.core.model.samples import Sample
from affmon.export.catalogue import CATALOGUE
from affmon.sources.live import load_topology
from tests.helpers.export import DASHBOARD, dashboard_queries, metric_names, recorded, run, serving, wait_for
from tests.helpers.live import usable_cpus, workload
from tests.helpers.prom import api, free_port, query, running

Frame = list[dict[str, Any]]  # rows of one frame, field name -> value, fields in row-key order


# -- Grafana's side, reimplemented --------------------------------------------------------------


def prometheus_escape(value: str) -> str:
    """Grafana's ``prometheusSpecialRegexEscape`` for a value of a multi-value variable."""
    value = value.replace("\\", "\\\\\\\\")
    return re.sub(r"[$^*{}\[\]'+?.()|]", lambda m: "\\\\" + m[0], value)


def substitute(expr: str, variables: dict[str, list[str]], rate_interval: str) -> str:
    """``expr`` as Grafana sends it: ``$__rate_interval`` and each multi-value variable with
    ``allValue`` ``.*`` (``["$__all"]``: All), one value escaped, several as ``(a|b)``."""
    expr = expr.replace("$__rate_interval", rate_interval)

    def value(name: str) -> str:
        chosen = variables[name]
        if chosen == ["$__all"]:
            return ".*"
        escaped = [prometheus_escape(v) for v in chosen]
        return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"

    return re.sub(r"\$\{?(instance|job)\}?", lambda m: value(m[1]), expr)


def table_frame(result: list[dict[str, Any]], ref_id: str, several: bool) -> list[str] | None:
    """Field names of the frame Grafana's Prometheus data source makes of an instant query of
    format table: ``Time``, every label any series has (sorted), ``Value #<refId>`` where the
    panel has several queries. None for an empty result (a frame without fields)."""
    if not result:
        return None
    labels = sorted(set().union(*(r["metric"] for r in result)))
    return ["Time", *labels, f"Value #{ref_id}" if several else "Value"]


def frame_rows(result: list[dict[str, Any]], fields: list[str], at: float) -> Frame:
    rows = []
    for r in result:
        row: dict[str, Any] = {"Time": at}
        for f in fields[1:-1]:
            row[f] = r["metric"].get(f, "")
        row[fields[-1]] = float(r["value"][1])
        rows.append(row)
    return rows


def merge(frames: list[tuple[list[str], Frame]]) -> tuple[list[str], Frame]:
    """Grafana's ``merge`` transformer (``mergeTransformer``): the key is every field name
    present in all frames (read while walking the last frame's fields); rows are taken frame
    by frame; a row whose key was seen is merged into every earlier row of that key it does
    not contradict (a field both hold with different values, the earlier one not null),
    else added as a row of its own. Frames without fields are left out."""
    data = [(fields, rows) for fields, rows in frames if fields]
    names: list[str] = []
    present: dict[str, set[int]] = {}
    key_names: list[str] = []
    for i, (fields, _) in enumerate(data):
        for name in fields:
            if name not in names:
                names.append(name)
            present.setdefault(name, set()).add(i)
            if i == len(data) - 1 and len(present[name]) == len(data):
                key_names.append(name)
    if not data or not key_names:
        return names, [row for _, rows in data for row in rows]
    by_key: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    order: list[tuple[tuple[Any, ...], int]] = []
    for _, rows in data:
        for row in rows:
            key = tuple(row[name] for name in key_names)
            if key not in by_key:
                by_key[key] = [dict(row)]
                order.append((key, 0))
                continue
            merged = False
            for n, existing in enumerate(by_key[key]):
                if all(existing.get(f) is None or existing[f] == v for f, v in row.items()):
                    by_key[key][n] = {**existing, **row}
                    merged = True
            if not merged:
                by_key[key].append(dict(row))
                order.append((key, len(by_key[key]) - 1))
    return names, [{name: by_key[k][n].get(name) for name in names} for k, n in order]


def organize(fields: list[str], rows: Frame, options: dict[str, Any]) -> tuple[list[str], Frame]:
    """Grafana's ``organize``: fields excluded by name, then renamed."""
    excluded = {k for k, v in options.get("excludeByName", {}).items() if v}
    renamed = options.get("renameByName", {})
    kept = [f for f in fields if f not in excluded]
    return [renamed.get(f, f) for f in kept], [{renamed.get(f, f): row[f] for f in kept} for row in rows]


def test_merge_as_grafana_documents_it():
    """The two cases of Grafana's documentation of ``merge``: rows of frames with the same
    fields are appended; frames sharing some fields are joined on them, a row without a
    partner kept with empty cells."""
    fields = ["Time", "Job", "Uptime"]
    a = [{"Time": 1, "Job": "node", "Uptime": 25260122}, {"Time": 1, "Job": "postgre", "Uptime": 123001233}]
    b = [{"Time": 2, "Job": "node", "Uptime": 55}]
    assert merge([(fields, a), (fields, b)])[1] == [*a, *b]
    left = (
        ["Time", "Job", "Value #A"],
        [{"Time": 1, "Job": "node", "Value #A": 1}, {"Time": 1, "Job": "x", "Value #A": 2}],
    )
    right = (["Time", "Job", "Value #B"], [{"Time": 1, "Job": "node", "Value #B": 3}])
    names, rows = merge([left, right])
    assert names == ["Time", "Job", "Value #A", "Value #B"]
    assert rows == [
        {"Time": 1, "Job": "node", "Value #A": 1, "Value #B": 3},
        {"Time": 1, "Job": "x", "Value #A": 2, "Value #B": None},
    ]
    # A field every frame has but whose values differ per frame (``__name__``) joins nothing.
    a_named = (["Time", "__name__", "pid", "Value #A"], [{"Time": 1, "__name__": "m_a", "pid": "1", "Value #A": 1}])
    b_named = (["Time", "__name__", "pid", "Value #B"], [{"Time": 1, "__name__": "m_b", "pid": "1", "Value #B": 2}])
    assert len(merge([a_named, b_named])[1]) == 2


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    def walk(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for p in items:
            yield p
            yield from walk(p.get("panels", []))

    yield from walk(board["panels"])


def table(base: str, panel: dict[str, Any], variables: dict[str, list[str]], at: float) -> tuple[list[str], Frame]:
    """A table panel as Grafana shows it: each target run at ``at``, made a frame, then the
    panel's transformations."""
    several = len(panel["targets"]) > 1
    frames = []
    for t in panel["targets"]:
        result = instant(base, substitute(t["expr"], variables, "1m"), at)
        fields = table_frame(result, t["refId"], several)
        frames.append((fields or [], frame_rows(result, fields, at) if fields else []))
    fields, rows = frames[0] if len(frames) == 1 else ([], [])
    for step in panel.get("transformations", []):
        if step["id"] == "merge":
            fields, rows = merge(frames)
        elif step["id"] == "organize":
            fields, rows = organize(fields, rows, step["options"])
        else:
            raise AssertionError(f"no reimplementation of Grafana's {step['id']} transformation")
    return fields, rows


# -- the Prometheus side ----------------------------------------------------------------------


def instant(base: str, promql: str, at: float) -> list[dict[str, Any]]:
    answer = api(base, "/api/v1/query", query=promql, time=f"{at:.3f}")
    assert answer["status"] == "success", (promql, answer)
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


@contextmanager
def prometheus(tmp: Path, jobs: dict[str, list[tuple[str, str]]]) -> Iterator[str]:
    """A Prometheus scraping every second each job's (target, instance) pairs, ``instance``
    relabelled to the name given, as docs/export.md advises; yields its base URL."""
    lines = ["global:", "  scrape_interval: 1s", "  scrape_timeout: 1s", "scrape_configs:"]
    for job, targets in jobs.items():
        lines += [f"  - job_name: {job}", "    static_configs:"]
        lines += [f"      - targets: ['{target}']\n        labels: {{host: {host}}}" for target, host in targets]
        lines += [
            "    relabel_configs:",
            "      - {source_labels: [host], target_label: instance}",
            "      - {regex: host, action: labeldrop}",
        ]
    with running(tmp, "\n".join(lines) + "\n") as server:
        yield server.base


def replay(samples: list[Sample]) -> Callable[[], Sample]:
    """A sampler that gives the recorded samples one by one, then the last for ever (which
    closes no interval: the exporter keeps serving the last one's state)."""
    it = iter(samples)
    last = [samples[0]]

    def sample() -> Sample:
        last[0] = next(it, last[0])
        return last[0]

    return sample


def address(url: str) -> str:
    return url.removeprefix("http://").removesuffix("/metrics")


LIVE, GPU_NODE, DEAD = "live-node", "gpu-node", "dead-node"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("fleet")
    cpu = usable_cpus()[0]
    topo, samples = recorded("narrow")
    with ExitStack() as running:
        w = running.enter_context(workload("--cpus", str(cpu), "--busy", "3"))
        pid = w["pid"]
        live = Sampler("/", Selection(pids=(pid,), others=True))
        threads = Sampler("/", Selection(pids=(pid,), others=True))
        _, plain_url = running.enter_context(serving(live.sample, load_topology(), interval_s=0.5))
        _, threads_url = running.enter_context(serving(threads.sample, load_topology(), interval_s=0.5, threads=True))
        _, gpu_url = running.enter_context(serving(replay(samples), topo, interval_s=0.2))
        jobs = {
            "affmon": [(address(plain_url), LIVE), (address(gpu_url), GPU_NODE), (f"127.0.0.1:{free_port()}", DEAD)],
            "affmon-threads": [(address(threads_url), LIVE)],
        }
        base = running.enter_context(prometheus(tmp, jobs))
        wait_for(
            lambda: (
                query(base, f'affmon_finding_info{{instance="{LIVE}", pid="{pid}", code="STARVED"}}')
                and query(base, f'rate(affmon_gpu_pcie_rx_bytes_total{{instance="{GPU_NODE}"}}[20s])')
                and len(query(base, f'rate(affmon_thread_cpu_seconds_total{{instance="{LIVE}", pid="{pid}"}}[20s])'))
                >= 4
                and query(base, f'affmon_process_threads{{job="affmon", instance="{LIVE}", pid="{pid}"}}')
            ),
            60,
            "Prometheus to scrape the planted job's findings, the threads and the recorded GPU's traffic",
        )
        time.sleep(3)  # a few more scrapes for every rate()
        root = next(p.sample.pid for p in _training(topo, samples))
        yield {"base": base, "pid": str(pid), "threads": w["busy"], "gpu_root": str(root), "at": time.time()}


def _training(topo: Any, samples: list[Sample]) -> Iterator[Any]:
    state = run(*samples, topo=topo)
    assert state.snapshot is not None
    for p in state.snapshot.processes:
        if p.sample.watched and p.sample.pid in state.training_jobs:
            yield p


BOARD = json.loads(DASHBOARD.read_text())
ALL = {"instance": ["$__all"], "job": ["$__all"]}


def variable_sets(fleet: dict[str, Any]) -> list[dict[str, list[str]]]:
    return [
        ALL,
        {"instance": [LIVE], "job": ["$__all"]},
        {"instance": [LIVE, GPU_NODE], "job": [fleet["pid"]]},
        {"instance": ["$__all"], "job": [fleet["gpu_root"]]},
    ]


def test_every_panel_target_returns_data_with_grafanas_substitutions(fleet):
    base, at = fleet["base"], fleet["at"]
    checked = 0
    for panel in panels(BOARD):
        for target in panel.get("targets", []):
            for rate_interval in ("1m", "20s"):
                promql = substitute(target["expr"], ALL, rate_interval)
                assert "$" not in promql, promql
                result = instant(base, promql, at)
                assert result, f"{panel['title']} {target['refId']}: no data for {promql}"
                checked += 1
            for variables in variable_sets(fleet)[1:]:
                instant(base, substitute(target["expr"], variables, "1m"), at)  # valid with every choice
    assert checked >= 2 * 40
    for var in BOARD["templating"]["list"]:
        name = re.fullmatch(r"label_values\((.*), (\w+)\)", substitute(var["definition"], ALL, "1m"))
        assert name, var["definition"]
        values = {r["metric"].get(name[2]) for r in instant(base, name[1], at)}
        assert values - {None}, var["name"]
        if var["name"] == "instance":
            assert {LIVE, GPU_NODE, DEAD} <= values  # a host that is down stays selectable


def stat(base: str, at: float, title: str, variables: dict[str, list[str]] = ALL) -> float:
    (panel,) = [p for p in panels(BOARD) if p["title"] == title]
    (target,) = panel["targets"]
    (series,) = instant(base, substitute(target["expr"], variables, "1m"), at)
    return float(series["value"][1])


def color(title: str, value: float) -> str:
    """The colour a stat panel's thresholds give ``value``."""
    (panel,) = [p for p in panels(BOARD) if p["title"] == title]
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    return str([s["color"] for s in steps if s["value"] is None or value >= s["value"]][-1])


def test_the_health_row_counts_each_thing_once_and_shows_a_host_down_in_red(fleet):
    base, at = fleet["base"], fleet["at"]
    assert stat(base, at, "Hosts exporting") == 2  # live-node (two scrape jobs) and gpu-node
    assert stat(base, at, "Hosts down") == 1 and color("Hosts down", 1) == "red"
    assert color("Hosts down", 0) == "green"
    # One training job: the recorded rank on its GPU. The planted python script is a job
    # affmon watches, but not a training job.
    assert stat(base, at, "Training jobs watched") == 1
    assert stat(base, at, "Training jobs watched", {"instance": [LIVE], "job": ["$__all"]}) == 0
    # The planted job's STARVED and MASK_TOO_NARROW, served by two scrape jobs, count once each.
    # A finding is one (process, code, GPU): on a loaded machine another process of the
    # planted job may be starved too, and counts as one more.
    live_bad = {
        (r["metric"].get("pid"), r["metric"]["code"], r["metric"].get("gpu"))
        for r in instant(base, f'affmon_finding_info{{instance="{LIVE}", severity="bad"}}', at)
        if r["metric"]["job"] == "affmon"
    }
    assert {"STARVED", "MASK_TOO_NARROW"} <= {code for _, code, _ in live_bad}
    assert stat(base, at, "Bad findings", {"instance": [LIVE], "job": ["$__all"]}) == len(live_bad)
    # The recorded GPU's link: counted only as the PCIE_DEGRADED finding, which it has not.
    degraded = instant(base, 'affmon_finding_info{code="PCIE_DEGRADED"}', at)
    assert stat(base, at, "GPU links degraded") == len(degraded) == 0
    assert stat(base, at, "Exporters stuck") == 0


def test_the_central_panel_joins_across_two_scrape_jobs(fleet):
    """The per-job wait ratio, with the planted job served by two scrape jobs under one
    instance: no many-to-many error, one series per job, the planted job starved."""
    base, at = fleet["base"], fleet["at"]
    (panel,) = [p for p in panels(BOARD) if p["title"] == "Run-queue wait ratio per job"]
    result = instant(base, substitute(panel["targets"][0]["expr"], ALL, "20s"), at)
    ratios = {(r["metric"]["instance"], r["metric"]["job_pid"]): float(r["value"][1]) for r in result}
    assert len(ratios) == len(result)
    assert ratios[(LIVE, fleet["pid"])] > 0.4


def entities(base: str, at: float, promql: str, keys: tuple[str, ...]) -> set[tuple[str, ...]]:
    return {tuple(r["metric"].get(k, "") for k in keys) for r in instant(base, promql, at)}


@pytest.mark.parametrize("variables", ["all", "one job"])
def test_the_tables_show_one_row_per_entity(fleet, variables):
    base, at = fleet["base"], fleet["at"]
    chosen = ALL if variables == "all" else {"instance": ["$__all"], "job": [fleet["pid"]]}
    job = ".*" if variables == "all" else fleet["pid"]
    cases = {
        "Processes now": (
            entities(base, at, f'affmon_process_info{{job_pid=~"{job}"}}', ("instance", "pid")),
            ("instance", "pid", "name", "user", "job pid", "training job"),
        ),
        "PCIe links now": (
            entities(base, at, "affmon_gpu_info", ("instance", "gpu")),
            ("instance", "gpu", "model", "gen", "max gen", "width", "max width", "memory"),
        ),
        "Where threads last ran": (
            entities(
                base,
                at,
                f'affmon_thread_info and on (instance, pid) affmon_process_info{{job_pid=~"{job}"}}',
                ("instance", "pid", "tid"),
            ),
            ("instance", "pid", "tid", "thread", "last CPU", "CPUs in mask", "CPUs used"),
        ),
        "Active findings": (
            entities(base, at, f'affmon_finding_info{{pid=~"{job}"}}', ("instance", "pid", "code", "gpu")),
            ("instance", "job pid", "code", "severity"),
        ),
    }
    for title, (expected, filled) in cases.items():
        (panel,) = [p for p in panels(BOARD) if p["title"] == title]
        fields, rows = table(base, panel, chosen, at)
        assert expected, title
        assert len(rows) == len(expected), (title, fields, rows)
        for row in rows:
            assert all(row.get(f) not in (None, "") for f in filled), (title, row)
        assert not {"__name__", "Time", "job"} & set(fields), (title, fields)
    if variables == "one job":
        (panel,) = [p for p in panels(BOARD) if p["title"] == "Processes now"]
        assert {row["pid"] for row in table(base, panel, chosen, at)[1]} == {fleet["pid"]}


def test_the_tables_as_they_were_gave_one_row_per_query(fleet):
    """The reimplementation reproduces what a user saw with the earlier queries (plain
    selectors, ``__name__`` in every frame): nothing merges."""
    base, at = fleet["base"], fleet["at"]
    earlier = {
        "targets": [
            {"refId": r, "expr": e}
            for r, e in zip(
                "ABC",
                [
                    'affmon_gpu_info{instance=~"$instance"}',
                    "affmon_gpu_pcie_link_generation",
                    "affmon_gpu_memory_total_bytes",
                ],
                strict=True,
            )
        ],
        "transformations": [{"id": "merge", "options": {}}],
    }
    _, rows = table(base, earlier, ALL, at)
    gpus = entities(base, at, "affmon_gpu_info", ("instance", "gpu"))
    assert len(rows) == 3 * len(gpus)


def test_every_query_names_only_what_the_exporter_serves_and_units_are_set():
    served = {s.name for s in CATALOGUE}
    for q in dashboard_queries():
        assert metric_names(q) <= served, q
        own = re.findall(r"(?<![a-z_])process_[a-z_]+(\{[^}]*\})?", q)
        assert own == [] or set(own) <= set(re.findall(r"\{job=~\"affmon\.\*\"[^}]*\}", q)), q
        assert set(re.findall(r"(?<![a-z_])process_[a-z_]+", q)) <= served, q
    for panel in panels(BOARD):
        if panel["type"] in ("stat", "timeseries"):
            assert panel["fieldConfig"]["defaults"].get("unit") not in (None, ""), panel["title"]
        if panel["type"] == "timeseries" and "/s" in panel["title"]:
            assert panel["fieldConfig"]["defaults"]["unit"] != "none", panel["title"]


def test_the_datasource_is_an_import_input():
    assert [i["name"] for i in BOARD["__inputs"]] == ["DS_PROMETHEUS"]
    text = DASHBOARD.read_text()
    assert "${datasource}" not in text
    uids = {p["datasource"]["uid"] for p in panels(BOARD) if p["type"] != "row"}
    assert uids == {"${DS_PROMETHEUS}"}
    pairs = list(itertools.chain.from_iterable(p.get("targets", []) for p in panels(BOARD)))
    assert all(t["datasource"]["uid"] == "${DS_PROMETHEUS}" for t in pairs)
