"""One refresh of ``affmon fleet``: the panels' queries sent to Prometheus, their answers
kept as they came (``Answers``: what the fixtures of tests/fleet/test_fleet_model.py record), and
the fleet built from them. One query per panel, whatever the number of nodes: the fleet
view sends three (nodes, jobs, findings over a range), a node's view one more.

Every panel reads the same instant (``at``), so the nodes, jobs and findings agree. A
failure of any query fails the refresh with the client's one-line ``PrometheusError``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from affmon.fleet.client import PrometheusClient
from affmon.fleet.model import Fleet, NodeProcess, build_fleet, node_processes
from affmon.fleet.queries import DEFAULT_WINDOW_S, STALE_AFTER_S, Queries

RANGE_POINTS = 240  # the findings' range is asked at window / this: 15 s over an hour


def step_for(window_s: float) -> float:
    """The findings range's step: ``RANGE_POINTS`` points over the window, at least 1 s."""
    return max(1.0, window_s / RANGE_POINTS)


@dataclass(frozen=True)
class Answers:
    """The three panels' answers of one refresh, as Prometheus sent their ``result``."""

    at: float
    window_s: float
    step_s: float
    nodes: list[dict[str, Any]]
    jobs: list[dict[str, Any]]
    findings: list[dict[str, Any]]  # a matrix, from ``window_s`` before ``at`` to ``at``

    def fleet(self, stale_after_s: float = STALE_AFTER_S) -> Fleet:
        return build_fleet(self.at, self.nodes, self.jobs, self.findings, self.window_s, self.step_s, stale_after_s)

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "window_s": self.window_s,
            "step_s": self.step_s,
            "nodes": self.nodes,
            "jobs": self.jobs,
            "findings": self.findings,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Answers:
        return cls(
            float(data["at"]),
            float(data["window_s"]),
            float(data["step_s"]),
            list(data["nodes"]),
            list(data["jobs"]),
            list(data["findings"]),
        )


@dataclass(frozen=True)
class Cost:
    """What a refresh cost: queries sent and the seconds waited for them."""

    queries: int
    seconds: float


def fetch(
    client: PrometheusClient,
    queries: Queries,
    window_s: float = DEFAULT_WINDOW_S,
    clock: Callable[[], float] = time.time,
) -> tuple[Answers, Cost]:
    """The three panels' answers at one instant, and what asking cost."""
    at = clock()
    step = step_for(window_s)
    sent, waited = client.queries, client.seconds
    nodes = client.query(queries.nodes(), at)
    jobs = client.query(queries.jobs_panel(), at)
    findings = client.query_range(queries.findings(), at - window_s, at, step)
    return Answers(at, window_s, step, nodes, jobs, findings), Cost(client.queries - sent, client.seconds - waited)


def fetch_node(
    client: PrometheusClient, queries: Queries, instance: str, at: float | None = None
) -> tuple[tuple[NodeProcess, ...], list[dict[str, Any]]]:
    """One node's processes (one query), and the answer they were made from."""
    answer = client.query(queries.node(instance), at)
    return node_processes(answer), answer
