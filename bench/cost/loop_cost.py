"""What watching training loops costs: affmon's loop sampler next to ``ps`` reading the same threads at the same rate.

Starts ``--ranks`` loop processes (``tests/helpers/loop_workload.py pin_memory``: a worker process
producing a batch every 50 ms through a pipe, a pin-memory-like thread, the loop, plus
``--idle-threads`` threads that only wait, as a framework's pools; ``--mode spin``: a loop
that never blocks, so every probe also reads its Python frames), then, in rounds that
alternate the two, for ``--seconds`` each:

* affmon: a ``LoopWatcher`` over one ``LoopSampler`` per rank at ``--rate`` Hz, with a
  ``window()`` per rank every second (as the monitor's tick would); its CPU time is this
  process's ``time.process_time`` over the round (the main thread only sleeps);
* ps: ``ps -L -o tid=,stat=,wchan= -p PID`` per rank at the same rate (what a script
  watching those threads with ps would run); its CPU time is the reaped children's
  (``RUSAGE_CHILDREN``).

Prints, per round and as the median of the rounds: CPU % of one core per watched rank,
reads achieved per second, CPU microseconds per read of one rank, and the ratio affmon / ps
per read (``ps`` may not keep the rate on a loaded machine). The budget is 1% of a core per
rank.

    python -m bench.cost.loop_cost [--ranks 2] [--rate 20] [--seconds 10] [--rounds 3] [--idle-threads 40]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from affmon.collect.loop import LoopSampler, LoopWatcher
from affmon.core.model.loop import breakdown, describe

ROOT = Path(__file__).resolve().parent.parent.parent

WORKLOAD = ROOT / "tests" / "helpers" / "loop_workload.py"


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def start_ranks(count: int, idle_threads: int, mode: str = "pin_memory") -> list[tuple[subprocess.Popen[str], int]]:
    ranks = []
    for _ in range(count):
        proc = subprocess.Popen(
            [sys.executable, str(WORKLOAD), mode, "--idle-threads", str(idle_threads)],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        line = proc.stdout.readline() if proc.stdout else ""
        if not line:
            raise SystemExit(f"loop_cost: the loop workload did not start (exit {proc.wait()})")
        ranks.append((proc, int(json.loads(line)["pid"])))
    return ranks


def affmon_round(pids: list[int], rate: float, seconds: float) -> tuple[float, float, str]:
    """CPU seconds per second per rank, probes per second per rank, and the last line seen."""
    samplers = [LoopSampler(pid) for pid in pids]
    line = ""
    c0, w0 = time.process_time(), time.monotonic()
    with LoopWatcher(samplers, rate_hz=rate) as watcher:
        probes = 0
        while time.monotonic() - w0 < seconds:
            time.sleep(1.0)
            windows = watcher.windows()
            probes += sum(sum(w.probes.values()) for w in windows)
            b = breakdown(windows[0], None)
            line = describe(b) if b else "-"
    wall = time.monotonic() - w0
    cpu = time.process_time() - c0
    return cpu / wall / len(pids), probes / wall / len(pids), line


def ps_round(pids: list[int], rate: float, seconds: float) -> tuple[float, float]:
    c0, w0 = children_cpu_s(), time.monotonic()
    due = w0
    runs = 0
    while time.monotonic() - w0 < seconds:
        for pid in pids:
            subprocess.run(["ps", "-L", "-o", "tid=,stat=,wchan=", "-p", str(pid)], capture_output=True, check=False)
        runs += 1
        due += 1.0 / rate
        time.sleep(max(0.0, due - time.monotonic()))
    wall = time.monotonic() - w0
    return (children_cpu_s() - c0) / wall / len(pids), runs / wall


def row(label: str, cpu: float, rate: float, ps_cpu: float, ps_runs: float) -> str:
    per_probe = cpu / rate if rate else float("nan")
    per_read = ps_cpu / ps_runs if ps_runs else float("nan")
    return (
        f"{label:<6} {cpu * 100:18.3f} {rate:9.1f} {per_probe * 1e6:9.0f}"
        f" {ps_cpu * 100:14.3f} {ps_runs:11.1f} {per_read * 1e6:9.0f} {per_probe / per_read:11.4f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rate", type=float, default=20.0, help="probes per second per rank")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--idle-threads", type=int, default=40, help="extra waiting threads in each rank")
    ap.add_argument(
        "--mode",
        choices=["pin_memory", "spin"],
        default="pin_memory",
        help="the ranks' loop: fed by a worker through a pin-memory thread, or always running (its Python "
        "frames are read at every probe)",
    )
    a = ap.parse_args()
    if a.ranks < 1 or a.rate <= 0 or a.seconds <= 0 or a.rounds < 1 or a.idle_threads < 0:
        ap.error("--ranks and --rounds must be at least 1, --rate and --seconds positive")
    ranks = start_ranks(a.ranks, a.idle_threads, a.mode)
    pids = [pid for _, pid in ranks]
    aff, aff_rate, ps, ps_rate = [], [], [], []
    try:
        time.sleep(1.0)
        print(
            f"{a.ranks} ranks ({'loop + pin thread + worker' if a.mode == 'pin_memory' else 'a spinning loop'} + "
            f"{a.idle_threads} idle threads each), {a.rate:g} Hz, "
            f"{a.rounds} rounds of {a.seconds:g} s alternating affmon and ps; load {os.getloadavg()[0]:.1f} "
            f"on {os.cpu_count()} CPUs"
        )
        head = f"{'round':<6} {'affmon %core/rank':>18} {'probes/s':>9} {'us/probe':>9}"
        head += f" {'ps %core/rank':>14} {'ps reads/s':>11} {'us/read':>9} {'ratio/read':>11}"
        print(head)
        for n in range(a.rounds):
            cpu, rate, line = affmon_round(pids, a.rate, a.seconds)
            ps_cpu, ps_runs = ps_round(pids, a.rate, a.seconds)
            aff.append(cpu)
            aff_rate.append(rate)
            ps.append(ps_cpu)
            ps_rate.append(ps_runs)
            print(row(str(n + 1), cpu, rate, ps_cpu, ps_runs) + f"   {line}")
        print(
            row(
                "median",
                statistics.median(aff),
                statistics.median(aff_rate),
                statistics.median(ps),
                statistics.median(ps_rate),
            )
        )
        print(
            "ratio/read: affmon's CPU per probe over ps's CPU per read of one rank's threads "
            "(ps may not keep up the rate on a loaded machine; the per-read figures compare the same work)"
        )
        m_aff = statistics.median(aff)
        print(f"budget: 1% of a core per rank; affmon used {m_aff * 100:.2f}%")
    finally:
        for proc, _ in ranks:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


if __name__ == "__main__":
    main()
