"""What ``affmon fleet`` costs Prometheus, at 5 and at 200 instances, and the recorded
answers its model's tests read.

``python -m bench.fleet_queries --instances 5,200`` builds, for each count, a TSDB block of
that many synthetic instances (each a copy of one of the five recorded nodes that
tests/export/test_export_fleet.py replays, the copies taking turns; an hour of samples every 15 s,
written as OpenMetrics and turned into a block by ``promtool tsdb create-blocks-from
openmetrics``), starts a Prometheus on it (tests/helpers/prom.py, 127.0.0.1), and times affmon
fleet's refresh at the block's last instant: the queries each panel sends (always one) and
the seconds each took, the median of ``--rounds``. The series copied are read from the real
fleet first: five ``affmon export --replay`` exporters scraped by a real Prometheus.

``python -m bench.fleet_queries --record tests/fixtures/fleet`` writes what that real fleet's
Prometheus answered to the fleet's queries (and the raw series beside them, which the tests
check the model against): with every exporter up, then with one killed and its last
scrape failed.

Needs the Prometheus that tests/run unpacks into .cache/prometheus/.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from affmon.fleet.client import PrometheusClient  # noqa: E402
from affmon.fleet.queries import Queries  # noqa: E402
from affmon.fleet.source import fetch, fetch_node  # noqa: E402
from tests.helpers.prom import FLEET, KILLED, binary, replaying_exporters, running, scrape_config, shared_port  # noqa: E402

SCRAPE_S = 15
HOUR_S = 3600


def wait(what: Any, timeout_s: float, message: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(0.2)
    raise SystemExit(f"waited {timeout_s:.0f} s for {message}")


@contextmanager
def real_fleet(tmp: Path) -> Iterator[tuple[str, int, dict[str, subprocess.Popen[str]]]]:
    """The five replaying exporters and a Prometheus scraping them every second, once every
    recording's findings are served (two scrapes on, so the findings' ages are not zero)."""
    port = shared_port(FLEET)
    config = scrape_config({"affmon": [f"{a}:{port}" for a in FLEET]})
    with replaying_exporters(FLEET, port) as procs, running(tmp, config) as server:
        client = PrometheusClient(server.base)
        wait(lambda: len(client.query('up{job="affmon"} == 1')) == len(FLEET), 60, "every exporter scraped")
        hogs = f'affmon_finding_info{{instance="127.0.0.3:{port}"}}'
        wait(lambda: client.query(hogs), 90, "the hogs recording's findings")
        time.sleep(5)
        yield server.base, port, procs


def record(target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, real_fleet(Path(tmp)) as (base, port, procs):
        client, queries = PrometheusClient(base), Queries()

        def snapshot(name: str) -> None:
            answers, _ = fetch(client, queries, window_s=120.0)
            raw = {
                "affmon_finding_info": client.query("affmon_finding_info", answers.at),
                "affmon_process_info": client.query("affmon_process_info", answers.at),
                "up": client.query("up", answers.at),
            }
            nodes = {}
            for address in FLEET:
                instance = f"{address}:{port}"
                nodes[instance] = fetch_node(client, queries, instance, answers.at)[1]
            data = {
                "recordings": {f"{a}:{port}": r for a, r in FLEET.items()},
                "answers": answers.to_json(),
                "node_answers": nodes,
                "raw": raw,
            }
            (target / f"{name}.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
            print(f"wrote {target / f'{name}.json'}")

        snapshot("five")
        procs[KILLED].kill()
        wait(lambda: client.query(f'up{{instance="{KILLED}:{port}"}} == 0'), 30, "the killed exporter's failed scrape")
        snapshot("one_killed")


def exposition_of(base: str, instance: str) -> list[dict[str, Any]]:
    """Every series Prometheus holds of ``instance`` now (its exporter's and ``up``)."""
    client = PrometheusClient(base)
    return client.query(f'{{instance="{instance}"}}')


def openmetrics(copies: list[list[dict[str, Any]]], instances: int, end: int) -> str:
    """``instances`` synthetic nodes, node i a copy of ``copies[i % len(copies)]``: an hour of
    samples every 15 s, counters (``_total``) rising at their recorded value per hour."""
    lines: list[str] = []
    samples = range(end - HOUR_S, end + 1, SCRAPE_S)
    by_metric: dict[str, list[tuple[str, float]]] = {}
    for i in range(instances):
        for series in copies[i % len(copies)]:
            labels = dict(series["metric"])
            name = labels.pop("__name__")
            labels["instance"] = f"node-{i:03d}:9808"
            labels["job"] = "affmon"
            text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            by_metric.setdefault(name, []).append((text, float(series["value"][1])))
    for name, series_list in sorted(by_metric.items()):
        lines.append(f"# TYPE {name} gauge")  # counters as gauges: the block holds the samples either way
        counter = name.endswith("_total")
        for labels, value in series_list:
            for t in samples:
                v = value * (t - samples[0]) / HOUR_S if counter else value
                if name == "affmon_export_last_sample_timestamp_seconds":
                    v = float(t)
                lines.append(f"{name}{{{labels}}} {v} {t}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def measure(counts: list[int], rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "live").mkdir()
        with real_fleet(tmp / "live") as (base, port, _):
            copies = [exposition_of(base, f"{address}:{port}") for address in FLEET]
            live = PrometheusClient(base)
            live_costs = [fetch(live, Queries())[1] for _ in range(rounds)]
        print(
            f"the real fleet, {len(FLEET)} exporters: {live_costs[0].queries} queries a refresh, median "
            f"{statistics.median(c.seconds for c in live_costs) * 1000:.0f} ms"
        )
        print()
        print("| instances | series | panel | queries | median ms | max ms |")
        print("|---|---|---|---|---|---|")
        end = int(time.time()) // SCRAPE_S * SCRAPE_S - 2 * HOUR_S  # older than any head block
        for count in counts:
            work = tmp / f"n{count}"
            work.mkdir()
            measure_count(work, copies, count, end, rounds)


def measure_count(work: Path, copies: list[list[dict[str, Any]]], count: int, end: int, rounds: int) -> None:
    """One row per panel: ``count`` synthetic instances in a block, queried at its end."""
    source = work / "series.om"
    source.write_text(openmetrics(copies, count, end))
    subprocess.run(
        [binary("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(source), str(work / "data")],
        check=True,
        capture_output=True,
    )
    config = "global: {scrape_interval: 15s}\nscrape_configs: []\n"
    with running(work, config, extra_args=("--storage.tsdb.retention.time=100y",)) as server:
        client, queries = PrometheusClient(server.base, timeout_s=60), Queries()
        series = int(float(client.query("count({__name__=~'.+'})", end)[0]["value"][1]))
        panels: dict[str, Callable[[], list[dict[str, Any]]]] = {
            "nodes": lambda: client.query(queries.nodes(), end),
            "jobs": lambda: client.query(queries.jobs_panel(), end),
            "findings (range, 1 h at 15 s)": lambda: client.query_range(
                queries.findings(), end - HOUR_S, end, SCRAPE_S
            ),
            "a node's processes": lambda: client.query(queries.node("node-003:9808"), end),
        }
        for panel, ask in panels.items():
            times = []
            sent = client.queries
            for _ in range(rounds):
                started = time.monotonic()
                answer = ask()
                times.append(time.monotonic() - started)
                assert answer, panel
            per_refresh = (client.queries - sent) / rounds
            print(
                f"| {count} | {series:,} | {panel} | {per_refresh:g} | {statistics.median(times) * 1000:.0f} | "
                f"{max(times) * 1000:.0f} |",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", default="5,200", help="instance counts to measure (default 5,200)")
    parser.add_argument("--rounds", type=int, default=5, help="refreshes timed at each count (default 5)")
    parser.add_argument("--record", metavar="DIR", help="record the real fleet's answers into DIR instead")
    args = parser.parse_args()
    if args.record:
        record(Path(args.record))
    else:
        measure([int(n) for n in args.instances.split(",")], args.rounds)


if __name__ == "__main__":
    main()
