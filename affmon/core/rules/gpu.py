"""The GPU rules: a training job whose GPU waits on its CPU side (``GPU_STARVED``) and a
GPU whose PCIe link trained below its best (``PCIE_DEGRADED``). Pure."""

from __future__ import annotations

from affmon.core.model.jobs import Job, demand, job_gpus, wait_ratio
from affmon.core.model.rates import GpuRates, Snapshot
from affmon.core.rules.base import (
    Finding,
    RuleInputs,
    Severity,
    Thresholds,
    busy_threads,
    merge_same_code,
    rounded,
    tids_of,
)


def rule_gpu_starved(job: Job, snap: Snapshot, ctx: RuleInputs) -> list[Finding]:
    if not job.training:
        return []
    t = ctx.thresholds
    busy = busy_threads(job, snap.interval_s, t)
    ratio = wait_ratio(th for _, th in busy) or 0.0
    main = job.root.sample.main_thread
    main_rates = next((th for th in job.root.threads if main and th.sample.tid == main.tid), None)
    main_percent = main_rates.cpu_percent if main_rates and main_rates.cpu_percent is not None else 0.0
    mask = main.allowed_cpus if main else None
    wanted = sum(demand(th, snap.interval_s) for _, th in busy)
    saturated = main_percent >= 90 or (mask is not None and wanted >= 0.9 * len(mask))
    starved = ratio >= t.starved_warn
    if not (saturated or starved):
        return []
    findings = []
    for gpu in job_gpus(job, snap):
        util = gpu.sample.util_percent
        if util is None or gpu.sample.lost or util >= t.gpu_util_low:
            continue
        why = f"its CPU threads wait {ratio:.0%} of the time" if starved else "its CPU side is saturated"
        findings.append(
            Finding(
                "GPU_STARVED",
                Severity.BAD if util < t.gpu_util_low / 2 and starved else Severity.WARN,
                job.pid,
                tids_of(busy),
                f"GPU {gpu.sample.index} is only {util}% busy while {why}: the GPU waits for the CPU side",
                {
                    "gpu": gpu.sample.index,
                    "util_percent": util,
                    "wait_ratio": rounded(ratio, 3),
                    "main_thread_cpu_percent": rounded(main_percent, 1),
                    "demand_cpus": rounded(wanted),
                    "cpus_in_mask": None if mask is None else len(mask),
                },
            )
        )
    return merge_same_code(findings)


def rule_pcie_degraded(gpu: GpuRates, t: Thresholds) -> Finding | None:
    link = gpu.link
    traffic = (gpu.pcie_rx_bytes_per_s or 0) + (gpu.pcie_tx_bytes_per_s or 0)
    if traffic < t.pcie_traffic_bytes_per_s or gpu.sample.lost:
        return None
    slow_gen = link.gen is not None and link.max_gen is not None and link.gen < link.max_gen
    narrow = link.width is not None and link.max_width is not None and link.width < link.max_width
    if not (slow_gen or narrow):
        return None
    return Finding(
        "PCIE_DEGRADED",
        Severity.WARN,
        None,
        (),
        f"GPU {gpu.sample.index}'s PCIe link runs at gen {link.gen} x{link.width}, below its gen "
        f"{link.max_gen} x{link.max_width}, while moving {traffic / 1e6:.0f} MB/s",
        {
            "gpu": gpu.sample.index,
            "pci_bus_id": gpu.sample.pci_bus_id,
            "gen": link.gen,
            "width": link.width,
            "max_gen": link.max_gen,
            "max_width": link.max_width,
            "traffic_bytes_per_s": round(traffic),
        },
    )
