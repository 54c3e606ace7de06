"""Prove affmon on a real GPU: plant each CPU-placement scenario under a real training job,
let affmon diagnose it and apply its own fix to the running job, and measure samples/s
before and after.

Run on a GPU machine from the repository root (needs torch and torchvision; affmon runs
from this checkout through ``python -m affmon``)::

    python bench/gpu_scenarios.py [--out DIR] [--scenarios clean,hogs,...] [--window 8]

For each scenario: start the job(s) (``bench/train_job.py``, ResNet-18 with 4 DataLoader
workers doing CPU-side augmentation) and the disturbance, measure ``--window`` seconds,
run ``affmon diagnose --json``, then for every job with a warn or bad finding run
``affmon pin PID --suggest --with-children`` (adding ``--isolate`` when the suggestion
lists processes to move off, as affmon's own advice says), measure again, and print a
table: scenario, samples/s before, findings, action, samples/s after, after / clean.
The overlap scenario (two jobs on one GPU) is compared with two unpinned jobs on that
GPU (``clean_pair``), measured in the same run.
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

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
RATE = re.compile(r"RATE t=([\d.]+) samples_per_s=([\d.]+)")
ALL = ["clean", "clean_pair", "hogs", "narrow", "overlap", "single_core"]


@dataclass
class Job:
    name: str
    proc: subprocess.Popen[str]
    log: Path
    pid: int = 0

    def rates(self) -> list[tuple[float, float]]:
        return [(float(t), float(r)) for t, r in RATE.findall(self.log.read_text())]


@dataclass
class Result:
    scenario: str
    before: float
    findings: list[str]
    actions: list[str]
    after: float
    per_job: dict[str, tuple[float, float]] = field(default_factory=dict)
    baseline: str = "clean"


def start_job(name: str, out: Path, prefix: list[str], seconds: float, env: dict[str, str] | None = None) -> Job:
    log = out / f"{name}.log"
    cmd = [*prefix, PY, str(ROOT / "bench/train_job.py"), "--seconds", str(seconds), "--report-every", "2"]
    proc = subprocess.Popen(
        cmd,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, **(env or {})},
    )
    return Job(name, proc, log)


def wait_ready(jobs: list[Job], timeout: float = 180) -> None:
    end = time.time() + timeout
    for job in jobs:
        while time.time() < end:
            m = re.search(r"READY pid=(\d+)", job.log.read_text())
            if m:
                job.pid = int(m.group(1))
                break
            if job.proc.poll() is not None:
                raise RuntimeError(f"{job.name} exited: {job.log.read_text()[-2000:]}")
            time.sleep(0.5)
        else:
            raise RuntimeError(f"{job.name} never became ready")


def mean_rate(job: Job, since: float, until: float) -> float:
    """Mean of the RATE lines whose window ended in [since, until] (job-relative seconds)."""
    values = [r for t, r in job.rates() if since < t <= until]
    return sum(values) / len(values) if values else float("nan")


def job_clock(job: Job) -> float:
    rates = job.rates()
    return rates[-1][0] if rates else 0.0


def measure(jobs: list[Job], window: float) -> dict[str, float]:
    """Mean rate over about ``window`` seconds from now. A RATE line covers the 2 s before
    it, so the line in progress (partly before now) is skipped."""
    starts = {j.name: job_clock(j) + 2.0 for j in jobs}
    time.sleep(window + 4.5)
    return {j.name: mean_rate(j, starts[j.name], starts[j.name] + window + 2.5) for j in jobs}


def affmon(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([PY, "-m", "affmon", *args], capture_output=True, text=True, env=env, timeout=120)


def stop(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    for p in procs:
        p.wait()


def start_hogs(n: int) -> list[subprocess.Popen[str]]:
    return [subprocess.Popen([PY, "-c", "while True: pass"], start_new_session=True, text=True) for _ in range(n)]


def plant(scenario: str, out: Path, seconds: float) -> tuple[list[Job], list[subprocess.Popen[str]]]:
    ncpu = os.cpu_count() or 1
    if scenario == "clean":
        return [start_job("clean", out, [], seconds)], []
    if scenario == "clean_pair":
        return [start_job("pair_a", out, [], seconds), start_job("pair_b", out, [], seconds)], []
    if scenario == "hogs":  # other tenants: more busy threads than cores
        return [start_job("hogs", out, [], seconds)], start_hogs(ncpu)
    if scenario == "narrow":
        return [start_job("narrow", out, ["taskset", "-c", "0-1"], seconds)], []
    if scenario == "narrow_omp16":  # the narrow mask, but thread pools sized for the whole machine
        env = {"OMP_NUM_THREADS": str(ncpu)}
        return [start_job("narrow_omp16", out, ["taskset", "-c", "0-1"], seconds, env)], []
    if scenario == "single_core":  # DataLoader workers confined to the main thread's core
        return [start_job("single_core", out, ["taskset", "-c", "3"], seconds)], []
    if scenario == "overlap":
        return [
            start_job("overlap_a", out, ["taskset", "-c", f"0-{ncpu // 2 - 1}"], seconds),
            start_job("overlap_b", out, ["taskset", "-c", f"{ncpu // 4}-{ncpu // 4 + ncpu // 2 - 1}"], seconds),
        ], []
    raise SystemExit(f"unknown scenario {scenario}")


def fix(pid: int, findings: list[dict[str, Any]], log: Path) -> str:
    """Apply affmon's own fix to a job with warn/bad ``findings``, as its advice says:
    ``pin PID --suggest --with-children``, plus ``--isolate`` when the suggestion lists
    processes to move off. Returns what was done, in words; the JSON answer goes to ``log``."""
    suggestion = next((f["suggestion"] for f in findings if f.get("suggestion")), None)
    args = ["pin", str(pid), "--suggest", "--with-children", "--json"]
    if suggestion and suggestion.get("move_off"):
        args.insert(4, "--isolate")
    pinned = affmon(*args)
    log.write_text(pinned.stdout + pinned.stderr)
    result = json.loads(pinned.stdout) if pinned.stdout.strip() else {}
    flags = " ".join(a for a in args[2:] if a.startswith("--") and a != "--json")
    moved = len([t for t in result.get("threads", []) if t["status"] == "moved"])
    return (
        f"pin {flags} -> {result.get('cpus', '?')}"
        + (f", moved {moved} threads off" if moved else "")
        + ("" if result.get("ok") else f" FAILED: {result.get('error') or pinned.stderr.strip()}")
    )


def run(scenario: str, out: Path, window: float) -> Result:
    jobs, others = plant(scenario, out, seconds=4 * window + 60)
    try:
        wait_ready(jobs)
        time.sleep(2)
        before = measure(jobs, window)
        diag = affmon("diagnose", "--json")
        (out / f"{scenario}.diagnose.json").write_text(diag.stdout + diag.stderr)
        findings = json.loads(diag.stdout)["findings"] if diag.stdout.strip() else []
        pids = {j.pid for j in jobs}
        bad = [f for f in findings if f["severity"] in ("warn", "bad") and f["pid"] in pids]
        codes = sorted({f"{f['code']}({f['severity']})" for f in findings})
        actions: list[str] = []
        for job in jobs:
            mine = [f for f in bad if f["pid"] == job.pid]
            if mine:
                actions.append(f"{job.name}: " + fix(job.pid, mine, out / f"{scenario}.{job.name}.pin.json"))
        after = measure(jobs, window) if actions else before
        per_job = {j.name: (before[j.name], after[j.name]) for j in jobs}
        total_before, total_after = sum(before.values()), sum(after.values())
        return Result(scenario, total_before, codes, actions or ["none"], total_after, per_job)
    finally:
        stop([j.proc for j in jobs] + others)
        affmon("undo", "--all")  # leave the machine as found (hogs are gone anyway)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpu_scenarios"))
    ap.add_argument("--scenarios", default=",".join(ALL))
    ap.add_argument("--window", type=float, default=8.0, help="seconds measured before and after")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ["XDG_STATE_HOME"] = str(out / "state")
    results: dict[str, Result] = {}
    for scenario in a.scenarios.split(","):
        results[scenario] = run(scenario, out, a.window)
        print(f"{scenario}: {results[scenario]}", flush=True)
    clean = results.get("clean")
    pair = results.get("clean_pair")
    lines = [
        "| scenario | samples/s before | findings (all jobs on the machine) | action affmon took "
        "| samples/s after | after / clean |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        base = pair if name == "overlap" and pair else clean
        ratio = f"{r.after / base.after:.2f}" if base and base.after == base.after else "?"
        if name == "overlap" and pair:
            ratio += " (of clean_pair)"
        lines.append(
            f"| {name} | {r.before:.0f} | {', '.join(r.findings) or 'none'} | {'; '.join(r.actions)} | "
            f"{r.after:.0f} | {ratio} |"
        )
    table = "\n".join(lines)
    print(table)
    (out / "table.md").write_text(table + "\n")
    (out / "results.json").write_text(json.dumps({k: vars(v) for k, v in results.items()}, indent=2))


if __name__ == "__main__":
    main()
