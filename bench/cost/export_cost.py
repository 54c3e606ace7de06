"""``affmon export``'s CPU next to htop's, on threads that wake, scraped as Prometheus scrapes.

Starts the waking population of bench/workloads/waking.py (2,000 threads in 10 processes by default,
each thread waking every 0.5 s for a few tens of microseconds, plus a training-like python
process of 12 threads, 3 of them busy-ish), then ``python -m affmon export --listen
127.0.0.1:0`` (a free loopback port, read from the line it prints) as a plain process, and
``htop -d 10`` (1 s; an empty configuration directory, so its default meters) in a 140x40
pane of a private tmux server (bench/cost/tui_cost.py's helpers). Both run together.

The exporter samples at ``--interval`` (1 s) until it has seen two scrapes, then at the
pace the scrapes come. So after ``--warmup`` (8 s) the script scrapes twice,
``--scrape-every`` apart, and the measured window starts at the second scrape: the window
measures the steady state of an exporter that Prometheus has been scraping for a while.
For ``--seconds`` (60) it then scrapes every ``--scrape-every`` (15) s on a fixed schedule,
as Prometheus does: its ``Accept`` header, ``Accept-Encoding: gzip``, the body read whole.

Measured for both over the window: CPU (utime + stime and the reaped children's, from
``/proc/PID/stat`` at its start and end, as a share of one core) and RSS (``VmRSS``) at the
end; for the exporter also the samples it took in the window (the difference of its own
``affmon_export_samples_total`` between the first and the last scrape), each scrape's wall
time and gzipped body size.

Cases, each a table row:

* ``every 15 s``: ``affmon export`` as installed, scraped every ``--scrape-every``;
* ``every 15 s, --threads``: ``--threads --pid`` every process of the population, so its
  threads are watched and get per-thread series (at most ``--max-threads``, the exporter's
  default unless given; the row says how many were served and left out);
* ``every 1 s``: scraped every second, so it samples every second, as the TUI does.

Each case runs ``--repeat`` times (3), the cases taking turns, because the machine may be
shared; the summary gives the median and range of the ratio affmon / htop. Needs tmux and
htop (Debian: ``apt-get install tmux htop``).

    python -m bench.cost.export_cost [--seconds 60] [--scrape-every 15] [--repeat 3] [--cases base,threads,fast]
                                [--threads 2000] [--processes 10] [--tmux-socket exportcost]
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.attacks.export_flood import LOOPBACK, PROMETHEUS_HEADERS, metric
from bench.cost.tui_cost import ROOT, Tmux, cpu_seconds, rss_mib
from bench.workloads.waking import (
    Population,
    Shape,
    StartError,
    activity,
    add_arguments,
    check_arguments,
    task_counters,
)

SERVING = re.compile(r"serving http://127\.0\.0\.1:(\d+)/metrics")
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Case:
    name: str
    scrape_every_s: float
    threads: bool


@dataclass(frozen=True)
class Scrape:
    seconds: float
    gzip_bytes: int
    text: str


@dataclass(frozen=True)
class Row:
    case: Case
    run: int
    seconds: float
    affmon_cpu: float  # share of one core
    htop_cpu: float
    affmon_rss_mib: float
    htop_rss_mib: float
    samples: int  # taken by the exporter in the window
    scrapes: list[Scrape]
    thread_series: int  # threads with per-thread series in the last scrape
    threads_left_out: int
    workload: str

    @property
    def ratio(self) -> float:
        return self.affmon_cpu / self.htop_cpu if self.htop_cpu else float("nan")


def scrape(port: int, timeout_s: float = 30.0) -> Scrape:
    """One scrape as Prometheus makes it; the body decompressed for reading."""
    started = time.monotonic()
    conn = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout_s)
    try:
        conn.request("GET", "/metrics", headers=PROMETHEUS_HEADERS)
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise OSError(f"scrape answered {response.status}")
    finally:
        conn.close()
    took = time.monotonic() - started
    text = gzip.decompress(body) if response.headers.get("Content-Encoding") == "gzip" else body
    return Scrape(took, len(body), text.decode())


def samples_total(s: Scrape) -> int:
    value = metric(s.text, "affmon_export_samples_total")
    if value is None:
        raise OSError("the exporter served no affmon_export_samples_total")
    return int(value)


def thread_series(text: str) -> tuple[int, int]:
    """(threads served with per-thread series, threads left out) in one exposition."""
    served = sum(1 for line in text.splitlines() if line.startswith("affmon_thread_cpu_seconds_total{"))
    left = metric(text, "affmon_export_threads_left_out")
    return served, int(left or 0)


def start_exporter(args: list[str], log: Path) -> tuple[subprocess.Popen[bytes], int]:
    """``affmon export`` on a free loopback port; (the process, its port). Waits for the line
    it prints once it serves: probing the port would count as a scrape and set its pace."""
    command = [sys.executable, "-m", "affmon", "export", "--listen", f"{LOOPBACK}:0", *args]
    with log.open("wb") as err:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        found = SERVING.search(log.read_text(errors="replace"))
        if found:
            return proc, int(found[1])
        if proc.poll() is not None:
            raise OSError(f"affmon export exited with {proc.returncode}: {log.read_text(errors='replace').strip()}")
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    raise OSError(f"affmon export did not start within {START_TIMEOUT_S:g} s")


def wait_until(t: float) -> None:
    left = t - time.monotonic()
    if left > 0:
        time.sleep(left)


def measure(case: Case, run: int, a: argparse.Namespace) -> Row:
    shape = Shape.from_args(a)
    tmux = Tmux()
    tmux.socket = a.tmux_socket
    config = tempfile.mkdtemp(prefix="htop-config-")
    log = Path(config) / "affmon-export.log"
    every = case.scrape_every_s
    exporter: subprocess.Popen[bytes] | None = None
    try:
        with Population(shape, seconds=a.warmup + 2 * every + a.seconds + 120) as population:
            args = ["--interval", str(a.interval)]
            if case.threads:
                args += ["--threads", *(f"--pid={pid}" for pid in population.all_pids())]
                args += [f"--max-threads={a.max_threads}"] if a.max_threads else []
            exporter, port = start_exporter(args, log)
            htop = tmux.start("htop", f"exec env XDG_CONFIG_HOME={config} htop -d 10")
            time.sleep(a.warmup)
            scrape(port)  # the first scrape: the pace is known from the second on
            wait_until(time.monotonic() + every)
            pids = {"affmon": exporter.pid, "htop": htop}
            first = scrape(port)
            t0 = time.monotonic()
            before = {k: cpu_seconds(p) for k, p in pids.items()}
            counters = task_counters(population.all_pids())
            scrapes = []
            for k in range(1, int(a.seconds // every) + 1):
                wait_until(t0 + k * every)
                scrapes.append(scrape(port))
            elapsed = time.monotonic() - t0
            after = {k: cpu_seconds(p) for k, p in pids.items()}
            workload = activity(counters, task_counters(population.all_pids()), elapsed).line()
            rss = {k: rss_mib(p) for k, p in pids.items()}
    finally:
        if exporter is not None:
            exporter.terminate()
            try:
                exporter.wait(10)
            except subprocess.TimeoutExpired:
                exporter.kill()
                exporter.wait()
        tmux.close()
        shutil.rmtree(config, ignore_errors=True)
    served, left = thread_series(scrapes[-1].text)
    cpu = {k: (after[k] - before[k]) / elapsed for k in pids}
    return Row(
        case,
        run,
        elapsed,
        cpu["affmon"],
        cpu["htop"],
        rss["affmon"],
        rss["htop"],
        samples_total(scrapes[-1]) - samples_total(first),
        scrapes,
        served,
        left,
        workload,
    )


def table(rows: list[Row]) -> list[str]:
    lines = [
        "| case | run | affmon CPU % | htop CPU % | ratio | affmon RSS MiB | htop RSS MiB | samples / scrapes "
        "| scrape ms median (max) | body KiB gzip | thread series (left out) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        took = sorted(s.seconds * 1e3 for s in r.scrapes)
        body = statistics.median(s.gzip_bytes for s in r.scrapes) / 1024
        threads = f"{r.thread_series:,} ({r.threads_left_out:,})" if r.case.threads else "-"
        lines.append(
            f"| {r.case.name} | {r.run} | {100 * r.affmon_cpu:.2f} | {100 * r.htop_cpu:.2f} | {r.ratio:.2f} "
            f"| {r.affmon_rss_mib:.0f} | {r.htop_rss_mib:.0f} | {r.samples} / {len(r.scrapes)} "
            f"| {statistics.median(took):.0f} ({took[-1]:.0f}) | {body:.0f} | {threads} |"
        )
    return lines


def summary(rows: list[Row]) -> list[str]:
    lines = []
    for name in dict.fromkeys(r.case.name for r in rows):
        ratios = sorted(r.ratio for r in rows if r.case.name == name)
        lines.append(
            f"{name}: affmon / htop CPU over {len(ratios)} runs: median {statistics.median(ratios):.2f} "
            f"({ratios[0]:.2f}-{ratios[-1]:.2f})"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap)
    ap.add_argument("--seconds", type=float, default=60.0, help="the measured window")
    ap.add_argument("--warmup", type=float, default=8.0, help="seconds both run before the two pace-setting scrapes")
    ap.add_argument("--scrape-every", type=float, default=15.0, help="seconds between scrapes (Prometheus: 15)")
    ap.add_argument("--interval", type=float, default=1.0, help="the exporter's --interval")
    ap.add_argument("--max-threads", type=int, default=0, help="the exporter's --max-threads (0: its default)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each case, the cases alternating")
    ap.add_argument("--cases", default="base,threads,fast", help="base (15 s), threads (15 s, --threads), fast (1 s)")
    ap.add_argument("--tmux-socket", default="exportcost", help="the private tmux server's socket name")
    a = ap.parse_args()
    check_arguments(ap, a)
    if a.seconds <= 0 or a.warmup < 0 or a.repeat < 1 or a.scrape_every <= 0 or a.scrape_every > a.seconds:
        ap.error("--seconds and --scrape-every must be positive, --scrape-every at most --seconds, --repeat >= 1")
    every = f"every {a.scrape_every:g} s"
    known = {
        "base": Case(every, a.scrape_every, False),
        "threads": Case(f"{every}, --threads", a.scrape_every, True),
        "fast": Case("every 1 s", 1.0, False),
    }
    names = [n for n in a.cases.split(",") if n]
    if not names or set(names) - set(known):
        ap.error(f"--cases: a comma-separated list of {', '.join(known)}: {a.cases!r}")
    for tool in ("tmux", "htop"):
        if shutil.which(tool) is None:
            print(f"export_cost: {tool} is not installed (Debian: apt-get install {tool})", file=sys.stderr)
            sys.exit(2)
    rows = []
    try:
        for run in range(1, a.repeat + 1):
            for name in names:
                rows.append(measure(known[name], run, a))
                print(table(rows[-1:])[-1], flush=True)
    except (StartError, OSError, ValueError) as e:
        print(f"export_cost: {e}", file=sys.stderr)
        sys.exit(2)
    population = (
        f"{a.processes} processes of {'waker' if a.population_as == 'others' else 'python'} threads "
        f"+ a training-like python process of 12 threads"
        if a.processes
        else "nothing running"
    )
    print(
        f"\n{Shape.from_args(a).label()} threads: {population}; {os.cpu_count()} CPUs; "
        f"load average at the end {os.getloadavg()[0]:.1f}; {a.seconds:g} s measured after {a.warmup:g} s "
        f"and two pace-setting scrapes; exporter --interval {a.interval:g}; htop -d 10 in a tmux pane"
    )
    for row in rows:
        print(f"{row.case.name}, {row.run}: {row.workload}")
    print("\n".join(["", *table(rows), "", *summary(rows)]))


if __name__ == "__main__":
    main()
