"""``affmon audit`` against real multi-rank jobs: each placement launched, audited while it
runs (text and JSON), then stopped; a table of exit statuses, verdicts and problem codes.

On a machine with two or more GPUs and torchrun (from the repository root)::

    python -m bench.gpu.audit_scenarios --gpus 2 --out /tmp/audit

runs bench/workloads/ddp_job.py (one rank per GPU) in four placements: ``unpinned`` (every rank on
every CPU: OVERLAP), ``overlap`` (every rank under ``taskset`` on the first quarter of the
CPUs: OVERLAP and NARROW), ``collapsed`` (each rank under ``taskset -c`` on one CPU, the
first of its planned slice on a one-node machine: COLLAPSED, and its DataLoader workers
with it) and ``plan`` (``affmon exec --from-env`` under ``torchrun --no-python``: on plan,
exit 0). Without GPUs or torch (``--cpu-only``, or found so) it runs tests/helpers/audit_job.py,
a pretend job whose ranks carry LOCAL_RANK, in ``separate``, ``overlap`` and
``collapsed`` placements instead. Writes OUT/SCENARIO.txt, OUT/SCENARIO.json and
OUT/audit.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
PY = sys.executable


def affmon(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([PY, "-m", "affmon", *args], capture_output=True, text=True, env=env, timeout=120)


def audit_and_save(out: Path, name: str, pid: int) -> dict[str, Any]:
    text = affmon("audit", "--pid", str(pid))
    data = affmon("audit", "--pid", str(pid), "--json")
    (out / f"{name}.txt").write_text(f"$ affmon audit --pid {pid}\n{text.stdout}{text.stderr}exit {text.returncode}\n")
    (out / f"{name}.json").write_text(data.stdout or data.stderr)
    ranks = json.loads(data.stdout)["ranks"] if data.returncode in (0, 1) else []
    return {
        "scenario": name,
        "exit": text.returncode,
        "verdicts": [r["verdict"] for r in ranks],
        "codes": sorted({p["code"] for r in ranks for p in r["problems"]}),
        "masks": [r["mask"] for r in ranks],
        "plans": [r["plan"]["cpus"] if r["plan"] else None for r in ranks],
    }


# -- with GPUs -------------------------------------------------------------------------


def gpu_scenarios(gpus: int) -> list[tuple[str, list[str], list[str], list[str]]]:
    """(name, command prefix, torchrun arguments, program per rank)."""
    ncpu = len(os.sched_getaffinity(0))
    step = max(ncpu // gpus, 1)
    one_core = f'exec taskset -c "$((LOCAL_RANK * {step}))" "$0" "$@"'
    return [
        ("unpinned", [], [], []),
        ("overlap", ["taskset", "-c", f"0-{max(ncpu // 4, 1) - 1}"], [], []),
        ("collapsed", [], ["--no-python"], ["sh", "-c", one_core, PY]),
        ("plan", [], ["--no-python"], [str(ROOT / "bench/gpu/affmon_cmd"), "exec", "--from-env", "--", PY]),
    ]


def run_gpu(out: Path, gpus: int) -> list[dict[str, Any]]:
    from bench.gpu.ddp_scenarios import launch, stop_tree, wait_ready

    rows = []
    for name, prefix, torchrun_args, program in gpu_scenarios(gpus):
        run = launch(name, out, gpus, 600.0, prefix, torchrun_args, program)
        try:
            wait_ready(run, gpus)
            time.sleep(2)  # every DataLoader worker started
            rows.append(audit_and_save(out, name, run.proc.pid))
        finally:
            stop_tree(run.proc)
    return rows


# -- without -----------------------------------------------------------------------------


def cpu_scenarios() -> list[tuple[str, list[str]]]:
    first, second = sorted(os.sched_getaffinity(0))[:2]
    return [
        ("separate", ["--rank", str(first), "--rank", str(second)]),
        ("overlap", ["--rank", f"{first},{second}", "--rank", f"{first},{second}"]),
        ("collapsed", ["--rank", str(first), "--rank", f"{first},{second}:{second}"]),
    ]


def run_cpu(out: Path) -> list[dict[str, Any]]:
    rows = []
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "CUDA_VISIBLE_DEVICES")}
    for name, args in cpu_scenarios():
        job = subprocess.Popen(
            [PY, str(ROOT / "tests/helpers/audit_job.py"), "--visible", "1,0", *args],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
        try:
            assert job.stdout is not None
            info = json.loads(job.stdout.readline())
            rows.append(audit_and_save(out, name, info["launcher"]))
        finally:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| placement | exit | verdicts | problems | masks | plans |", "|---|---|---|---|---|---|"]
    for r in rows:
        cells: list[Callable[[Any], str]] = [str, str, ", ".join, ", ".join, ", ".join, ", ".join]
        values = [r["scenario"], r["exit"], r["verdicts"], r["codes"], r["masks"], [p or "-" for p in r["plans"]]]
        lines.append("| " + " | ".join(f(v) or "-" for f, v in zip(cells, values, strict=True)) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--out", default="/tmp/audit")
    ap.add_argument("--cpu-only", action="store_true")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with_gpus = not a.cpu_only and shutil.which("torchrun") is not None and shutil.which("nvidia-smi") is not None
    rows = run_gpu(out, a.gpus) if with_gpus else run_cpu(out)
    text = table(rows)
    (out / "audit.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
