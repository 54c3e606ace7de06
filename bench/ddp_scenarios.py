"""Multi-GPU proof (issue 8): a DDP job, one rank per GPU, in several CPU placements;
affmon's findings for each, throughput before and after ``affmon pin --suggest`` on the
running ranks, and affmon's plan (``affmon exec --from-env`` under ``torchrun --no-python``)
against torchrun's own ``--numa-binding`` where the installed PyTorch has it.

Run on a machine with two or more GPUs, from the repository root::

    python bench/ddp_scenarios.py [--gpus 2] [--window 10] [--out DIR]

Placements: ``unpinned``; ``overlap`` (every rank forced onto the same quarter of the
CPUs); ``cross_numa`` (each rank on a NUMA node that is not its GPU's; skipped, and said,
on a machine with one node); ``affmon_plan``; ``torch_numa`` (``--numa-binding node``).
Prints a table; the machine's topology as affmon reads it beside ``nvidia-smi topo -m``
goes to OUT/topology.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_scenarios import PY, ROOT, affmon, stop

RATE = re.compile(r"RATE rank=(\d+) t=([\d.]+) samples_per_s=([\d.]+)")
READY = re.compile(r"READY rank=(\d+) pid=(\d+)")


@dataclass
class Run:
    name: str
    proc: subprocess.Popen[str]
    log: Path

    def ranks(self) -> dict[int, int]:
        return {int(r): int(p) for r, p in READY.findall(self.log.read_text())}

    def rates(self) -> list[tuple[int, float, float]]:
        return [(int(r), float(t), float(v)) for r, t, v in RATE.findall(self.log.read_text())]


def launch(
    name: str, out: Path, gpus: int, seconds: float, prefix: list[str], torchrun_args: list[str], program: list[str]
) -> Run:
    log = out / f"{name}.log"
    # torchrun runs python itself unless --no-python, where ``program`` names what to run.
    job = [*program, str(ROOT / "bench/ddp_job.py"), "--seconds", str(seconds), "--report-every", "2"]
    cmd = [*prefix, "torchrun", "--standalone", f"--nproc-per-node={gpus}", *torchrun_args, *job]
    proc = subprocess.Popen(
        cmd,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return Run(name, proc, log)


def wait_ready(run: Run, gpus: int, timeout: float = 240) -> dict[int, int]:
    end = time.time() + timeout
    while time.time() < end:
        ranks = run.ranks()
        if len(ranks) == gpus:
            return ranks
        if run.proc.poll() is not None:
            raise RuntimeError(f"{run.name} exited: {run.log.read_text()[-3000:]}")
        time.sleep(0.5)
    raise RuntimeError(f"{run.name}: ranks never became ready: {run.log.read_text()[-3000:]}")


def measure(run: Run, window: float) -> float:
    """Sum over ranks of each rank's mean rate over about ``window`` seconds from now."""
    clock = {r: t for r, t, _ in run.rates()}
    time.sleep(window + 4.5)
    total = 0.0
    for rank in {r for r, _, _ in run.rates()}:
        since = clock.get(rank, 0.0) + 2.0
        values = [v for r, t, v in run.rates() if r == rank and since < t <= since + window + 2.5]
        total += sum(values) / len(values) if values else float("nan")
    return total


def numa_nodes() -> dict[int, str]:
    topo = json.loads(affmon("topology", "--json").stdout)
    return {n["id"]: n["cpus"] for n in topo["numa_nodes"] if n["cpus"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--window", type=float, default=10.0)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/ddp_scenarios"))
    ap.add_argument("--placements", default="", help="comma-separated subset (default: all)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ["XDG_STATE_HOME"] = str(out / "state")
    ncpu = os.cpu_count() or 1
    topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True).stdout
    (out / "topology.txt").write_text(
        f"== nvidia-smi topo -m\n{topo}\n== affmon topology --json\n{affmon('topology', '--json').stdout}\n"
        + (
            f"== lstopo\n{subprocess.run(['lstopo-no-graphics'], capture_output=True, text=True).stdout}"
            if shutil.which("lstopo-no-graphics")
            else "== lstopo: not installed\n"
        )
    )
    nodes = numa_nodes()
    has_numa_binding = "--numa-binding" in subprocess.run(["torchrun", "--help"], capture_output=True, text=True).stdout
    placements: list[tuple[str, list[str], list[str], list[str]]] = [
        ("unpinned", [], [], []),
        ("overlap", ["taskset", "-c", f"0-{max(ncpu // 4, 1) - 1}"], [], []),
        ("affmon_plan", [], ["--no-python"], [str(ROOT / "bench/affmon_cmd"), "exec", "--from-env", "--", PY]),
    ]
    notes = []
    if len(nodes) > 1:
        notes.append("cross_numa: not automated yet on multi-node machines")  # needs per-rank masks
    else:
        notes.append(f"cross_numa: skipped, the machine has one NUMA node ({list(nodes.values())})")
    if has_numa_binding:
        placements.append(("torch_numa", [], ["--numa-binding", "node"], []))
    else:
        notes.append("torch_numa: this PyTorch's torchrun has no --numa-binding")
    if a.placements:
        placements = [p for p in placements if p[0] in a.placements.split(",")]
    rows = []
    for name, prefix, targs, program in placements:
        run = launch(name, out, a.gpus, 4 * a.window + 90, prefix, targs, program)
        try:
            ranks = wait_ready(run, a.gpus)
            time.sleep(2)
            before = measure(run, a.window)
            diag = affmon("diagnose", "--json")
            (out / f"{name}.diagnose.json").write_text(diag.stdout + diag.stderr)
            findings = json.loads(diag.stdout)["findings"] if diag.stdout.strip() else []
            mine = [f for f in findings if f["pid"] in ranks.values()]
            actions = []
            for rank, pid in sorted(ranks.items()):
                if not any(f["pid"] == pid and f["severity"] in ("warn", "bad") for f in mine):
                    continue
                pinned = affmon("pin", str(pid), "--suggest", "--with-children", "--json")
                result = json.loads(pinned.stdout) if pinned.stdout.strip() else {}
                actions.append(
                    f"rank {rank}: pin -> {result.get('cpus', '?')}" + ("" if result.get("ok") else " FAILED")
                )
            after = measure(run, a.window) if actions else before
            codes = sorted({f"{f['code']}({f['severity']})" for f in mine})
            rows.append((name, before, codes, actions or ["none"], after))
            print(rows[-1], flush=True)
        finally:
            stop([run.proc])
            affmon("undo", "--all")
    plan = next((r for r in rows if r[0] == "affmon_plan"), None)
    lines = [
        "| placement | samples/s (all ranks) | findings | affmon pin | after | after / affmon plan |",
        "|---|---|---|---|---|---|",
    ]
    for name, before, codes, actions, after in rows:
        ratio = f"{after / plan[4]:.2f}" if plan else "?"
        lines.append(
            f"| {name} | {before:.0f} | {', '.join(codes) or 'none'} | {'; '.join(actions)} | {after:.0f} | {ratio} |"
        )
    table = "\n".join(lines + [""] + [f"- {n}" for n in notes])
    print(table)
    (out / "table.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
