"""The fleet as Prometheus knows it, from the answers to the panels' queries
(``affmon.fleet.queries``): nodes, jobs with their ranks, findings with their age, and one
node's processes. Pure: JSON in (the ``result`` lists of the HTTP API), frozen values out;
no I/O, no Textual (tests/fleet/test_fleet_model.py imports it and checks ``sys.modules``).

Label values are kept as Prometheus sent them (JSON writes them escaped); whatever shows
them on a terminal passes them through ``text.term_safe``.

What a job is: processes of a training job carry ``job_pid``, the job's root (the rank a
DataLoader worker belongs to). Ranks that Slurm or Kubernetes placed carry the same Slurm
job (``slurm_job``) or pod on every node, and are one job; any other rank is a job of its
own, on its node.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from affmon.core.rules.base import Severity
from affmon.fleet.queries import PART, SEVERITY_VALUES, STALE_AFTER_S

Result = Sequence[Mapping[str, Any]]  # the API's data.result
_SEVERITY = {value: Severity[name.upper()] for name, value in SEVERITY_VALUES.items()}


def _number(text: Any) -> float | None:
    """A sample's value ("0.25", "NaN", "+Inf") as a float; None where it is no number."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isascii() and text.isdigit() else None


def _gpus(text: str | None) -> tuple[int, ...]:
    """``gpu="0,1"`` -> (0, 1); an empty or missing label: none."""
    return tuple(sorted({int(g) for g in (text or "").split(",") if g.isascii() and g.isdigit()}))


def _parts(result: Result) -> dict[str, list[tuple[dict[str, str], float | None]]]:
    """A panel's answer split by its ``part`` label: part -> [(labels, value)]."""
    out: dict[str, list[tuple[dict[str, str], float | None]]] = defaultdict(list)
    for series in result:
        labels = dict(series.get("metric") or {})
        value = series.get("value")
        number = _number(value[1]) if isinstance(value, list | tuple) and len(value) == 2 else None
        out[labels.pop(PART, "")].append((labels, number))
    return out


def _severity_rank(severity: Severity | None) -> int:
    return -1 if severity is None else int(severity)


@dataclass(frozen=True, slots=True)
class FleetFinding:
    """A finding held now on ``instance``. ``age_s``: since it was raised (at the step of the
    range asked); ``age_at_least``: it was there at the range's start, so older than that."""

    instance: str
    pid: int | None  # the job's root; None for a GPU no watched job uses
    gpu: int | None
    code: str
    severity: Severity
    age_s: float
    age_at_least: bool


def findings_with_age(matrix: Result, start: float, end: float, step_s: float) -> tuple[FleetFinding, ...]:
    """The findings held at ``end``, from the findings panel's range answer from ``start`` to
    ``end`` every ``step_s`` (one series per instance, pid, gpu and code, the value its
    severity): each one's age is how far back its series runs without a gap (a gap: a step
    with no sample, the finding cleared or the exporter not scraped); one that runs back to
    ``start`` is at least that old. Series that ended before ``end`` (findings cleared) are
    left out."""
    out = []
    for series in matrix:
        labels = series.get("metric") or {}
        points = [(float(t), _number(v)) for t, v in series.get("values") or () if _number(v) is not None]
        if not points or points[-1][0] < end - step_s / 2:
            continue
        first = len(points) - 1
        while first > 0 and points[first][0] - points[first - 1][0] <= step_s * 1.5:
            first -= 1
        raised = points[first][0]
        severity = _SEVERITY.get(int(points[-1][1] or 0), Severity.INFO)
        out.append(
            FleetFinding(
                instance=str(labels.get("instance", "")),
                pid=_int(labels.get("pid")),
                gpu=_int(labels.get("gpu")),
                code=str(labels.get("code", "")),
                severity=severity,
                age_s=max(0.0, end - raised),
                age_at_least=raised <= start + step_s / 2,
            )
        )
    return tuple(sorted(out, key=_finding_order))


def _finding_order(f: FleetFinding) -> tuple[Any, ...]:
    return (-int(f.severity), -f.age_s, f.instance, f.pid or 0, f.code, f.gpu or -1)


@dataclass(frozen=True, slots=True)
class Node:
    instance: str
    scrape_jobs: tuple[str, ...]
    up: bool | None  # the last scrape of every scrape job serving it succeeded; None: not a target now
    scrape_age_s: float | None  # since its last scrape
    sample_age_s: float | None  # since the exporter's last sample
    gpus: int
    gpu_busy: float | None  # mean utilisation of its GPUs
    processes: int  # of training jobs
    findings: tuple[FleetFinding, ...]
    stale: str | None  # why its figures are stale (None: fresh)

    @property
    def worst(self) -> Severity | None:
        return max((f.severity for f in self.findings), default=None)


def age_text(seconds: float, at_least: bool = False) -> str:
    """A duration as a person reads it: "45 s", "3m 20s", "2h 05m", "3d 4h"; "≥" in front
    when it is a lower bound."""
    s = int(max(0.0, seconds))
    if s < 60:
        text = f"{s} s"
    elif s < 3600:
        text = f"{s // 60}m {s % 60:02d}s"
    elif s < 86400:
        text = f"{s // 3600}h {s % 3600 // 60:02d}m"
    else:
        text = f"{s // 86400}d {s % 86400 // 3600}h"
    return ("≥" if at_least else "") + text


def stale_reason(
    *, gone: bool, up: bool | None, scrape_age_s: float | None, sample_age_s: float | None, stale_after_s: float
) -> str | None:
    """Why a node's figures cannot be trusted now, in words; None when they can."""
    if gone:
        return "no longer scraped (a target within the last hour)"
    if up is False:
        return "stale: its last scrape failed (exporter down or unreachable)"
    if scrape_age_s is not None and scrape_age_s > stale_after_s:
        return f"stale: last scraped {age_text(scrape_age_s)} ago"
    if sample_age_s is not None and sample_age_s > stale_after_s:
        return f"stale: the exporter's last sample is {age_text(sample_age_s)} old"
    return None


def nodes_from(
    result: Result, findings: Iterable[FleetFinding], stale_after_s: float = STALE_AFTER_S
) -> tuple[Node, ...]:
    """Every node the nodes panel names, worst first: stale ones, then by their worst
    finding, their number of findings, and name."""
    parts = _parts(result)
    instances: set[str] = set()
    ups: dict[str, list[bool]] = defaultdict(list)
    jobs: dict[str, set[str]] = defaultdict(set)
    gone: set[str] = set()
    for labels, value in parts.get("up", ()):
        instance = labels.get("instance", "")
        instances.add(instance)
        ups[instance].append(value == 1)
        jobs[instance].add(labels.get("job", ""))
    for labels, _ in parts.get("gone", ()):
        instance = labels.get("instance", "")
        instances.add(instance)
        jobs[instance].add(labels.get("job", ""))
        if instance not in ups:
            gone.add(instance)

    def per_instance(part: str, combine: Any = max) -> dict[str, float]:
        values: dict[str, list[float]] = defaultdict(list)
        for labels, value in parts.get(part, ()):
            if value is not None:
                values[labels.get("instance", "")].append(value)
        return {k: combine(v) for k, v in values.items()}

    scrape_age, sample_age = per_instance("scrape_age"), per_instance("sample_age")
    gpus, busy, processes = per_instance("gpus"), per_instance("gpu_busy"), per_instance("processes")
    by_instance: dict[str, list[FleetFinding]] = defaultdict(list)
    for f in findings:
        by_instance[f.instance].append(f)
    out = []
    for instance in instances:
        up = all(ups[instance]) if instance in ups else None
        out.append(
            Node(
                instance=instance,
                scrape_jobs=tuple(sorted(jobs[instance])),
                up=up,
                scrape_age_s=scrape_age.get(instance),
                sample_age_s=sample_age.get(instance),
                gpus=int(gpus.get(instance, 0)),
                gpu_busy=busy.get(instance),
                processes=int(processes.get(instance, 0)),
                findings=tuple(by_instance.get(instance, ())),
                stale=stale_reason(
                    gone=instance in gone,
                    up=up,
                    scrape_age_s=scrape_age.get(instance),
                    sample_age_s=sample_age.get(instance),
                    stale_after_s=stale_after_s,
                ),
            )
        )
    return tuple(sorted(out, key=node_order))


def node_order(n: Node) -> tuple[Any, ...]:
    """Worst first: a stale node (its findings unknown), then the worst finding, the most
    findings, the oldest one; then by name."""
    oldest = max((f.age_s for f in n.findings), default=0.0)
    return (n.stale is None, -_severity_rank(n.worst), -len(n.findings), -oldest, n.instance)


@dataclass(frozen=True, slots=True)
class Rank:
    """A training job's root process on one node (a rank on its GPUs)."""

    instance: str
    pid: int
    name: str
    user: str
    gpus: tuple[int, ...]
    wait_ratio: float | None
    gpu_busy: float | None  # its loop's (probed), else the mean utilisation of its GPUs
    shares: tuple[tuple[str, float], ...]  # its loop's shares, when probed
    workers: int  # the job's other processes on the node
    context: str  # "slurm 4242.0 rank 1", "" when nothing placed it


@dataclass(frozen=True, slots=True)
class Job:
    key: str  # "slurm 4242.0", "pod UID", or "INSTANCE PID"
    ranks: tuple[Rank, ...]
    findings: tuple[FleetFinding, ...]
    wait_ratio: float | None  # the most any of its processes waited
    gpu_busy: float | None  # the mean over its ranks
    shares: tuple[tuple[str, float], ...]  # the mean over its probed ranks
    users: tuple[str, ...] = field(default=())

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted({r.instance for r in self.ranks}))

    @property
    def gpus(self) -> int:
        return len({(r.instance, g) for r in self.ranks for g in r.gpus})

    @property
    def worst(self) -> Severity | None:
        return max((f.severity for f in self.findings), default=None)

    @property
    def name(self) -> str:
        return self.ranks[0].name if self.ranks else ""


def job_order(j: Job) -> tuple[Any, ...]:
    """Worst first: the worst finding, then the most findings, the oldest one, the most wait."""
    oldest = max((f.age_s for f in j.findings), default=0.0)
    return (-_severity_rank(j.worst), -len(j.findings), -oldest, -(j.wait_ratio or 0.0), j.key)


def _context(labels: Mapping[str, str]) -> tuple[str, str]:
    """(job key part, words) of a process's placement context; ("", "") when none."""
    scheduler = labels.get("scheduler", "")
    rank = labels.get("local_rank", "")
    suffix = f" rank {rank}" if rank else ""
    if labels.get("slurm_job"):
        return f"slurm {labels['slurm_job']}", f"slurm {labels['slurm_job']}{suffix}"
    if labels.get("pod_uid"):
        return f"pod {labels['pod_uid']}", f"pod {labels['pod_uid']}{suffix}"
    return "", (f"{scheduler}{suffix}" if scheduler else "")


def _mean(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def jobs_from(result: Result, findings: Iterable[FleetFinding]) -> tuple[Job, ...]:
    """The training jobs of the jobs panel's answer with their findings, worst first."""
    parts = _parts(result)
    Key = tuple[str, int]  # (instance, pid)
    info: dict[Key, dict[str, str]] = {}
    for labels, _ in parts.get("info", ()):
        pid = _int(labels.get("pid"))
        if pid is not None:
            info[(labels.get("instance", ""), pid)] = labels

    def by_pid(part: str) -> dict[Key, float]:
        out = {}
        for labels, value in parts.get(part, ()):
            pid = _int(labels.get("pid"))
            if pid is not None and value is not None:
                out[(labels.get("instance", ""), pid)] = value
        return out

    wait, loop_busy = by_pid("wait"), by_pid("gpu_busy")
    context = {}
    for labels, _ in parts.get("context", ()):
        pid = _int(labels.get("pid"))
        if pid is not None:
            context[(labels.get("instance", ""), pid)] = _context(labels)
    shares: dict[Key, dict[str, float]] = defaultdict(dict)
    for labels, value in parts.get("share", ()):
        pid = _int(labels.get("pid"))
        if pid is not None and value is not None:
            shares[(labels.get("instance", ""), pid)][labels.get("share", "")] = value
    utilisation: dict[tuple[str, int], float] = {}
    for labels, value in parts.get("gpu_util", ()):
        gpu = _int(labels.get("gpu"))
        if gpu is not None and value is not None:
            utilisation[(labels.get("instance", ""), gpu)] = value

    members: dict[Key, list[Key]] = defaultdict(list)  # a job's root -> its processes
    for (instance, pid), labels in info.items():
        job_pid = _int(labels.get("job_pid"))
        if job_pid is not None:
            members[(instance, job_pid)].append((instance, pid))

    ranks_of: dict[str, list[Rank]] = defaultdict(list)
    waits_of: dict[str, list[float]] = defaultdict(list)
    roots_of: dict[str, list[Key]] = defaultdict(list)
    for root, processes in members.items():
        root_labels = info.get(root)
        if root_labels is None:  # the root is not served (exited): its workers are no job to show
            continue
        labels = root_labels
        instance, pid = root
        gpus = _gpus(labels.get("gpu"))
        busy = loop_busy.get(root)
        if busy is None:
            busy = _mean(utilisation.get((instance, g)) for g in gpus)
        key_part, words = context.get(root, ("", ""))
        key = key_part or f"{instance} {pid}"
        ranks_of[key].append(
            Rank(
                instance=instance,
                pid=pid,
                name=labels.get("name", ""),
                user=labels.get("user", ""),
                gpus=gpus,
                wait_ratio=wait.get(root),
                gpu_busy=busy,
                shares=tuple(sorted(shares.get(root, {}).items())),
                workers=len(processes) - 1,
                context=words,
            )
        )
        waits_of[key] += [wait[p] for p in processes if p in wait]
        roots_of[key].append(root)

    found: dict[Key, list[FleetFinding]] = defaultdict(list)
    for f in findings:
        if f.pid is not None:
            found[(f.instance, f.pid)].append(f)
    jobs = []
    for key, ranks in ranks_of.items():
        ranks.sort(key=lambda r: (r.instance, r.pid))
        probed = [dict(r.shares) for r in ranks if r.shares]
        names = sorted({s for p in probed for s in p})
        mean_shares = tuple((s, sum(p.get(s, 0.0) for p in probed) / len(probed)) for s in names)
        job_findings = sorted((f for root in roots_of[key] for f in found.get(root, ())), key=_finding_order)
        jobs.append(
            Job(
                key=key,
                ranks=tuple(ranks),
                findings=tuple(job_findings),
                wait_ratio=max(waits_of[key], default=None),
                gpu_busy=_mean(r.gpu_busy for r in ranks),
                shares=mean_shares,
                users=tuple(sorted({r.user for r in ranks if r.user})),
            )
        )
    return tuple(sorted(jobs, key=job_order))


@dataclass(frozen=True, slots=True)
class NodeProcess:
    """One watched process of a node as its metrics describe it (what the local monitor's
    row shows, less the CPU lists: the metrics carry only how many CPUs and nodes)."""

    pid: int
    name: str
    user: str
    job_pid: int | None
    training: bool
    gpus: tuple[int, ...]
    threads: int | None
    cpu_percent: float | None
    wait_ratio: float | None
    mask_cpus: int | None
    nodes_run_on: int | None
    switches_per_s: float | None
    migrations_per_s: float | None
    gpu_busy: float | None
    shares: tuple[tuple[str, float], ...]
    context: str

    @property
    def role(self) -> str:
        """As the local monitor names them: the job's root a rank, the others its workers."""
        if self.job_pid is None:
            return "process"
        return "rank" if self.job_pid == self.pid else "worker"


def node_processes(result: Result) -> tuple[NodeProcess, ...]:
    """One node's processes from the node panel's answer: each job's rank, then its
    workers, jobs in pid order, then the processes of no training job."""
    parts = _parts(result)
    values: dict[str, dict[int, float]] = defaultdict(dict)
    for part, rows in parts.items():
        for labels, value in rows:
            pid = _int(labels.get("pid"))
            if pid is not None and value is not None and part not in ("info", "share", "context"):
                values[part][pid] = value
    shares: dict[int, dict[str, float]] = defaultdict(dict)
    for labels, value in parts.get("share", ()):
        pid = _int(labels.get("pid"))
        if pid is not None and value is not None:
            shares[pid][labels.get("share", "")] = value
    context = {}
    for labels, _ in parts.get("context", ()):
        pid = _int(labels.get("pid"))
        if pid is not None:
            context[pid] = _context(labels)[1]
    out = []
    for labels, _ in parts.get("info", ()):
        pid = _int(labels.get("pid"))
        if pid is None:
            continue
        cpu = values["cpu"].get(pid)
        threads, mask, run_on = (values[p].get(pid) for p in ("threads", "mask_cpus", "nodes_run_on"))
        out.append(
            NodeProcess(
                pid=pid,
                name=labels.get("name", ""),
                user=labels.get("user", ""),
                job_pid=_int(labels.get("job_pid")),
                training=labels.get("training") == "true",
                gpus=_gpus(labels.get("gpu")),
                threads=None if threads is None else int(threads),
                cpu_percent=None if cpu is None else cpu * 100,
                wait_ratio=values["wait"].get(pid),
                mask_cpus=None if mask is None else int(mask),
                nodes_run_on=None if run_on is None else int(run_on),
                switches_per_s=values["switches"].get(pid),
                migrations_per_s=values["migrations"].get(pid),
                gpu_busy=values["gpu_busy"].get(pid),
                shares=tuple(sorted(shares.get(pid, {}).items())),
                context=context.get(pid, ""),
            )
        )

    def order(p: NodeProcess) -> tuple[int, int, int]:
        root = p.job_pid if p.job_pid is not None else p.pid
        return (p.job_pid is None, root, p.role != "rank")

    return tuple(sorted(out, key=lambda p: (*order(p), p.pid)))


@dataclass(frozen=True, slots=True)
class Fleet:
    """What one refresh read: at ``at`` (Unix time), every node and job, and the findings."""

    at: float
    nodes: tuple[Node, ...]
    jobs: tuple[Job, ...]
    findings: tuple[FleetFinding, ...]

    def node(self, instance: str) -> Node | None:
        return next((n for n in self.nodes if n.instance == instance), None)


def build_fleet(
    at: float,
    nodes: Result,
    jobs: Result,
    findings_matrix: Result,
    window_s: float,
    step_s: float,
    stale_after_s: float = STALE_AFTER_S,
) -> Fleet:
    """The three panels' answers, read at ``at`` (the findings over the ``window_s`` before
    it, every ``step_s``), as one ``Fleet``."""
    findings = findings_with_age(findings_matrix, at - window_s, at, step_s)
    return Fleet(at, nodes_from(nodes, findings, stale_after_s), jobs_from(jobs, findings), findings)
