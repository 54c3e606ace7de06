"""The fleet as words: the cells of its tables (shared by ``--once`` and the terminal view),
the plain table ``--once`` prints, and the ``--json`` document.

Every label value from Prometheus (instance, user, process name, finding code, placement)
passes through ``term_safe`` before it is text for a terminal; JSON keeps the values as
Prometheus sent them (``json.dumps`` escapes them).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from affmon.core import fmt
from affmon.core.model.loop import CPU_WAIT, DATA_WAIT, GPU_WAIT, ON_CPU
from affmon.core.text import term_safe
from affmon.fleet.model import Fleet, FleetFinding, Job, Node, NodeProcess, age_text

if TYPE_CHECKING:  # the text takes a reading's cost; it sends no query itself
    from affmon.fleet.source import Cost

# The loop's shares as the monitor's detail pane words them (docs/loop.md).
SHARE_WORDS = {DATA_WAIT: "data", GPU_WAIT: "GPU", ON_CPU: "CPU", CPU_WAIT: "waiting for a CPU", "other": "other"}
SHARE_ORDER = (DATA_WAIT, GPU_WAIT, ON_CPU, CPU_WAIT, "other")

JOB_COLUMNS = (  # (key, label, width): the flexible FINDINGS column last
    ("job", "JOB", 24),
    ("ranks", "RANKS", 5),
    ("nodes", "NODES", 5),
    ("gpus", "GPUS", 4),
    ("wait", "WAIT", 4),
    ("busy", "GPU", 4),
    ("loop", "LOOP", 22),
    ("findings", "FINDINGS (age)", 30),
)
NODE_COLUMNS = (
    ("node", "NODE", 24),
    ("state", "STATE", 5),
    ("gpus", "GPUS", 4),
    ("busy", "GPU", 4),
    ("procs", "PROCS", 5),
    ("findings", "FINDINGS (age) / why stale", 30),
)


def grouped(findings: Sequence[FleetFinding]) -> list[tuple[FleetFinding, int]]:
    """Each code once, in the order given: its oldest finding (the worst severity among
    equals) and how many hold it (two ranks of a node both contended)."""
    by_code: dict[str, list[FleetFinding]] = {}
    for f in findings:
        by_code.setdefault(f.code, []).append(f)
    return [(max(held, key=lambda f: (f.age_at_least, f.age_s, f.severity)), len(held)) for held in by_code.values()]


def finding_text(f: FleetFinding, count: int = 1) -> str:
    """ "STARV 3m 20s": the short code, how many hold it where more than one ("CONTEND x2
    29 s"), and how long it has been held."""
    many = f" x{count}" if count > 1 else ""
    return f"{term_safe(fmt.short_code(f.code))}{many} {age_text(f.age_s, f.age_at_least)}"


def findings_text(findings: Sequence[FleetFinding]) -> str:
    return ", ".join(finding_text(f, n) for f, n in grouped(findings)) or "none"


def shares_text(shares: Sequence[tuple[str, float]]) -> str:
    """ "data 61% GPU 22% CPU 12%", largest first, the shares that round to 0% left out;
    "-" when the loop is not probed."""
    known = {s: v for s, v in shares if s in SHARE_WORDS and round(v * 100) > 0}
    ordered = sorted(known, key=lambda s: (-known[s], SHARE_ORDER.index(s)))
    return " ".join(f"{SHARE_WORDS[s]} {known[s] * 100:.0f}%" for s in ordered) or fmt.UNKNOWN


def job_name(job: Job) -> str:
    """ "python3 608 @ 127.0.0.3:9808", or "slurm 4242.0" for a job its scheduler names."""
    if job.ranks and job.key == f"{job.ranks[0].instance} {job.ranks[0].pid}":
        rank = job.ranks[0]
        return term_safe(f"{rank.name} {rank.pid} @ {rank.instance}")
    return term_safe(job.key)


def job_cells(job: Job) -> tuple[str, ...]:
    return (
        job_name(job),
        str(len(job.ranks)),
        str(len(job.nodes)),
        str(job.gpus),
        fmt.ratio_percent(job.wait_ratio),
        fmt.ratio_percent(job.gpu_busy),
        shares_text(job.shares),
        findings_text(job.findings),
    )


def node_state(node: Node) -> str:
    return "STALE" if node.stale else "ok"


def node_cells(node: Node) -> tuple[str, ...]:
    return (
        term_safe(node.instance),
        node_state(node),
        str(node.gpus) if node.stale is None else fmt.UNKNOWN,
        fmt.ratio_percent(node.gpu_busy),
        str(node.processes) if node.stale is None else fmt.UNKNOWN,
        node.stale + "; findings unknown" if node.stale else findings_text(node.findings),
    )


def summary(fleet: Fleet) -> str:
    """ "5 nodes (1 stale), 6 jobs, 17 findings (9 bad)"."""
    stale = sum(1 for n in fleet.nodes if n.stale)
    bad = sum(1 for f in fleet.findings if str(f.severity) == "bad")
    return (
        f"{len(fleet.nodes)} nodes" + (f" ({stale} stale)" if stale else "") + f", {len(fleet.jobs)} jobs, "
        f"{len(fleet.findings)} findings" + (f" ({bad} bad)" if bad else "")
    )


def _table(columns: Sequence[tuple[str, str, int]], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max([len(label), *(len(r[i]) for r in rows)]) for i, (_, label, _) in enumerate(columns)]
    widths[-1] = 0  # the last column is not padded

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return [line([label for _, label, _ in columns]), *(line(r) for r in rows)]


def plain(fleet: Fleet, url: str, cost: Cost) -> str:
    """``--once``: the jobs, then the nodes, worst first, as plain text."""
    when = time.strftime("%H:%M:%S", time.localtime(fleet.at))
    head = (
        f"affmon fleet: {summary(fleet)}; Prometheus {term_safe(url)} at {when} "
        f"({cost.queries} queries, {cost.seconds * 1000:.0f} ms)"
    )
    jobs = _table(JOB_COLUMNS, [job_cells(j) for j in fleet.jobs]) if fleet.jobs else ["no training job"]
    nodes = _table(NODE_COLUMNS, [node_cells(n) for n in fleet.nodes]) if fleet.nodes else ["no node: no target"]
    return "\n".join([head, "", *jobs, "", *nodes]) + "\n"


def _finding_json(f: FleetFinding) -> dict[str, Any]:
    return {
        "instance": f.instance,
        "pid": f.pid,
        "gpu": f.gpu,
        "code": f.code,
        "severity": str(f.severity),
        "age_s": round(f.age_s, 3),
        "age_at_least": f.age_at_least,
    }


def fleet_json(fleet: Fleet, url: str, cost: Cost) -> dict[str, Any]:
    """``--json``: every node and job, worst first, and what the refresh cost."""
    return {
        "prometheus": url,
        "at": fleet.at,
        "queries": cost.queries,
        "query_seconds": round(cost.seconds, 4),
        "nodes": [
            {
                "instance": n.instance,
                "scrape_jobs": list(n.scrape_jobs),
                "up": n.up,
                "stale": n.stale,
                "scrape_age_s": n.scrape_age_s,
                "sample_age_s": n.sample_age_s,
                "gpus": n.gpus,
                "gpu_busy_ratio": n.gpu_busy,
                "processes": n.processes,
                "findings": [_finding_json(f) for f in n.findings],
            }
            for n in fleet.nodes
        ],
        "jobs": [
            {
                "key": j.key,
                "name": j.name,
                "users": list(j.users),
                "nodes": list(j.nodes),
                "gpus": j.gpus,
                "wait_ratio": j.wait_ratio,
                "gpu_busy_ratio": j.gpu_busy,
                "loop_shares": dict(j.shares),
                "ranks": [
                    {
                        "instance": r.instance,
                        "pid": r.pid,
                        "name": r.name,
                        "user": r.user,
                        "gpus": list(r.gpus),
                        "wait_ratio": r.wait_ratio,
                        "gpu_busy_ratio": r.gpu_busy,
                        "loop_shares": dict(r.shares),
                        "workers": r.workers,
                        "placed_by": r.context or None,
                    }
                    for r in j.ranks
                ],
                "findings": [_finding_json(f) for f in j.findings],
            }
            for j in fleet.jobs
        ],
    }


def process_json(p: NodeProcess) -> dict[str, Any]:
    return {
        "pid": p.pid,
        "name": p.name,
        "user": p.user,
        "role": p.role,
        "job_pid": p.job_pid,
        "gpus": list(p.gpus),
        "threads": p.threads,
        "cpu_percent": p.cpu_percent,
        "wait_ratio": p.wait_ratio,
        "mask_cpus": p.mask_cpus,
        "numa_nodes_run_on": p.nodes_run_on,
        "switches_per_s": p.switches_per_s,
        "migrations_per_s": p.migrations_per_s,
        "loop_gpu_busy_ratio": p.gpu_busy,
        "loop_shares": dict(p.shares),
        "placed_by": p.context or None,
    }
