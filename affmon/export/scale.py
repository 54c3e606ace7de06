"""What ``affmon export`` costs Prometheus, from the catalogue: the series one node serves
for its shape (processes, GPUs, ranks probed, threads with ``--threads``...), and for a
fleet the active series and the samples ingested per second at a scrape interval. Pure.

Each count comes from the catalogue's specs grouped by the entity their labels name (a
process's ``pid``, a thread's ``(pid, tid)``, a GPU's ``gpu``, none for the exporter), so
a metric added there is counted here. ``tests/export/test_export_fleet.py`` holds the arithmetic
against what a real Prometheus ingested from five replaying exporters.

``python -m affmon.export.scale`` prints the table of docs/export.md ("Scale").
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace

from affmon.core.model.loop import SHARES
from affmon.export import catalogue as m


@dataclass(frozen=True)
class NodeShape:
    """What one node's exporter serves series about."""

    processes: int  # watched processes: ranks, their workers, launchers
    gpus: int
    probed: int = 0  # processes whose training loop is probed (the ranks)
    placed: int = 0  # processes something placed (Slurm, Kubernetes, torchrun): a context series each
    memory_nodes: int = 0  # (process, NUMA node) pairs holding a training process's resident pages
    idle: int = 0  # processes that neither ran nor waited in the last interval: no wait ratio
    findings: int = 0
    threads: int | None = None  # threads given per-thread series (--threads, at most --max-threads); None: off
    replay: bool = False  # serving a recording (--replay, --demo)


def _count(specs: tuple[m.MetricSpec, ...], labels: tuple[str, ...]) -> int:
    return sum(1 for s in specs if s.labels == labels)


LOOP = (m.LOOP_SHARE, m.LOOP_GPU_BUSY)  # by pid too, but only for a probed rank
PER_PROCESS = _count(tuple(s for s in m.CATALOGUE if s not in LOOP), m.PROCESS_LABELS) + 1  # and affmon_process_info
PER_THREAD = _count(m.CATALOGUE, m.THREAD_LABELS) + 1  # the metrics by (pid, tid), and affmon_thread_info
PER_GPU = _count(m.CATALOGUE, m.GPU_LABELS) + 1  # the metrics by (gpu, numa_node), and affmon_gpu_info
PER_PROBED = len(SHARES) + _count(LOOP, m.PROCESS_LABELS)  # affmon_loop_share_ratio by share, and the GPU's busy
REPLAY = (m.EXPORT_REPLAY_ENDED, m.EXPORT_REPLAY_RESTARTS)
EXPORTER = sum(1 for s in m.CATALOGUE if s.labels == () and not s.per_thread and s not in REPLAY) + 1  # build_info


def series_per_node(shape: NodeShape) -> int:
    """Series (= samples a scrape) one node's exporter serves for ``shape``."""
    n = shape.processes * PER_PROCESS - shape.idle
    n += shape.placed + shape.memory_nodes + shape.probed * PER_PROBED
    n += shape.gpus * PER_GPU + shape.findings + EXPORTER
    if shape.threads is not None:
        n += shape.threads * PER_THREAD + 1  # affmon_export_threads_left_out
    if shape.replay:
        n += len(REPLAY)
    return n


@dataclass(frozen=True)
class FleetCost:
    series_per_node: int
    series: int
    samples_per_s: float


def fleet_cost(shape: NodeShape, nodes: int, scrape_interval_s: float = 15.0) -> FleetCost:
    """Active series of ``nodes`` nodes of ``shape``, and the samples Prometheus ingests a
    second scraping each every ``scrape_interval_s`` (every series is one sample a scrape)."""
    per_node = series_per_node(shape)
    return FleetCost(per_node, per_node * nodes, per_node * nodes / scrape_interval_s)


def training_node(ranks: int = 8, workers_per_rank: int = 8, numa_nodes: int = 2) -> NodeShape:
    """A node of ``ranks`` ranks (one a GPU), each with its DataLoader workers, and their
    launcher, all placed by a scheduler; a rank's pages on every NUMA node, a worker's on its
    rank's; no findings."""
    processes = ranks * (1 + workers_per_rank) + 1
    return NodeShape(
        processes=processes,
        gpus=ranks,
        probed=ranks,
        placed=processes,
        memory_nodes=ranks * numa_nodes + ranks * workers_per_rank,
    )


def _row(label: str, shape: NodeShape, nodes: int, interval_s: float) -> str:
    cost = fleet_cost(shape, nodes, interval_s)
    return f"| {label} | {cost.series_per_node:,} | {cost.series:,} | {cost.samples_per_s:,.0f} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m affmon.export.scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000, help="nodes in the fleet (default 1000)")
    parser.add_argument("--ranks", type=int, default=8, help="ranks (GPUs) a node (default 8)")
    parser.add_argument("--scrape", type=float, default=15.0, help="scrape interval, seconds (default 15)")
    args = parser.parse_args(argv)
    n, r = args.nodes, args.ranks
    print(f"series per process {PER_PROCESS}, per probed rank +{PER_PROBED}, per GPU {PER_GPU}, ", end="")
    print(f"per thread (--threads) {PER_THREAD}, the exporter's own {EXPORTER}")
    print(f"| node | series per node | series, {n:,} nodes | samples/s at a {args.scrape:g} s scrape |")
    print("|---|---|---|---|")
    bare = training_node(r, 0, 2)
    print(_row(f"{r} ranks, no workers", bare, n, args.scrape))
    node = training_node(r, 8, 2)
    print(_row(f"{r} ranks x 8 DataLoader workers", node, n, args.scrape))
    bad = replace(node, findings=3 * r)
    print(_row("the same, 3 findings a rank", bad, n, args.scrape))
    for threads in (1000, node.processes * 100):
        with_threads = replace(node, threads=threads)
        print(_row(f"the same, --threads: {threads:,} threads", with_threads, n, args.scrape))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
