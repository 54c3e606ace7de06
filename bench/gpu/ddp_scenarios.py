"""Multi-GPU proof: a DDP job, one rank per GPU, in several CPU placements;
affmon's findings for each, throughput before and after ``affmon pin --suggest`` on the
running ranks, and affmon's plan (``affmon exec --from-env`` under ``torchrun --no-python``)
against torchrun's own ``--numa-binding`` where the installed PyTorch has it.

Run on a machine with two or more GPUs, from the repository root (bench/gpu/ddp_device.sh
wraps it with hwloc and bundles the results)::

    python -m bench.gpu.ddp_scenarios [--gpus 2] [--window 10] [--rounds N] [--placements ...] [--out DIR]
    python -m bench.gpu.ddp_scenarios --gpus 2 --window 10 --states 5

Placements, each in its own launch: ``unpinned``; ``overlap`` (every rank forced onto the
same quarter of the CPUs); ``affmon_plan``; ``cross_numa`` (each rank on a NUMA node that
is not its GPU's, by bench/numa/cross_numa.py; skipped, and said, on a machine with one node);
``torch_numa`` (``--numa-binding node``). Rounds after the first run in alternating
order. ``--states`` instead changes the placement of one running job (see run_states):
between launches the same placement varied by 10% on the H200 VMs, within one job
far less. Prints tables (OUT/table.md, OUT/states.md); the machine as affmon, nvidia-smi
and hwloc read it goes to OUT/topology.txt.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from bench.gpu.gpu_scenarios import PY, ROOT, affmon, fix

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
    job = [*program, str(ROOT / "bench/workloads/ddp_job.py"), "--seconds", str(seconds), "--report-every", "2"]
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


def write_topology(out: Path) -> None:
    """The machine as affmon reads it, beside nvidia-smi's and hwloc's readings."""

    def show(cmd: list[str]) -> str:
        if not shutil.which(cmd[0]):
            return f"== {' '.join(cmd)}: not installed\n"
        done = subprocess.run(cmd, capture_output=True, text=True)
        return f"== {' '.join(cmd)}\n{done.stdout}{done.stderr}\n"

    text = show(["nvidia-smi", "topo", "-m"]) + show(["lstopo-no-graphics", "--no-io"]) + show(["lstopo-no-graphics"])
    text += f"== affmon topology\n{affmon('topology').stdout}\n== affmon plan\n{affmon('plan').stdout}\n"
    text += f"== affmon topology --json\n{affmon('topology', '--json').stdout}\n"
    (out / "topology.txt").write_text(text)


Placement = tuple[str, list[str], list[str], list[str]]


def placements(gpus: int) -> tuple[list[Placement], list[str]]:
    """(name, command prefix, torchrun arguments, program run per rank) for each placement
    this machine can show, and a note for each it cannot."""
    ncpu = os.cpu_count() or 1
    nodes = numa_nodes()
    has_numa_binding = "--numa-binding" in subprocess.run(["torchrun", "--help"], capture_output=True, text=True).stdout
    found: list[Placement] = [
        ("unpinned", [], [], []),
        # every rank and its workers on the same quarter of the CPUs
        ("overlap", ["taskset", "-c", f"0-{max(ncpu // 4, 1) - 1}"], [], []),
        ("affmon_plan", [], ["--no-python"], [str(ROOT / "bench/gpu/affmon_cmd"), "exec", "--from-env", "--", PY]),
    ]
    notes = []
    if len(nodes) > 1:
        found.append(("cross_numa", [], ["--no-python"], [PY, str(ROOT / "bench/numa/cross_numa.py"), "--", PY]))
    else:
        notes.append(
            f"cross_numa: not run, the machine has one NUMA node (node {', '.join(map(str, nodes))}: CPUs "
            f"{', '.join(nodes.values())})"
        )
    if has_numa_binding:
        found.append(("torch_numa", [], ["--numa-binding", "node"], []))
    else:
        notes.append("torch_numa: not run, this PyTorch's torchrun has no --numa-binding")
    return found, notes


@dataclass
class Row:
    name: str
    before: float = float("nan")
    findings: list[str] | None = None
    actions: list[str] | None = None
    after: float = float("nan")
    after_findings: list[str] | None = None
    masks: str = ""
    error: str = ""


def diagnose(out: Path, tag: str, pids: set[int]) -> list[dict[str, Any]]:
    diag = affmon("diagnose", "--json")
    (out / f"{tag}.diagnose.json").write_text(diag.stdout + diag.stderr)
    findings = json.loads(diag.stdout)["findings"] if diag.stdout.strip() else []
    return [f for f in findings if f["pid"] in pids]


def mean(values: list[float]) -> float:
    """The mean of the values that are numbers (a failed measurement is NaN)."""
    good = [v for v in values if v == v]
    return sum(good) / len(good) if good else float("nan")


def fix_ranks(ranks: dict[int, int], findings: list[dict[str, Any]], out: Path, tag: str) -> list[str]:
    """affmon's own fix (gpu_scenarios.fix) on each rank with a warn/bad finding, in rank order."""
    done = []
    for rank, pid in sorted(ranks.items()):
        bad = [f for f in findings if f["pid"] == pid and f["severity"] in ("warn", "bad")]
        if bad:
            done.append(f"rank {rank}: " + fix(pid, bad, out / f"{tag}.rank{rank}.pin.json"))
    return done


def codes(findings: list[dict[str, Any]]) -> list[str]:
    return sorted({f"{f['code']}({f['severity']})" for f in findings})


def stop_tree(proc: subprocess.Popen[str]) -> None:
    """Kill torchrun and every process under it, and wait until they are gone. Killing
    torchrun's process group is not enough: its ranks outlive it and keep training (the
    first full run measured each placement beside the previous placements' ranks)."""
    try:
        root = psutil.Process(proc.pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for p in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(tree, timeout=60)
    proc.wait()


def kill_leftovers() -> list[int]:
    """Kill any process still running bench/workloads/ddp_job.py (from an earlier, interrupted run)."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        if any(str(c).endswith("bench/workloads/ddp_job.py") for c in p.info["cmdline"] or []) and p.pid != os.getpid():
            found.append(p)
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
    psutil.wait_procs(found, timeout=60)
    return [p.pid for p in found]


def run_placement(p: Placement, out: Path, gpus: int, window: float, tag: str) -> Row:
    name, prefix, targs, program = p
    row = Row(name)
    left = kill_leftovers()
    if left:
        print(f"  {name}: killed leftover ranks {left} before starting", flush=True)
    started = time.time()
    run = launch(tag, out, gpus, 4 * window + 120, prefix, targs, program)
    recorder = None
    try:
        ranks = wait_ready(run, gpus)
        row.masks = "; ".join(
            m for m in re.findall(r"READY rank=\d+ pid=\d+ gpu=\d+ affinity=(\[[^]]*\])", run.log.read_text())
        )
        print(f"  {name}: ranks {ranks} ready after {time.time() - started:.0f} s", flush=True)
        recorder = subprocess.Popen(
            [PY, "-m", "affmon", "record", "--force", str(out / f"{tag}.jsonl"), "--duration", str(3 * window + 30)],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL,
            stderr=(out / f"{tag}.record.err").open("w"),
        )
        time.sleep(2)
        row.before = measure(run, window)
        mine = diagnose(out, tag, set(ranks.values()))
        row.findings = codes(mine)
        row.actions = fix_ranks(ranks, mine, out, tag)
        if row.actions:
            row.after = measure(run, window)
            row.after_findings = codes(diagnose(out, f"{tag}.after", set(ranks.values())))
        else:
            row.after, row.after_findings = row.before, row.findings
    except Exception as exc:  # one placement failing must not lose the others' results
        row.error = f"{type(exc).__name__}: {str(exc)[-600:]}".replace("\n", " / ").replace("|", "/")
    finally:
        if recorder is not None:
            recorder.terminate()
            recorder.wait()
        stop_tree(run.proc)
        affmon("undo", "--all")
    print(f"  {name}: {row} ({time.time() - started:.0f} s)", flush=True)
    return row


def run_states(out: Path, gpus: int, window: float, cycles: int) -> str:
    """One DDP job whose placement is changed while it runs, so that every state is
    measured under the same launch (between launches the same placement varied by 10% on
    a 2-GPU H200 machine): U all CPUs (unpinned, as launched); P affmon's plan (each
    rank's tree pinned to the CPUs ``affmon exec --gpu R`` gives it); O overlap (every
    rank's tree on the first quarter of the CPUs); F affmon's fix of O (``pin --suggest``
    on each rank with a finding). Cycles alternate U,P,O,F and O,F,P,U; ``undo --all``
    returns to U. Each state is diagnosed, then measured for ``window`` seconds."""
    ncpu = os.cpu_count() or 1
    quarter = f"0-{max(ncpu // 4, 1) - 1}"
    run = launch("states", out, gpus, cycles * 4 * (window + 16) + 120, [], [], [])
    results: dict[str, list[float]] = {s: [] for s in "UPOF"}
    findings: dict[str, set[str]] = {s: set() for s in "UPOF"}
    log = []
    try:
        ranks = wait_ready(run, gpus)
        pids = set(ranks.values())
        plan = {}
        for rank in ranks:
            dry = affmon("exec", "--gpu", str(rank), "--dry-run", "--", "true").stdout
            plan[rank] = dry.split("would pin to CPUs ", 1)[1].split()[0]
        log.append(f"ranks {ranks}; plan {plan}; overlap CPUs {quarter}")

        def pin_all(cpus: dict[int, str]) -> None:
            for rank, pid in sorted(ranks.items()):
                done = affmon("pin", str(pid), "--cpus", cpus[rank], "--with-children", "--json")
                if done.returncode != 0:
                    raise RuntimeError(f"pin {pid} --cpus {cpus[rank]}: {done.stderr.strip()}")

        def enter(state: str, cycle: int) -> None:
            if state == "U":
                affmon("undo", "--all")
            elif state == "P":
                pin_all(plan)
            elif state == "O":
                pin_all({r: quarter for r in ranks})
            elif state == "F":
                found = diagnose(out, f"states.c{cycle}.O.fix", pids)
                log.extend(f"cycle {cycle} F {done}" for done in fix_ranks(ranks, found, out, f"states.c{cycle}"))
            seen = diagnose(out, f"states.c{cycle}.{state}", pids)
            findings[state].update(codes([f for f in seen if f["severity"] in ("warn", "bad")]))

        for cycle in range(1, cycles + 1):
            for state in "UPOF" if cycle % 2 else "OFPU":
                enter(state, cycle)
                rate = measure(run, window)
                results[state].append(rate)
                log.append(f"cycle {cycle} {state}: {rate:.0f} samples/s")
                print(f"  states: {log[-1]}", flush=True)
    except Exception as exc:
        log.append(f"failed: {type(exc).__name__}: {str(exc)[-600:]}")
    finally:
        stop_tree(run.proc)
        affmon("undo", "--all")

    names = {"U": "unpinned (all CPUs)", "P": "affmon's plan", "O": "overlap", "F": "affmon's fix of overlap"}
    lines = ["| state | samples/s per cycle | mean | / affmon's plan | warn/bad findings |", "|---|---|---|---|---|"]
    for state in "UPOF":
        values = results[state]
        lines.append(
            f"| {names[state]} | {', '.join(f'{v:.0f}' for v in values)} | {mean(values):.0f} "
            f"| {mean(values) / mean(results['P']):.2f} | {', '.join(sorted(findings[state])) or 'none'} |"
        )
    paired = [u / p for u, p in zip(results["U"], results["P"], strict=False)]
    lines.append("")
    lines.append("unpinned / plan, cycle by cycle: " + ", ".join(f"{r:.2f}" for r in paired))
    return "\n".join(lines + [""] + [f"- {entry}" for entry in log]) + "\n"


def table(rows: list[Row], notes: list[str]) -> str:
    plan = mean([r.after for r in rows if r.name == "affmon_plan"])
    lines = [
        "| placement | round | samples/s (all ranks) | masks at start | findings | affmon's fix | after "
        "| findings after | after / affmon plan (mean) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.name] = counts.get(r.name, 0) + 1
        if r.error:
            lines.append(f"| {r.name} | {counts[r.name]} | failed: {r.error} | | | | | | |")
            continue
        lines.append(
            f"| {r.name} | {counts[r.name]} | {r.before:.0f} | {r.masks} | {', '.join(r.findings or []) or 'none'} "
            f"| {'; '.join(r.actions or []) or 'none'} | {r.after:.0f} | {', '.join(r.after_findings or []) or 'none'} "
            f"| {r.after / plan:.2f} |"
        )
    lines += ["", "| placement | before (mean) | after (mean) | after / affmon plan |", "|---|---|---|---|"]
    for name in dict.fromkeys(r.name for r in rows):
        before = mean([r.before for r in rows if r.name == name])
        after = mean([r.after for r in rows if r.name == name])
        lines.append(f"| {name} | {before:.0f} | {after:.0f} | {after / plan:.2f} |")
    return "\n".join(lines + [""] + [f"- {n}" for n in notes]) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--window", type=float, default=10.0, help="seconds measured before and after the fix")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/ddp_scenarios"))
    ap.add_argument("--placements", default="", help="comma-separated subset, in this order (default: all)")
    ap.add_argument("--rounds", type=int, default=1, help="repeat; every other round runs in reverse order")
    ap.add_argument("--no-topology", action="store_true", help="skip writing OUT/topology.txt")
    ap.add_argument("--states", type=int, default=0, metavar="CYCLES", help="only the in-run comparison (run_states)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ["XDG_STATE_HOME"] = str(out / "state")
    if not a.no_topology:
        write_topology(out)
    if a.states:
        text = run_states(out, a.gpus, a.window, a.states)
        (out / "states.md").write_text(text)
        print(text)
        return
    chosen, notes = placements(a.gpus)
    if a.placements:
        by_name = {p[0]: p for p in chosen}
        chosen = [by_name[n] for n in a.placements.split(",") if n in by_name]
    rows: list[Row] = []
    for round_ in range(a.rounds):
        for p in chosen if round_ % 2 == 0 else chosen[::-1]:
            rows.append(run_placement(p, out, a.gpus, a.window, f"{p[0]}.r{round_ + 1}"))
            (out / "table.md").write_text(table(rows, notes))
    print(table(rows, notes))


if __name__ == "__main__":
    main()
