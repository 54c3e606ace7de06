"""Prove affmon on a real GPU: plant each CPU-placement scenario under a real training job,
let affmon diagnose it and apply its own fix to the running job, and measure samples/s
before and after.

Run on a GPU machine from the repository root (needs torch and torchvision; affmon runs
from this checkout through ``python -m affmon``)::

    python -m bench.gpu.gpu_scenarios [--out DIR] [--scenarios clean,hogs,...] [--window 8]

For each scenario: start the job(s) (``bench/workloads/train_job.py``, ResNet-18 with 4 DataLoader
workers doing CPU-side augmentation) and the disturbance, measure ``--window`` seconds,
run ``affmon diagnose --json``, then for every job with a warn or bad finding run
``affmon pin PID --suggest --with-children`` (adding ``--isolate`` when the suggestion
lists processes to move off, as affmon's own advice says), measure again, and print a
table: scenario, samples/s before, findings, action, samples/s after, after / clean.
The overlap scenario (two jobs on one GPU) is compared with two unpinned jobs on that
GPU (``clean_pair``), measured in the same run.

``--scenarios membw,spin`` plants other tenants beside a ResNet-50 job with 6 DataLoader
workers: ``membw``, one 16-thread numpy copier per core (memory bandwidth); ``spin``, 1.5
spinners per core. Each is compared arm by arm in one run, the job's placement undone
between arms: before; ``pin --suggest`` (with ``--isolate`` as the advice says); ``tune``
(``--settle``, ``--window``, 3 candidates); a hand split (the job on the first half of the
cores, every tenant thread on the other half). The table gives samples/s of each arm, tune
/ the best of the others, pin --suggest / the hand split, and the job's warn/bad findings
left after each. About 3.5 minutes per scenario with ``--window 8 --settle 3``.
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
PY = sys.executable
RATE = re.compile(r"RATE t=([\d.]+) samples_per_s=([\d.]+)")
ALL = ["clean", "clean_pair", "hogs", "narrow", "overlap", "single_core"]
# Compared arm by arm in one run (``compare``): before, pin --suggest, tune, a hand split.
COMPARED = ["membw", "spin"]
MEMBW_HOG = """
import threading, numpy as np
def copy():
    a = np.ones(1 << 23); b = np.empty_like(a)  # 64 MiB each: far past any cache
    while True:
        np.copyto(b, a)  # numpy drops the GIL for a plain copy
for _ in range(16):
    threading.Thread(target=copy).start()
"""


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


def start_job(
    name: str,
    out: Path,
    prefix: list[str],
    seconds: float,
    env: dict[str, str] | None = None,
    extra: Sequence[str] = (),
) -> Job:
    log = out / f"{name}.log"
    cmd = [*prefix, PY, "-m", "bench.workloads.train_job", "--seconds", str(seconds), "--report-every", "2", *extra]
    proc = subprocess.Popen(
        cmd,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        cwd=ROOT,
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


def affmon(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([PY, "-m", "affmon", *args], capture_output=True, text=True, env=env, timeout=timeout)


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


# -- membw, spin: every arm in one run ---------------------------------------------------


@dataclass
class Compared:
    scenario: str
    rates: dict[str, float]  # arm -> samples/s
    findings: dict[str, list[str]]  # arm -> warn/bad findings of the job left after it
    notes: dict[str, str]


def job_args() -> list[str]:
    """ResNet-50 with 6 DataLoader workers, where ``train_job.py`` can be told the model."""
    workers = ["--workers", "6"]
    return (
        [*workers, "--model", "resnet50"]
        if '"--model"' in (ROOT / "bench/workloads/train_job.py").read_text()
        else workers
    )


def start_tenants(scenario: str) -> list[subprocess.Popen[str]]:
    ncpu = os.cpu_count() or 1
    if scenario == "membw":  # memory bandwidth: one 16-thread numpy copier per core
        return [subprocess.Popen([PY, "-c", MEMBW_HOG], start_new_session=True, text=True) for _ in range(ncpu)]
    if scenario == "spin":  # 1.5 spinners per core
        return start_hogs(ncpu * 3 // 2)
    raise SystemExit(f"unknown scenario {scenario}")


def job_findings(pid: int, out: Path, name: str) -> list[str]:
    diag = affmon("diagnose", "--json", "--pid", str(pid))
    (out / f"{name}.diagnose.json").write_text(diag.stdout + diag.stderr)
    found = json.loads(diag.stdout)["findings"] if diag.stdout.strip() else []
    return sorted({f"{f['code']}({f['severity']})" for f in found if f["severity"] in ("warn", "bad")})


def set_all_threads(pids: list[int], cpus: str) -> None:
    for pid in pids:
        subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(pid)], capture_output=True, check=False)


def compare(scenario: str, out: Path, window: float, settle: float) -> Compared:
    """One job among the scenario's tenants; each arm measured in turn, undone before the next."""
    ncpu = os.cpu_count() or 1
    job = start_job(scenario, out, [], seconds=3600, extra=job_args())
    tenants: list[subprocess.Popen[str]] = []
    rates: dict[str, float] = {}
    findings: dict[str, list[str]] = {}
    notes: dict[str, str] = {}
    try:
        wait_ready([job])
        tenants = start_tenants(scenario)
        time.sleep(settle)
        rates["before"] = measure([job], window)[job.name]
        findings["before"] = job_findings(job.pid, out, f"{scenario}.before")
        diag = json.loads(affmon("diagnose", "--json", "--pid", str(job.pid)).stdout or '{"findings": []}')
        mine = [f for f in diag["findings"] if f["pid"] == job.pid and f["severity"] in ("warn", "bad")]
        notes["pin"] = fix(job.pid, mine or [{"suggestion": None}], out / f"{scenario}.pin.json")
        time.sleep(settle)
        rates["pin --suggest"] = measure([job], window)[job.name]
        findings["pin --suggest"] = job_findings(job.pid, out, f"{scenario}.pin")
        affmon("undo", "--all")
        tuned = affmon(
            "tune",
            str(job.pid),
            "--settle",
            str(settle),
            "--window",
            str(window),
            "--max-candidates",
            "3",
            "--json",
            timeout=400,
        )
        (out / f"{scenario}.tune.json").write_text(tuned.stdout + tuned.stderr)
        result = json.loads(tuned.stdout) if tuned.stdout.strip() else {}
        notes["tune"] = (
            f"row {result.get('chosen')}: {result.get('pinned_cpus') or 'unchanged'} ({result.get('score')})"
        )
        time.sleep(settle)
        rates["tune"] = measure([job], window)[job.name]
        findings["tune"] = job_findings(job.pid, out, f"{scenario}.tune")
        affmon("undo", "--all")
        half = ncpu // 2
        pinned = affmon("pin", str(job.pid), "--cpus", f"0-{half - 1}", "--with-children")
        notes["split"] = "job on 0-{}, tenants on {}-{}{}".format(
            half - 1, half, ncpu - 1, "" if pinned.returncode == 0 else f" (pin failed: {pinned.stderr.strip()})"
        )
        set_all_threads([t.pid for t in tenants], f"{half}-{ncpu - 1}")
        time.sleep(settle)
        rates["hand split"] = measure([job], window)[job.name]
        findings["hand split"] = job_findings(job.pid, out, f"{scenario}.split")
        return Compared(scenario, rates, findings, notes)
    finally:
        stop([job.proc, *tenants])
        affmon("undo", "--all")


def compared_table(results: list[Compared]) -> str:
    arms = ["before", "pin --suggest", "tune", "hand split"]
    lines = [
        "| scenario | " + " | ".join(f"{a} samples/s" for a in arms) + " | tune / best of the others "
        "| pin --suggest / hand split | findings left (pin --suggest; tune; hand split) |",
        "|---|" + "---|" * (len(arms) + 3),
    ]
    for r in results:
        others = max(v for k, v in r.rates.items() if k != "tune" and v == v)
        tune, pin, split = r.rates.get("tune", float("nan")), r.rates.get("pin --suggest"), r.rates.get("hand split")
        left = "; ".join(", ".join(r.findings.get(a, [])) or "none" for a in ("pin --suggest", "tune", "hand split"))
        lines.append(
            f"| {r.scenario} | "
            + " | ".join(f"{r.rates.get(a, float('nan')):.0f}" for a in arms)
            + f" | {tune / others:.2f} | {(pin or float('nan')) / (split or float('nan')):.2f} | {left} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpu_scenarios"))
    ap.add_argument("--scenarios", default=",".join(ALL))
    ap.add_argument("--window", type=float, default=8.0, help="seconds measured before and after")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds after each change (membw, spin; tune's)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ["XDG_STATE_HOME"] = str(out / "state")
    chosen = a.scenarios.split(",")
    compared = [compare(name, out, a.window, a.settle) for name in chosen if name in COMPARED]
    if compared:
        table = compared_table(compared)
        print(table)
        (out / "compared.md").write_text(table + "\n")
        (out / "compared.json").write_text(json.dumps([vars(c) for c in compared], indent=2))
    results: dict[str, Result] = {}
    for scenario in (name for name in chosen if name not in COMPARED):
        results[scenario] = run(scenario, out, a.window)
        print(f"{scenario}: {results[scenario]}", flush=True)
    if not results:
        return
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
