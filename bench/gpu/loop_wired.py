"""Prove the loop breakdown through affmon's own commands on a real GPU: for each
``bench/workloads/loop_job.py`` mode, ``affmon diagnose --pid PID --json`` must show the rank's loop
with the expected largest share, a GPU busy share, and the expected finding (and no other
loop finding); ``affmon snapshot --pid PID --json`` must carry the same ``loop`` object.

Run on a GPU machine from the repository root (torch and torchvision; affmon from this
checkout), as root::

    python -m bench.gpu.loop_wired [--samples 6] [--modes data,gpu,python]

Expected: ``data`` (one DataLoader worker, heavy decode): data_wait largest, INPUT_BOUND;
``gpu``: gpu_wait largest, no loop finding; ``python``: on_cpu largest, LOOP_BOUND.
Without a GPU (``--cpu-only``) it runs ``tests/helpers/loop_workload.py queue`` instead and expects
data_wait largest and no loop finding (no GPU busy share). Prints one row per mode and
exits 1 when any row fails.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
EXPECTED = {
    "data": ("data_wait", {"INPUT_BOUND"}),
    "gpu": ("gpu_wait", set()),
    "python": ("on_cpu", {"LOOP_BOUND"}),
    "cpu-only": ("data_wait", set()),
}
SHARES = ("on_cpu", "cpu_wait", "data_wait", "gpu_wait", "other")


def start(mode: str) -> tuple[subprocess.Popen[str], int]:
    if mode == "cpu-only":
        cmd = [sys.executable, str(ROOT / "tests" / "helpers" / "loop_workload.py"), "queue"]
    else:
        cmd = [sys.executable, "-m", "bench.workloads.loop_job", mode, "--seconds", "300"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True, cwd=ROOT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.stdout is not None:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("{"):
            return proc, int(json.loads(line)["pid"])
        if line.startswith("READY"):
            return proc, int(line.split("pid=")[1].split()[0])
    os.killpg(proc.pid, signal.SIGKILL)
    raise RuntimeError(f"{mode} never became ready")


def affmon(*args: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-m", "affmon", *args], capture_output=True, text=True, cwd=ROOT)
    if out.returncode not in (0, 1):
        raise RuntimeError(f"affmon {' '.join(args)}: exit {out.returncode}: {out.stderr.strip()}")
    data: dict[str, object] = json.loads(out.stdout)
    return data


def run(mode: str, samples: int) -> bool:
    proc, pid = start(mode)
    try:
        time.sleep(3.0)  # past the first steps
        diag = affmon("diagnose", "--pid", str(pid), "--json", "--samples", str(samples))
        snap = affmon("snapshot", "--pid", str(pid), "--json", "--interval", "2")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    loops = [entry for entry in diag["loops"] if entry["pid"] == pid]  # type: ignore[attr-defined]
    findings = {f["code"] for f in diag["findings"] if f["code"] in ("INPUT_BOUND", "LOOP_BOUND")}  # type: ignore[attr-defined]
    snap_loop = next((p.get("loop") for p in snap["processes"] if p["pid"] == pid), None)  # type: ignore[attr-defined]
    largest, wanted = EXPECTED[mode]
    ok = bool(loops) and snap_loop is not None
    if ok:
        loop = loops[0]
        got = max(SHARES, key=lambda s: loop[s] or 0.0)
        gpu_known = loop["gpu_busy"] is not None
        ok = got == largest and findings == wanted and (gpu_known or mode == "cpu-only")
        shares = " ".join(f"{s}={loop[s]:.2f}" for s in SHARES)
        print(
            f"{mode:<9} gpu_busy={loop['gpu_busy']} {shares} largest={got} samples={loop['samples']} "
            f"verdict={loop['verdict']} findings={sorted(findings)} snapshot_largest="
            f"{max(SHARES, key=lambda s: snap_loop[s] or 0.0)} {'PASS' if ok else 'FAIL'}"
        )
        print(f"          {loop['line']}")
    else:
        print(f"{mode:<9} no loop object (diagnose {bool(loops)}, snapshot {snap_loop is not None}) FAIL")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=6)
    ap.add_argument("--modes", default="data,gpu,python")
    ap.add_argument("--cpu-only", action="store_true", help="no GPU: the torch-free queue loop")
    a = ap.parse_args()
    modes = ["cpu-only"] if a.cpu_only else a.modes.split(",")
    results = [run(mode, a.samples) for mode in modes]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
