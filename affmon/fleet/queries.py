"""The PromQL of ``affmon fleet``: one query per panel, whatever the number of nodes.

A panel needs several metrics (a node's ``up``, its last scrape, its GPUs...). Rather than
one query each, a panel's query is the union (``or``) of its parts, each part marked with
a ``part`` label by ``label_replace``: the parts' label sets differ in ``part``, so ``or``
keeps every series of every part, and ``affmon.fleet.model`` splits the answer by it. Each
part aggregates by the entity's own labels (``max by (instance, pid)``), so a process served
by two scrape jobs (``affmon`` and ``affmon-threads``) is one series, as the dashboard and
the rules count it.

Pure: strings in, strings out. The scrape jobs are those whose name matches ``jobs``
(``affmon.*`` by default, as contrib/prometheus/affmon-rules.yml assumes).
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_WINDOW_S = 3600.0  # findings' ages are read back this far
# A scrape or a sample older than this: the node's figures are stale (the model judges it;
# here, with the other defaults, for the command line's parser, which every command builds:
# the monitor's start does not load the fleet's model).
STALE_AFTER_S = 120.0

DEFAULT_JOBS = "affmon.*"
PART = "part"
TRAINING = 'training="true"'
# Finding severities as the findings panel's values: the worst wins in ``max``.
SEVERITY_VALUES = {"info": 1, "warn": 2, "bad": 3}
GONE_LOOKBACK = "1h"  # a target seen in this window and not now is said to be gone
RATE_WINDOW = "2m"  # rates over the last two minutes: at least two scrapes at a 60 s scrape interval


def _quote(value: str) -> str:
    """A PromQL string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class Queries:
    """The panels' queries for the scrape jobs matching ``jobs`` (a RE2 regex)."""

    jobs: str = DEFAULT_JOBS

    def _sel(self, metric: str, extra: str = "") -> str:
        matchers = f"job=~{_quote(self.jobs)}" + (f", {extra}" if extra else "")
        return f"{metric}{{{matchers}}}"

    @staticmethod
    def _part(name: str, expr: str) -> str:
        return f'label_replace({expr}, "{PART}", "{name}", "", "")'

    def _union(self, parts: list[tuple[str, str]]) -> str:
        return "\n  or ".join(self._part(name, expr) for name, expr in parts)

    def nodes(self) -> str:
        """Every target of the scrape jobs: up, the age of its last scrape and of the
        exporter's last sample, its GPUs and its training processes; and the targets seen
        in the last hour that are no longer scraped (gone)."""
        up = self._sel("up")
        return self._union(
            [
                ("up", f"max by (instance, job) ({up})"),
                ("scrape_age", f"time() - max by (instance, job) (timestamp({up}))"),
                (
                    "sample_age",
                    f"time() - max by (instance) ({self._sel('affmon_export_last_sample_timestamp_seconds')})",
                ),
                ("gpus", f"count by (instance) (max by (instance, gpu) ({self._sel('affmon_gpu_info')}))"),
                (
                    "gpu_busy",
                    f"avg by (instance) (max by (instance, gpu) ({self._sel('affmon_gpu_utilization_ratio')}))",
                ),
                (
                    "processes",
                    f"count by (instance) (max by (instance, pid) ({self._sel('affmon_process_info', TRAINING)}))",
                ),
                (
                    "gone",
                    f"max by (instance, job) (last_over_time({up}[{GONE_LOOKBACK}])) unless on (instance, job) {up}",
                ),
            ]
        )

    def jobs_panel(self) -> str:
        """Every process of a training job with its job, GPUs and wait ratio, what placed it,
        its loop's shares and GPU busy, and every GPU's utilisation (for the jobs whose loop
        is not probed)."""
        return self._union(
            [
                (
                    "info",
                    f"max by (instance, pid, job_pid, name, user, gpu) ({self._sel('affmon_process_info', TRAINING)})",
                ),
                (
                    "context",
                    "max by (instance, pid, scheduler, slurm_job, pod_uid, local_rank) "
                    f"({self._sel('affmon_process_context_info')})",
                ),
                (
                    "wait",
                    f"max by (instance, pid) ({self._sel('affmon_process_wait_ratio')}) "
                    f"and on (instance, pid) {self._sel('affmon_process_info', TRAINING)}",
                ),
                ("gpu_busy", f"max by (instance, pid) ({self._sel('affmon_loop_gpu_busy_ratio')})"),
                ("share", f"max by (instance, pid, share) ({self._sel('affmon_loop_share_ratio')})"),
                ("gpu_util", f"max by (instance, gpu) ({self._sel('affmon_gpu_utilization_ratio')})"),
            ]
        )

    def findings(self) -> str:
        """One series per (instance, pid, gpu, code), its value the worst severity served
        (``SEVERITY_VALUES``): a finding whose severity changes stays one series, so its age
        runs from when it was raised. Asked over a range (query_range) for the ages."""
        finding = "affmon_finding_info"
        by_severity = " or ".join(
            f"{self._sel(finding, f'severity={_quote(name)}')} * {value}" for name, value in SEVERITY_VALUES.items()
        )
        return f"max by (instance, pid, gpu, code) ({by_severity})"

    def node(self, instance: str) -> str:
        """One node's processes as the local monitor lists them: every watched process with
        its job, GPUs, threads, CPU %, wait ratio, mask and NUMA-node counts, switches and
        migrations a second, what placed it, its loop's shares and GPU busy."""
        on = f"instance={_quote(instance)}"

        def sel(metric: str, extra: str = "") -> str:
            return self._sel(metric, on + (f", {extra}" if extra else ""))

        def per_pid(metric: str) -> str:
            return f"max by (pid) ({sel(metric)})"

        def rate(*metrics: str) -> str:
            return " + ".join(f"max by (pid) (rate({sel(m)}[{RATE_WINDOW}]))" for m in metrics)

        return self._union(
            [
                ("info", f"max by (pid, job_pid, name, user, gpu, training) ({sel('affmon_process_info')})"),
                (
                    "context",
                    f"max by (pid, scheduler, slurm_job, pod_uid, local_rank) ({sel('affmon_process_context_info')})",
                ),
                ("cpu", rate("affmon_process_cpu_seconds_total")),
                ("wait", per_pid("affmon_process_wait_ratio")),
                ("threads", per_pid("affmon_process_threads")),
                ("mask_cpus", per_pid("affmon_process_mask_cpus")),
                ("nodes_run_on", per_pid("affmon_process_numa_nodes_run_on")),
                (
                    "switches",
                    rate("affmon_process_voluntary_switches_total", "affmon_process_involuntary_switches_total"),
                ),
                ("migrations", rate("affmon_process_migrations_total")),
                ("gpu_busy", per_pid("affmon_loop_gpu_busy_ratio")),
                ("share", f"max by (pid, share) ({sel('affmon_loop_share_ratio')})"),
            ]
        )
