"""Prove the loop breakdown on a real GPU: four training loops, each bound by something
else, each must show its own share as the largest (>= 0.5) and the right finding; where
the finding gives advice, act on it in the same run and measure samples/s again.

Run on a GPU machine from the repository root (torch and torchvision; affmon from this
checkout)::

    python -m bench.gpu.loop_scenarios [--out DIR] [--window 8] [--scenarios input,starved,gpu,python]

Scenarios (``bench/workloads/loop_job.py``):

* ``input``: ResNet-18 with one DataLoader worker doing a heavy decode. Expected: data
  largest, INPUT_BOUND advising more workers; the job is restarted with the number of
  workers the advice names and measured again.
* ``starved``: the same with its one worker pinned to a CPU beside three busy hogs.
  Expected: data largest, INPUT_BOUND saying the workers are starved by neighbours; the
  worker is then pinned onto the CPUs the hogs do not use, in the running job.
* ``gpu``: a large MLP on small inputs, ``loss.item()`` every step. Expected: GPU wait
  largest (the CUDA spin counted as waiting for the GPU), no finding.
* ``python``: a step of small ops and Python bookkeeping. Expected: on-CPU largest,
  LOOP_BOUND.
* ``loop_starved``: the Python-heavy loop pinned to one CPU beside two hogs. Expected:
  waiting for a CPU largest, no loop finding (the existing STARVED rule covers it); the
  job is then pinned off that CPU and measured again.

Prints one row per scenario: GPU busy, the five shares, the largest, the findings (with
the advice's action), samples/s before and after acting, and whether it passed. Runs in
about 5 minutes on an H200 machine with 16 cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from affmon.collect.loop import LoopSampler, LoopWatcher
from affmon.core.model.loop import SHARES, LoopBreakdown, breakdown, describe
from affmon.core.rules.loop import evaluate_loop
from affmon.nvml import NvmlGateway

ROOT = Path(__file__).resolve().parent.parent.parent

PY = sys.executable
RATE = re.compile(r"RATE t=([\d.]+) samples_per_s=([\d.]+)")
EXPECTED = {
    "input": ("data_wait", "INPUT_BOUND", "add_workers"),
    "starved": ("data_wait", "INPUT_BOUND", "move_neighbours"),
    "gpu": ("gpu_wait", None, None),
    "python": ("on_cpu", "LOOP_BOUND", None),
    "loop_starved": ("cpu_wait", None, None),
}
HOG_CPU = 3


@dataclass
class Job:
    proc: subprocess.Popen[str]
    log: Path
    pid: int = 0

    def rates(self) -> list[tuple[float, float]]:
        return [(float(t), float(r)) for t, r in RATE.findall(self.log.read_text())]


@dataclass
class Seen:
    b: LoopBreakdown | None
    findings: list[dict[str, Any]]
    samples_per_s: float


@dataclass
class Row:
    scenario: str
    before: Seen
    action: str = "none"
    after: Seen | None = None
    notes: list[str] = field(default_factory=list)

    def passed(self) -> bool:
        share, code, action = EXPECTED[self.scenario]
        b = self.before.b
        if b is None or b.largest != share or b.shares[share] < 0.5:
            return False
        codes = [f["code"] for f in self.before.findings]
        if code is None:
            if codes:
                return False
        elif codes != [code]:
            return False
        if action is not None and (self.before.findings[0]["suggestion"] or {}).get("action") != action:
            return False
        return not (self.after and not self.after.samples_per_s > self.before.samples_per_s)


def start(out: Path, name: str, *args: str) -> Job:
    log = out / f"{name}.log"
    proc = subprocess.Popen(
        [PY, "-m", "bench.workloads.loop_job", *args, "--seconds", "600"],
        cwd=ROOT,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    job = Job(proc, log)
    end = time.time() + 240
    while time.time() < end:
        m = re.search(r"READY pid=(\d+)", log.read_text())
        if m:
            job.pid = int(m.group(1))
            return job
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited: {log.read_text()[-2000:]}")
        time.sleep(0.5)
    raise RuntimeError(f"{name} never became ready")


def stop(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    for p in procs:
        p.wait()


def gpu_index() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    return int(visible) if visible.isdigit() else 0


def observe(job: Job, gateway: NvmlGateway, window: float) -> Seen:
    """One window of the loop breakdown beside the GPU's busy share and the job's rate."""
    sampler = LoopSampler(job.pid)
    with LoopWatcher([sampler]) as watcher:
        time.sleep(2.0)  # settle: children, feeders, a first refresh
        watcher.windows()
        gateway.sample()  # from here NVML's utilisation samples are averaged
        clock0 = job.rates()[-1][0] if job.rates() else 0.0
        time.sleep(window)
        loop_window = watcher.windows()[0]
        gpus = gateway.sample()
    time.sleep(2.5)  # the RATE line covering the window's end
    busy = next((g.util_percent for g in gpus if g.index == gpu_index()), None)
    b = breakdown(loop_window, None if busy is None else busy / 100)
    findings = [f.to_json() for f in evaluate_loop(b, loop_window.workers)] if b else []
    rates = [r for t, r in job.rates() if clock0 + 2.0 < t <= clock0 + window + 2.5]
    return Seen(b, findings, sum(rates) / len(rates) if rates else float("nan"))


def pin_process(pid: int, cpus: set[int]) -> None:
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(tid), cpus)


def hogs(cpu: int, count: int) -> list[subprocess.Popen[str]]:
    return [
        subprocess.Popen(["taskset", "-c", str(cpu), PY, "-c", "while True: pass"], start_new_session=True, text=True)
        for _ in range(count)
    ]


def run(scenario: str, out: Path, gateway: NvmlGateway, window: float) -> Row:
    others: list[subprocess.Popen[str]] = []
    jobs: list[Job] = []
    try:
        if scenario == "input":
            jobs.append(start(out, "input", "data", "--workers", "1"))
            row = Row(scenario, observe(jobs[0], gateway, window))
            advice = next((f["suggestion"] for f in row.before.findings if f["code"] == "INPUT_BOUND"), None) or {}
            workers = int(advice.get("workers", 8))
            stop([jobs.pop().proc])
            jobs.append(start(out, "input_fixed", "data", "--workers", str(workers)))
            row.action, row.after = f"restart with {workers} workers", observe(jobs[0], gateway, window)
            return row
        if scenario == "starved":
            others = hogs(HOG_CPU, 3)
            jobs.append(start(out, "starved", "data", "--workers", "1"))
            sampler = LoopSampler(jobs[0].pid)
            for child in sampler.children:
                pin_process(child, {HOG_CPU})
            row = Row(scenario, observe(jobs[0], gateway, window), notes=[f"workers {sampler.children}"])
            for child in sampler.children:
                pin_process(child, set(os.sched_getaffinity(0)) - {HOG_CPU})
            row.action, row.after = "pin the worker off the hogs' CPU", observe(jobs[0], gateway, window)
            return row
        if scenario == "gpu":
            jobs.append(start(out, "gpu", "gpu"))
            return Row(scenario, observe(jobs[0], gateway, window))
        if scenario == "python":
            jobs.append(start(out, "python", "python"))
            return Row(scenario, observe(jobs[0], gateway, window))
        if scenario == "loop_starved":
            others = hogs(HOG_CPU, 2)
            jobs.append(start(out, "loop_starved", "python"))
            pin_process(jobs[0].pid, {HOG_CPU})
            row = Row(scenario, observe(jobs[0], gateway, window))
            pin_process(jobs[0].pid, set(os.sched_getaffinity(0)) - {HOG_CPU})
            row.action, row.after = "pin the loop off the hogs' CPU", observe(jobs[0], gateway, window)
            return row
        raise SystemExit(f"unknown scenario {scenario}")
    finally:
        stop([j.proc for j in jobs] + others)


def cells(seen: Seen | None) -> str:
    if seen is None:
        return ""
    return f"{seen.samples_per_s:.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/loop_scenarios"))
    ap.add_argument("--scenarios", default=",".join(EXPECTED))
    ap.add_argument("--window", type=float, default=8.0)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    gateway = NvmlGateway()
    if not gateway.open():
        raise SystemExit("loop_scenarios: NVML is not available")
    rows = []
    t0 = time.time()
    for scenario in a.scenarios.split(","):
        row = run(scenario, out, gateway, a.window)
        rows.append(row)
        b = row.before.b
        print(f"{scenario}: {describe(b) if b else 'no breakdown'}; findings {row.before.findings}", flush=True)
        if row.after and row.after.b:
            print(f"{scenario} after: {describe(row.after.b)}; findings {row.after.findings}", flush=True)
    head = "| scenario | GPU busy | " + " | ".join(SHARES) + " | largest | finding (advice) | samples/s | action "
    head += "| samples/s after | pass |"
    lines = [head, "|" + "---|" * (len(SHARES) + 8)]
    for r in rows:
        b = r.before.b
        shares = " | ".join(f"{b.shares[s]:.2f}" if b else "-" for s in SHARES)
        found = ", ".join(
            f["code"] + (f"({f['suggestion']['action']})" if f.get("suggestion") else "") for f in r.before.findings
        )
        busy = "-" if b is None or b.gpu_busy is None else f"{b.gpu_busy:.0%}"
        lines.append(
            f"| {r.scenario} | {busy} | {shares} | {b.largest if b else '-'} | {found or 'none'} | "
            f"{r.before.samples_per_s:.0f} | {r.action} | {cells(r.after)} | {'yes' if r.passed() else 'NO'} |"
        )
    table = "\n".join(lines)
    print(table)
    print(f"ran {time.time() - t0:.0f} s")
    (out / "table.md").write_text(table + "\n")
    dump = {
        r.scenario: {
            "before": {"loop": r.before.b and r.before.b.to_json(), "findings": r.before.findings},
            "samples_per_s": r.before.samples_per_s,
            "action": r.action,
            "after": r.after and {"loop": r.after.b and r.after.b.to_json(), "samples_per_s": r.after.samples_per_s},
            "passed": r.passed(),
        }
        for r in rows
    }
    (out / "results.json").write_text(json.dumps(dump, indent=2))
    sys.exit(0 if all(r.passed() for r in rows) else 1)


if __name__ == "__main__":
    main()
