"""``affmon fleet --prometheus URL``: every node and training job Prometheus knows, worst
first, from the Prometheus HTTP API alone (it never contacts the nodes): a terminal view,
``--once`` for a plain table, ``--json`` for scripts.

The first refresh is read before anything is drawn, so a bad URL, a Prometheus that is
unreachable or times out, ends the command as one line and exit status 2 (``AffmonError``,
as every other command's failures). Later failures are said on the view's status line,
beside the last figures read and their age. Textual is imported only for the view.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

DEFAULT_INTERVAL_S = 5.0
DEFAULT_TIMEOUT_S = 10.0


def add_fleet_parser(subparsers: argparse._SubParsersAction[Any]) -> argparse.ArgumentParser:
    from affmon.commands.argtypes import seconds
    from affmon.fleet.queries import DEFAULT_JOBS, DEFAULT_WINDOW_S, STALE_AFTER_S  # no HTTP client, no model

    fleet: argparse.ArgumentParser = subparsers.add_parser(
        "fleet", help="every node and training job Prometheus knows, worst first (reads only Prometheus)"
    )
    fleet.add_argument(
        "--prometheus", required=True, metavar="URL", help="the Prometheus to read, e.g. http://prometheus:9090"
    )
    output = fleet.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print one reading as JSON and exit")
    output.add_argument("--once", action="store_true", help="print one reading as plain tables and exit")
    fleet.add_argument(
        "--interval",
        dest="fleet_interval",
        type=seconds,
        default=DEFAULT_INTERVAL_S,
        metavar="SECONDS",
        help=f"between refreshes of the view (default {DEFAULT_INTERVAL_S:g})",
    )
    fleet.add_argument(
        "--timeout",
        type=seconds,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"the most to wait for one query's answer (default {DEFAULT_TIMEOUT_S:g})",
    )
    fleet.add_argument(
        "--window",
        type=seconds,
        default=DEFAULT_WINDOW_S,
        metavar="SECONDS",
        help=f"how far back a finding's age is read; older ones show as at least this (default {DEFAULT_WINDOW_S:g})",
    )
    fleet.add_argument(
        "--stale-after",
        type=seconds,
        default=STALE_AFTER_S,
        metavar="SECONDS",
        help=f"a node whose last scrape or sample is older is said to be stale (default {STALE_AFTER_S:g}; "
        "a failed last scrape always is)",
    )
    fleet.add_argument(
        "--scrape-jobs",
        default=DEFAULT_JOBS,
        metavar="REGEX",
        help=f"the Prometheus scrape jobs of affmon's exporters (default {DEFAULT_JOBS})",
    )
    return fleet


def cmd_fleet(args: argparse.Namespace) -> int:
    from affmon.commands.escaped_output import escaped_streams
    from affmon.fleet.client import PrometheusClient
    from affmon.fleet.queries import Queries
    from affmon.fleet.source import fetch
    from affmon.fleet.text import fleet_json, plain

    client = PrometheusClient(args.prometheus, timeout_s=args.timeout)
    queries = Queries(args.scrape_jobs)

    def read() -> Any:
        answers, cost = fetch(client, queries, window_s=args.window)
        return answers.fleet(args.stale_after), cost

    fleet, cost = read()  # a failure here is one line and exit status 2
    if args.json:
        json.dump(fleet_json(fleet, client.base, cost), sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    if args.once:
        with escaped_streams():
            sys.stdout.write(plain(fleet, client.base, cost))
        return 0
    if not (sys.stdout.isatty() and sys.stdin.isatty()):
        sys.stderr.write(
            "affmon: the fleet view needs a terminal (standard input and output are not both one); "
            "for text use --once or --json\n"
        )
        return 2
    from affmon.fleet.app import FleetApp
    from affmon.fleet.source import fetch_node

    app = FleetApp(
        read,
        lambda instance: fetch_node(client, queries, instance)[0],
        url=client.base,
        interval_s=args.fleet_interval,
        first=(fleet, cost),
    )
    app.run()
    return 0
