"""What ``--threads`` costs a scrape to format, at several thread counts, with and without the cap.

Starts one process of N threads (bench/workloads/waking.py ``--threads N --sleeping``: threads that
block, so that the process is the same at each reading), samples it twice with affmon's
own sampler (``--pid``: watched), builds the exporter's state, and formats it as the
exporter does (``affmon.export.render``: prometheus-client's app behind one request):

* as Prometheus asks (OpenMetrics, gzip): CPU per render, bytes sent;
* as plain text, uncompressed: CPU per render, bytes.

Each render is on a fresh renderer (nothing cached), ``--renders`` (5) times; the table
gives the median CPU time (``time.process_time``: the renders run on this thread and
nothing else runs in this process meanwhile). One row with ``--max-threads`` N (every
thread served, the cost of the formatting itself) and one with the exporter's default
cap. Linear formatting shows as a constant CPU and size per thread served.

    python -m bench.cost.export_format_cost [--threads 2000,10000] [--renders 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from affmon.collect.sampler import Sampler, Selection
from affmon.export import MAX_THREADS
from affmon.export.render import Renderer
from affmon.export.state import ExportState, step
from affmon.sources.live import load_topology

WAKING = Path(__file__).resolve().parent.parent / "workloads" / "waking.py"
PROMETHEUS = {
    "REQUEST_METHOD": "GET",
    "PATH_INFO": "/metrics",
    "HTTP_ACCEPT": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "HTTP_ACCEPT_ENCODING": "gzip",
}
PLAIN = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "HTTP_ACCEPT": "text/plain"}


def state_of(pid: int) -> ExportState:
    """The exporter's state after two samples of ``pid`` a second apart."""
    topology = load_topology()
    sampler = Sampler(selection=Selection(pids=(pid,)))
    state = ExportState()
    for _ in range(2):
        state = step(state, sampler.sample(), topology)
        time.sleep(1.0)
    return state


def render(state: ExportState, environ: dict[str, str], max_threads: int, renders: int) -> tuple[float, int]:
    """(median CPU seconds per render, body bytes)."""
    cpu, size = [], 0
    for _ in range(renders):
        renderer = Renderer(lambda: state, threads=True, max_threads=max_threads)
        t0 = time.process_time()
        made = renderer.rendering(dict(environ))
        cpu.append(time.process_time() - t0)
        size = len(made.body)
    return statistics.median(cpu), size


def threads_of(n: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, str(WAKING), "--threads", str(n), "--sleeping", "--seconds", "600"],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline() if proc.stdout else ""
    if not line:
        raise OSError(f"the {n}-thread process exited with {proc.wait()} before it was ready")
    json.loads(line)
    return proc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="2000,10000", help="thread counts, comma-separated")
    ap.add_argument("--renders", type=int, default=5)
    a = ap.parse_args()
    counts = [int(n) for n in a.threads.split(",") if n]
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; median of {a.renders} renders")
    print(
        "| threads | --max-threads | served | OpenMetrics gzip: CPU ms | bytes | text: CPU ms | bytes "
        "| text µs / thread served | text bytes / thread served |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for n in counts:
        proc = threads_of(n)
        try:
            state = state_of(proc.pid)
        finally:
            proc.kill()
            proc.wait()
        for cap in (n + 1, MAX_THREADS):
            gz_cpu, gz_bytes = render(state, PROMETHEUS, cap, a.renders)
            text_cpu, text_bytes = render(state, PLAIN, cap, a.renders)
            served = min(cap, n)
            print(
                f"| {n:,} | {cap:,} | {served:,} | {gz_cpu * 1e3:.0f} | {gz_bytes:,} | {text_cpu * 1e3:.0f} "
                f"| {text_bytes:,} | {text_cpu * 1e6 / served:.0f} | {text_bytes / served:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
