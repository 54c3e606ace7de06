"""The NUMA lab's benchmark: what does not fit in CI, run in QEMU guests with real
multi-node kernels (``bench/numa/vm.py``), printed as the tables of docs/numa-lab.md::

    python -m bench.numa.lab_scenarios                      # everything, about 15 minutes
    python -m bench.numa.lab_scenarios --parts boot,ranks --out /tmp/lab

Parts (``--parts``):

* ``boot``: each shape booted ``--boots`` times with nothing to run, then once with
  ``affmon topology``: seconds from QEMU's start to the command, and of the command;
* ``ranks``: four nodes, one injected GPU each: ``plan`` (live, ``--root``, ``--gpus``), each
  rank launched by the plan's numactl line and by ``affmon exec --from-env``, ``audit`` of
  ranks started with ``numactl --cpunodebind`` and again with one rank moved
  (``bench/numa/lab_ranks.py``);
* ``tui``: the monitor in tmux on a job with remote memory (``bench/numa/lab_tui.py``);
* ``bandwidth``: read bandwidth local, remote, and after ``pin --migrate-memory``, with the
  kernel's NUMA balancing off and on (``bench/numa/lab_bandwidth.py``).

Each part's raw JSON goes to ``--out`` when given. The host's load average is printed with
each part: the guests' CPUs are emulated (TCG) and share the host's cores with whatever
else runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from bench.numa.vm import SHAPES, GuestRun, run

PARTS = ("boot", "ranks", "tui", "bandwidth")


def _load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def _checks(shape: str, part: str, *extra: str, timeout_s: float = 1200) -> tuple[dict[str, Any], GuestRun]:
    result = run(shape, ["python", "-m", "bench.numa.lab_checks", part, *extra], timeout_s=timeout_s)
    if result.returncode != 0 or "checks.json" not in result.files:
        raise SystemExit(f"{shape} {part}: exit {result.returncode}\n{result.stderr[-3000:]}\n{result.console[-2000:]}")
    data: dict[str, Any] = json.loads(result.files["checks.json"])
    return data, result


def _row(*cells: object) -> None:
    print("| " + " | ".join(str(c) for c in cells) + " |", flush=True)


def _seconds(values: list[float]) -> str:
    if not values:
        return "-"
    low, high = min(values), max(values)
    return f"{statistics.median(values):.1f} ({low:.1f}-{high:.1f})" if len(values) > 1 else f"{low:.1f}"


def boot_part(boots: int) -> dict[str, Any]:
    print(f"\n### Boot and one command ({_load()})\n")
    _row("shape", "nodes (CPUs each)", "boot to command, s: median (range)", "`affmon topology`, s", "in all, s")
    _row(*["---"] * 5)
    out: dict[str, Any] = {}
    for name, shape in SHAPES.items():
        runs = [run(name, "true", timeout_s=300) for _ in range(boots)]
        command = run(name, "affmon topology", timeout_s=300)
        out[name] = {
            "boot_s": [r.boot_s for r in runs],
            "topology": {"boot_s": command.boot_s, "command_s": command.command_s, "wall_s": command.wall_s},
        }
        layout = "+".join(str(c) for c in shape.cpus_per_node) + " + memory-only" * len(shape.memory_only_mib)
        boot_s = _seconds([r.boot_s for r in runs if r.boot_s is not None])
        _row(name, layout, boot_s, f"{command.command_s or 0:.1f}", f"{command.wall_s:.1f}")
    return out


def ranks_part() -> dict[str, Any]:
    data, lab = _checks("four-nodes", "ranks")
    r = data["ranks"]
    print(f"\n### plan, exec and audit on four nodes ({_load()}; in the guest {lab.command_s or 0:.0f} s)\n")
    by_what = "mask, anonymous MiB on the node (32 written)"
    _row("rank", "GPU's node", "plan", "launch line", f"by numactl: {by_what}", f"by `exec --from-env`: {by_what}")
    _row(*["---"] * 6)
    plans = r["plan_live"]["json"]["plans"]
    same = plans == r["plan_root"]["json"]["plans"]
    for i, p in enumerate(plans):
        node = str(p["numa_node"])
        by_numactl, by_exec = r["launch"]["numactl"][i], r["launch"]["exec"][i]
        cells = [
            f"{by['mask']}, {by['numa_maps'].get(node, 0) / (1 << 20):.0f}" if by["rc"] == 0 else f"exit {by['rc']}"
            for by in (by_numactl, by_exec)
        ]
        _row(i, node, p["cpus"], f"`{p['launch']['numactl']}`", *cells)
    print(f"\n`plan --root TREE` (the guest's sysfs copied, the GPUs added): {'the same' if same else 'differs'}")
    share = r["plan_root_share"]["json"]["plans"]
    print("`plan --root TREE --gpus 1,3`: " + "; ".join(f"GPU {p['gpu_index']} CPUs {p['cpus']}" for p in share))
    audit = r["audit"]
    moved = audit["moved"]
    print(f"\naudit (ranks by `numactl --cpunodebind=N --membind=N`), then rank {moved['rank']}", end=" ")
    print(f"moved to node {moved['to_node']} (CPUs {moved['cpus']}):\n")
    _row("rank", "mask", "plan", "verdict", "verdict after the move", "codes after")
    _row(*["---"] * 6)
    before = audit["on_plan"]["json"]["ranks"]
    after = {x["local_rank"]: x for x in audit["off_plan"]["json"]["ranks"]}
    for x in before:
        y = after[x["local_rank"]]
        codes = ", ".join(p["code"] for p in y["problems"]) or "-"
        plan = x["plan"]["cpus"] if x["plan"] else "-"
        _row(x["local_rank"], f"{x['mask']} -> {y['mask']}", plan, x["verdict"], y["verdict"], codes)
    print(f"\naudit exit status: {audit['on_plan']['rc']} on plan, {audit['off_plan']['rc']} after the move")
    return r


def tui_part() -> dict[str, Any]:
    data, _ = _checks("two-nodes", "tui")
    t = data["tui"]
    print(f"\n### The monitor in tmux in the guest ({_load()})\n")
    marks = ", ".join(f"{k.removesuffix('_s').replace('_', ' ')} at {v} s" for k, v in t.items() if k.endswith("_s"))
    print(f"`affmon --pid {t['pid']}` at 160x48: {marks}. The job's numa_maps: {t['numa_maps']}.\n")
    lines = [line.rstrip() for line in t["screen"].splitlines()]
    keep = [line for line in lines[:24] if line.strip("│ ")] + lines[-1:]
    print("```\n" + "\n".join(keep) + "\n```")
    return t


def bandwidth_part(rounds: int) -> dict[str, Any]:
    out = {}
    for balancing in (0, 1):
        data, _ = _checks("two-nodes", "bandwidth", "--numa-balancing", str(balancing), "--rounds", str(rounds))
        b = data["bandwidth"]
        out[str(balancing)] = b
        print(f"\n### Read bandwidth, {b['mib']} MiB, numa_balancing={balancing} ({_load()})\n")
        _row(
            "round",
            "phase",
            "threads on node",
            "GB/s (median of 0.5 s readings)",
            "MiB on node 0",
            "on node 1",
            "affmon",
        )
        _row(*["---"] * 7)
        for p in b["phases"]:
            lines = p.get("said", "").splitlines()
            said = next((x for x in lines if "memory" in x or "moved" in x), lines[-1] if lines else "")
            mib = {n: v / (1 << 20) for n, v in p["numa_maps"].items()}
            _row(
                p["round"],
                p["phase"],
                p["threads_on"],
                f"{p['gb_per_s']:.3f}",
                f"{mib.get('0', 0):.0f}",
                f"{mib.get('1', 0):.0f}",
                said,
            )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    ap.add_argument("--boots", type=int, default=3, help="boots per shape for the boot time")
    ap.add_argument("--rounds", type=int, default=2, help="bandwidth: remote/migrated rounds")
    ap.add_argument("--out", type=Path, help="write each part's raw JSON here")
    a = ap.parse_args(argv)
    parts = [p for p in a.parts.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        ap.error(f"unknown parts: {', '.join(sorted(unknown))}")
    print(f"NUMA lab: {os.cpu_count()} host CPUs, {_load()}", flush=True)
    for part in parts:
        if part == "boot":
            result: Any = boot_part(a.boots)
        elif part == "ranks":
            result = ranks_part()
        elif part == "tui":
            result = tui_part()
        else:
            result = bandwidth_part(a.rounds)
        sys.stdout.flush()
        if a.out is not None:
            a.out.mkdir(parents=True, exist_ok=True)
            (a.out / f"{part}.json").write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
