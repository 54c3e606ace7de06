"""`affmon export` under five network attacks, on loopback only: what a normal scrape and the
sampler see meanwhile.

Starts a workload with many threads (``tests/helpers/workload.py --sleepers N``: a large ``--threads``
body), then an exporter watching it (``--pid W --threads``) as a child process, with its
soft limit on open files set to ``--nofile`` (1024, the usual default; the hard limit is
left as it is). ``--server new`` runs ``python -m affmon export``; ``--server old`` runs the
same Exporter behind prometheus-client's ``start_http_server`` (wsgiref, a thread per
connection, listen backlog 5), as the exporter was served before. Then, for each attack:

* ``idle``: ``--idle`` TCP connections that send nothing (opened with at most 16 handshakes
  in flight, refused ones again, for up to 25 s), then held for ``--seconds``;
* ``slow``: ``--slow`` clients that ask for the uncompressed ``--threads`` body with a 4 KiB
  receive buffer and never read it, held for ``--seconds``;
* ``parallel``: ``--parallel`` threads scraping in a loop for ``--seconds``;
* ``shapes``: ``--shapes`` keep-alive connections, each sending, one after the other, requests
  of shapes never sent before (``shape_request``: a new query string and ``Accept`` value on
  every request, gzip on every other, a 12 KiB URL on every fifth, a new ``name[]`` filter on
  every third), from a process of its own, for ``--seconds``;
* ``pipelined``: the same from ``--pipelined`` connections, each writing ``--pipeline``
  requests at once before reading their answers.

The new shapes' ``Accept`` values are answered as text or OpenMetrics (``SHAPE_ACCEPTS``);
with ``--text-accepts``, as text only (``TEXT_ACCEPTS``): the flood then makes none of the
bodies the normal scrape is sent.

Meanwhile a process of its own scrapes as Prometheus does (its Accept and Accept-Encoding
headers, gzip) every ``--scrape-every`` seconds (0.25) with a 5 s timeout, and reads the
exporter's RSS and open descriptors every 0.1 s. One table row per attack (markdown): normal scrapes (count,
median, max, how many took over 1 s, how many failed), the same for the parallel loops'
answers, the exporter's largest RSS and descriptor count, the samples it took during the
attack and ``affmon_export_sample_errors_total`` after it (for ``shapes`` and
``pipelined`` the loops' column holds the flood's 200 answers and its requests left
unanswered). Then, per attack, the normal scrape's median under it against its median with
no attack, as a ratio. Connections go to 127.0.0.1 only; everything stops by itself.

With ``--rounds R`` the sequence (no attack, then each attack) runs R times, so that load
from elsewhere on the machine weighs on each alike; the ratios pool the rounds' scrapes.
``--costs THREADS`` prints instead the CPU each step of a body costs (collect, format, the
other format made from it, gzip) on a state of hand-made samples.

Run: ``python -m bench.attacks.export_flood [--server both]
[--attacks idle,slow,parallel,shapes,pipelined] [--seconds 10] [--sleepers 2000] [--nofile 1024]
[--interval 1] [--scrape-every 0.25] [--text-accepts] [--rounds 1] [--costs THREADS]``.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import http.client
import itertools
import multiprocessing
import multiprocessing.connection
import os
import random
import re
import resource
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

ROOT = Path(__file__).resolve().parent.parent.parent

WORKLOAD = ROOT / "tests" / "helpers" / "workload.py"
LOOPBACK = "127.0.0.1"
# What Prometheus 2.x sends with every scrape.
PROMETHEUS_HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}
SLOW_REQUEST = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/plain\r\n\r\n"


# -- the attacker's and the scraper's tools (also used by tests/export/test_export_network.py) ---------


def scrape(url: str, timeout_s: float = 5.0, headers: dict[str, str] | None = None) -> tuple[float, str | None]:
    """One scrape: (seconds it took, the exposition text or None when it failed)."""
    started = time.monotonic()
    request = urllib.request.Request(url, headers=PROMETHEUS_HEADERS if headers is None else headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read()
            if response.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            text: str | None = body.decode()
    except (OSError, urllib.error.URLError):
        text = None
    return time.monotonic() - started, text


def fetch_raw(port: int, timeout_s: float = 5.0) -> tuple[float, bool]:
    """A scrape as light for the client as it gets (Prometheus's headers, the gzip body read
    and not decoded): (seconds it took, whether a whole 200 answer came)."""
    started = time.monotonic()
    conn = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout_s)
    try:
        conn.request("GET", "/metrics", headers=PROMETHEUS_HEADERS)
        response = conn.getresponse()
        body = response.read()
        ok = response.status == 200 and len(body) > 0
    except (OSError, http.client.HTTPException):
        ok = False
    finally:
        conn.close()
    return time.monotonic() - started, ok


def metric(text: str, name: str) -> float | None:
    """The value of an unlabelled sample ``name`` in an exposition."""
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(found[1]) if found else None


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def connect_many(
    port: int, n: int, *, rcvbuf: int | None = None, request: bytes | None = None, window: int = 16
) -> list[socket.socket]:
    """``n`` connections to 127.0.0.1:``port``, at most ``window`` handshakes in flight at once
    (so a short listen queue delays the attacker instead of dropping its SYNs), within 20 s.
    Each sends ``request`` once connected, then nothing more; nothing is read."""
    done: list[socket.socket] = []
    pending: dict[int, socket.socket] = {}
    poller = select.poll()
    deadline = time.monotonic() + 25
    opened = 0
    while len(done) < n and time.monotonic() < deadline:
        while opened < n and len(pending) < window:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            if rcvbuf is not None:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            s.setblocking(False)
            s.connect_ex((LOOPBACK, port))
            pending[s.fileno()] = s
            poller.register(s, select.POLLOUT)
            opened += 1
        if not pending:
            break
        for fd, _ in poller.poll(100):
            s = pending.pop(fd)
            poller.unregister(fd)
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                s.close()
                opened -= 1  # refused: try again
                continue
            if request is not None:
                with contextlib.suppress(OSError):
                    s.send(request)
            done.append(s)
    for s in pending.values():
        s.close()
    return done


def close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()


# -- the shape flood: requests that differ where the body does not --------------------------------

# Accept values never sent before (``{n}``): prometheus-client answers each of them in one of two
# formats, text or OpenMetrics.
SHAPE_ACCEPTS = (
    "text/plain;q=0.{n}",
    "application/openmetrics-text;version=1.0.0;flood={n}",
    "application/x-flood-{n}",
    PROMETHEUS_HEADERS["Accept"] + ",application/x-flood-{n};q=0.01",
)
# Accept values never sent before that prometheus-client answers in text only (an OpenMetrics
# version below 1.0.0 is passed over): a flood of them makes nothing a Prometheus scrape is sent.
TEXT_ACCEPTS = (
    "text/plain;q=0.{n}",
    "application/x-flood-{n}",
    "application/openmetrics-text;version=0.0.{n}",
    "*/*;flood={n}",
)
LONG_URL_BYTES = 12 << 10  # under the server's 16 KiB cap on request headers


def _sample_names() -> list[str]:
    from affmon.export.catalogue import CATALOGUE

    return [spec.name for spec in CATALOGUE]


def shape_request(n: int, names: list[str], accepts: tuple[str, ...] = SHAPE_ACCEPTS) -> bytes:
    """The ``n``-th request of the shape flood: a query string and an ``Accept`` value (one of
    ``accepts``) never sent before, gzip every other request, a 12 KiB URL every fifth, and
    every third a new ``name[]`` filter (2 to 6 of ``names``, the thread families among them)."""
    query = f"flood={n}"
    if n % 3 == 0:
        chosen = random.Random(n).sample(names, random.Random(-n).randint(2, 6))
        query += "".join(f"&name[]={name}" for name in chosen)
    if n % 5 == 0:
        query += "&pad=" + "x" * LONG_URL_BYTES
    accept = accepts[n % len(accepts)].format(n=n)
    encoding = "gzip" if n % 2 else f"identity;q=0.{n}"
    return (
        f"GET /metrics?{query} HTTP/1.1\r\nHost: {LOOPBACK}\r\nAccept: {accept}\r\nAccept-Encoding: {encoding}\r\n\r\n"
    ).encode()


def read_answer(answers: BinaryIO) -> int | None:
    """Read one HTTP answer (its body by Content-Length); its status, or None at the end of the
    connection."""
    status_line = answers.readline()
    if not status_line:
        return None
    length = 0
    while (line := answers.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    body = answers.read(length)
    return int(status_line.split()[1]) if len(body) == length else None


@dataclass
class Flooded:
    answered: int  # 200 answers
    failed: int  # requests that got no 200 answer (cut off by a closed connection, or refused)
    connections: int  # connections opened


def _flood(port: int, connections: int, pipeline: int, accepts: tuple[str, ...], stop: threading.Event) -> Flooded:
    """``connections`` threads, each on a keep-alive connection writing ``pipeline`` requests of
    the shape flood at a time and reading their answers, until ``stop`` (the answers still
    awaited then are counted neither way); a connection the server closes is opened again."""
    names = _sample_names()
    totals = Flooded(0, 0, 0)
    lock = threading.Lock()
    counter = itertools.count(random.randrange(10**9))  # never a request an earlier flood sent

    def count(answered: int = 0, failed: int = 0, opened: int = 0) -> None:
        with lock:
            totals.answered += answered
            totals.failed += failed
            totals.connections += opened

    def loop() -> None:
        while not stop.is_set():
            count(opened=1)
            try:
                with socket.create_connection((LOOPBACK, port), timeout=10) as conn, conn.makefile("rb") as answers:
                    while not stop.is_set():
                        conn.sendall(b"".join(shape_request(next(counter), names, accepts) for _ in range(pipeline)))
                        got = 0
                        while got < pipeline and not stop.is_set() and read_answer(answers) == 200:
                            got += 1
                            count(answered=1)
                        if got < pipeline and not stop.is_set():
                            count(failed=pipeline - got)
                            break  # closed by the server: a new connection
            except OSError:  # refused, reset, or no answer for 10 s
                if not stop.is_set():
                    count(failed=1)

    workers = [threading.Thread(target=loop) for _ in range(connections)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return totals


def _flood_process(
    port: int,
    connections: int,
    pipeline: int,
    accepts: tuple[str, ...],
    nice: int,
    stop: threading.Event,
    out: multiprocessing.connection.Connection,
) -> None:
    os.nice(nice)
    out.send(_flood(port, connections, pipeline, accepts, stop))


@contextlib.contextmanager
def shape_flood(
    port: int, connections: int, pipeline: int = 1, accepts: tuple[str, ...] = SHAPE_ACCEPTS, nice: int = 0
) -> Iterator[list[Flooded]]:
    """The shape flood on 127.0.0.1:``port`` from a process of its own (its threads share no
    interpreter lock with the server or the scraper; ``nice`` added to its niceness) while the
    block runs; what it got is appended to the yielded list when the block ends."""
    ctx = multiprocessing.get_context("fork")
    stop = ctx.Event()
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_flood_process, args=(port, connections, pipeline, accepts, nice, stop, send))
    proc.start()
    result: list[Flooded] = []
    try:
        yield result
    finally:
        stop.set()
        if receive.poll(30):
            result.append(receive.recv())
        proc.join(10)
        if proc.is_alive():
            proc.kill()


@contextlib.contextmanager
def raised_nofile() -> Iterator[None]:
    """The attacker needs a descriptor per connection: soft limit up to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@dataclass
class Exporter:
    proc: subprocess.Popen[bytes]
    url: str
    port: int
    stderr_path: str

    def stderr(self) -> str:
        return Path(self.stderr_path).read_text(errors="replace")


@contextlib.contextmanager
def exporter(command: list[str], nofile: int | None = None, *, hard: bool = False) -> Iterator[Exporter]:
    """Run ``command`` (an exporter that prints "serving http://HOST:PORT/metrics" on stderr),
    with its soft descriptor limit at ``nofile`` (and the hard one too, with ``hard``); stop
    it with SIGTERM, then SIGKILL."""

    def limit() -> None:
        if nofile is not None:
            _, hard_now = resource.getrlimit(resource.RLIMIT_NOFILE)
            soft = min(nofile, hard_now)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, soft if hard else hard_now))

    with tempfile.NamedTemporaryFile(prefix="affmon-export-", suffix=".err", delete=False) as err:
        path = err.name
    with open(path, "wb") as err_file:
        proc = subprocess.Popen(command, stderr=err_file, stdout=subprocess.DEVNULL, cwd=ROOT, preexec_fn=limit)
    try:
        deadline = time.monotonic() + 30
        found = None
        while found is None and time.monotonic() < deadline and proc.poll() is None:
            found = re.search(r"serving http://127\.0\.0\.1:(\d+)/metrics", Path(path).read_text(errors="replace"))
            time.sleep(0.05)
        if found is None:
            raise RuntimeError(f"the exporter did not start: {Path(path).read_text(errors='replace')[-2000:]}")
        port = int(found[1])
        yield Exporter(proc, f"http://{LOOPBACK}:{port}/metrics", port, path)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        os.unlink(path)


def affmon_export(pid: int, *, interval_s: float = 1.0, threads: bool = True) -> list[str]:
    extra = ["--threads", "--max-threads", "1000000"] if threads else []  # every thread, as measured
    listen = ["--listen", f"{LOOPBACK}:0"]
    return [sys.executable, "-m", "affmon", "export", *listen, "--pid", str(pid), "--interval", str(interval_s), *extra]


def old_export(pid: int, *, interval_s: float = 1.0, threads: bool = True) -> list[str]:
    extra = ["--threads"] if threads else []
    return [
        sys.executable,
        "-m",
        "bench.attacks.export_flood",
        "--serve-old",
        "--pid",
        str(pid),
        "--interval",
        str(interval_s),
        *extra,
    ]


@contextlib.contextmanager
def many_threads(sleepers: int) -> Iterator[int]:
    """A process with ``sleepers`` + 1 threads; its pid."""
    proc = subprocess.Popen(
        [sys.executable, str(WORKLOAD), "--sleepers", str(sleepers), "--seconds", "900"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line:
            raise RuntimeError("the workload did not start")
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


# -- the measurement ---------------------------------------------------------------------------


@dataclass
class Watched:
    latencies_s: list[float]
    failed: int
    rss_max: int
    fds_max: int


def _watch(
    url: str, pid: int, every_s: float, stop: threading.Event, out: multiprocessing.connection.Connection
) -> None:
    """In a process of its own, so that the attacker's threads do not delay its scrapes."""
    latencies: list[float] = []
    failed = [0]
    rss_max = [0]
    fds_max = [0]
    done = threading.Event()

    def rss() -> None:
        while not done.is_set():
            with contextlib.suppress(OSError):
                rss_max[0] = max(rss_max[0], rss_bytes(pid))
                fds_max[0] = max(fds_max[0], len(os.listdir(f"/proc/{pid}/fd")))
            done.wait(0.1)

    reader = threading.Thread(target=rss)
    reader.start()
    while not stop.is_set():
        took, text = scrape(url)
        latencies.append(took)
        if text is None or "affmon_export_samples_total" not in text:
            failed[0] += 1
        stop.wait(every_s)
    done.set()
    reader.join()
    out.send((latencies, failed[0], rss_max[0], fds_max[0]))


@contextlib.contextmanager
def watching(url: str, pid: int, every_s: float = 0.25) -> Iterator[list[Watched]]:
    """Normal scrapes (one every ``every_s``) and the exporter's largest RSS while the block runs."""
    ctx = multiprocessing.get_context("fork")
    stop = ctx.Event()
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_watch, args=(url, pid, every_s, stop, send))
    proc.start()
    result: list[Watched] = []
    try:
        yield result
    finally:
        stop.set()
        if receive.poll(30):
            result.append(Watched(*receive.recv()))
        proc.join(10)
        if proc.is_alive():
            proc.kill()


def parallel_loops(port: int, n: int, seconds: float) -> list[float | None]:
    """``n`` threads scraping in a loop for ``seconds``: each answer's latency (None: failed)."""
    results: list[float | None] = []
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def loop() -> None:
        while time.monotonic() < end:
            took, ok = fetch_raw(port)
            with lock:
                results.append(took if ok else None)

    workers = [threading.Thread(target=loop) for _ in range(n)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return results


def summary(latencies_s: list[float], failed: int) -> str:
    """count, median ms, max ms, how many over 1 s, how many failed (a failure counts its wait)."""
    if not latencies_s:
        return f"0 / - / - / - / {failed}"
    over = sum(1 for t in latencies_s if t > 1.0)
    median_ms, max_ms = statistics.median(latencies_s) * 1000, max(latencies_s) * 1000
    return f"{len(latencies_s)} / {median_ms:.0f} / {max_ms:.0f} / {over} / {failed}"


def counters(url: str) -> tuple[float, float]:
    """(samples_total, sample_errors_total) from one patient scrape; NaN when none answered."""
    for _ in range(3):
        _, text = scrape(url, timeout_s=20)
        if text is not None:
            return metric(text, "affmon_export_samples_total") or 0.0, metric(
                text, "affmon_export_sample_errors_total"
            ) or 0.0
    return float("nan"), float("nan")


def run_attacks(server: str, a: argparse.Namespace, pid: int) -> list[str]:
    make = affmon_export if server == "new" else old_export
    rows: list[str] = []
    latencies: dict[str, list[float]] = {}  # the normal scrapes' seconds, by attack, over the rounds
    with exporter(make(pid, interval_s=a.interval), nofile=a.nofile) as ex:
        time.sleep(2 * a.interval + 1)
        _, text = scrape(ex.url, headers={})
        print(f"{server}: the uncompressed --threads body is {len(text or '') / 1e6:.1f} MB", flush=True)
        accepts, text = (TEXT_ACCEPTS, ", text") if a.text_accepts else (SHAPE_ACCEPTS, "")
        attacks: dict[str, tuple[str, Callable[[], object]]] = {
            "none": ("none", lambda: time.sleep(a.seconds / 2)),
            "idle": (f"{a.idle} idle", lambda: hold(connect_many(ex.port, a.idle), a.seconds)),
            "slow": (
                f"{a.slow} slow readers",
                lambda: hold(connect_many(ex.port, a.slow, rcvbuf=4096, request=SLOW_REQUEST), a.seconds),
            ),
            "parallel": (f"{a.parallel} parallel", lambda: parallel_loops(ex.port, a.parallel, a.seconds)),
            "shapes": (f"{a.shapes} new shapes{text}", lambda: flood_for(ex.port, a.shapes, 1, accepts, a.seconds)),
            "pipelined": (
                f"{a.pipelined} pipelining {a.pipeline}{text}",
                lambda: flood_for(ex.port, a.pipelined, a.pipeline, accepts, a.seconds),
            ),
        }
        order = ["none", *a.attacks.split(",")] * a.rounds
        for name, attack in (attacks[key] for key in order):
            samples_before, _ = counters(ex.url)
            with watching(ex.url, ex.proc.pid, a.scrape_every) as watched:
                outcome = attack()
            (watch,) = watched
            samples_after, errors = counters(ex.url)
            loops = "-"
            if isinstance(outcome, list):
                answered = [t for t in outcome if t is not None]
                loops = summary(answered, len(outcome) - len(answered))
            if isinstance(outcome, Flooded):
                loops = f"{outcome.answered} / - / - / - / {outcome.failed}"
            latencies.setdefault(name, []).extend(watch.latencies_s)
            if isinstance(outcome, int):
                name += f" ({outcome} connected)"
            normal = summary(watch.latencies_s, watch.failed)
            rows.append(
                f"| {server} | {name} | {normal} | {loops} | {watch.rss_max / 2**20:.0f} | {watch.fds_max}"
                f" | {samples_after - samples_before:.0f} | {errors:.0f} |"
            )
            print(rows[-1], flush=True)
            time.sleep(2)  # let the server close what the attack left
    medians = {name: statistics.median(took) for name, took in latencies.items() if took}
    alone = medians.get("none")
    for name, median in medians.items():
        if alone and name != "none":
            print(
                f"{server}: normal scrape median {alone * 1000:.0f} ms alone, {median * 1000:.0f} ms under"
                f" {name}: {median / alone:.2f}x ({len(latencies[name])} scrapes, {a.rounds} round(s))",
                flush=True,
            )
    return rows


def flood_for(port: int, connections: int, pipeline: int, accepts: tuple[str, ...], seconds: float) -> Flooded:
    with shape_flood(port, connections, pipeline, accepts) as flooded:
        time.sleep(seconds)
    return flooded[0] if flooded else Flooded(0, 0, 0)


def hold(socks: list[socket.socket], seconds: float) -> int:
    """Keep ``socks`` open for ``seconds``, then close them; how many there were."""
    try:
        time.sleep(seconds)
    finally:
        close_all(socks)
    return len(socks)


def serve_old(a: argparse.Namespace) -> int:
    """The exporter as it served before: the same sampler and state behind prometheus-client's
    ``start_http_server``."""
    from prometheus_client import start_http_server

    from affmon.collect.sampler import Selection
    from affmon.export.service import Exporter as LiveExporter
    from affmon.sources.live import live_sources

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with live_sources(Selection(pids=(a.pid,), others=True)) as src:
        live = LiveExporter(
            src.sampler.sample, src.topology, interval_s=a.interval, threads=a.threads, max_threads=1_000_000
        )
        server, _ = start_http_server(0, LOOPBACK, registry=live.registry)
        live.start()
        sys.stderr.write(f"affmon export (old server): serving http://{LOOPBACK}:{server.server_address[1]}/metrics\n")
        sys.stderr.flush()
        stop.wait()
        live.stop()
        server.shutdown()
    return 0


def costs(threads: int, repeats: int = 5) -> None:
    """The CPU each step of a body costs, on a state of hand-made samples of one process of
    ``threads`` threads, every one served: the median of ``repeats``."""
    from affmon.export.collector import StateCollector
    from affmon.export.render import _Families, _Formatted
    from tests.export.test_export import process, run, sample, thread

    def one(t: int) -> object:
        return sample(t, process(10, *(thread(10 + i, 100 * t + i, 5 * t) for i in range(threads))))

    state = run(one(1), one(2))

    def cpu_ms(step: Callable[[], object]) -> tuple[float, object]:
        took = []
        for _ in range(repeats):
            started = time.process_time()
            made = step()
            took.append(time.process_time() - started)
        return statistics.median(took) * 1000, made

    collect_ms, metrics = cpu_ms(
        lambda: list(StateCollector(lambda: state, threads=True, max_threads=threads).collect())
    )
    assert isinstance(metrics, list)
    families = _Families(state, metrics)
    for openmetrics in (False, True):
        format_ms, first = cpu_ms(lambda om=openmetrics: _Formatted.of(families, om, metrics))
        assert isinstance(first, _Formatted)
        other_ms, _ = cpu_ms(first.other_format)
        gzip_ms, _ = cpu_ms(lambda body=first.body: gzip.compress(body))
        print(
            f"{threads} threads, {'OpenMetrics' if openmetrics else 'text'} first: collect {collect_ms:.0f} ms,"
            f" format {format_ms:.0f} ms, the other format from it {other_ms:.1f} ms, gzip {gzip_ms:.0f} ms"
            f" (CPU, median of {repeats}); body {len(first.body) / 1e6:.2f} MB"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", choices=["new", "old", "both"], default="both")
    ap.add_argument(
        "--attacks", default="idle,slow,parallel,shapes,pipelined", help="which, in order (comma-separated)"
    )
    ap.add_argument("--seconds", type=float, default=10.0, help="each attack's length")
    ap.add_argument("--idle", type=int, default=1024)
    ap.add_argument("--slow", type=int, default=150)
    ap.add_argument("--parallel", type=int, default=50)
    ap.add_argument("--shapes", type=int, default=4, help="connections sending requests of new shapes")
    ap.add_argument("--pipelined", type=int, default=20, help="connections pipelining requests of new shapes")
    ap.add_argument("--pipeline", type=int, default=32, help="requests each of those writes at once")
    ap.add_argument(
        "--text-accepts", action="store_true", help="new shapes' Accept values all answered as text (TEXT_ACCEPTS)"
    )
    ap.add_argument("--sleepers", type=int, default=2000, help="threads of the watched workload")
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--scrape-every", type=float, default=0.25, help="seconds between normal scrapes")
    ap.add_argument("--nofile", type=int, default=1024, help="the exporter's soft limit on open files")
    ap.add_argument(
        "--rounds", type=int, default=1, help="times the sequence (no attack, then each attack) is run, taking turns"
    )
    ap.add_argument("--costs", type=int, metavar="THREADS", help="print what each step of a body costs, and stop")
    ap.add_argument("--serve-old", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--pid", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--threads", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve_old:
        return serve_old(a)
    unknown = set(a.attacks.split(",")) - {"idle", "slow", "parallel", "shapes", "pipelined"}
    if unknown:
        ap.error(f"--attacks: no attack {', '.join(sorted(unknown))} (idle, slow, parallel, shapes, pipelined)")
    if a.rounds < 1:
        ap.error("--rounds: at least one")
    if a.costs is not None:
        if a.costs < 1:
            ap.error("--costs: at least one thread")
        costs(a.costs)
        return 0

    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; exporter's soft RLIMIT_NOFILE {a.nofile};"
        f" {a.sleepers + 1} threads watched with --threads; attacks of {a.seconds:g} s"
    )
    print(
        "| server | attack | normal scrapes: count / median ms / max ms / over 1 s / failed | parallel loops: same"
        " | RSS max MB | fds max | samples meanwhile | sample errors |"
    )
    print("|---|---|---|---|---|---|---|---|")
    with raised_nofile(), many_threads(a.sleepers) as pid:
        for server in ["old", "new"] if a.server == "both" else [a.server]:
            run_attacks(server, a, pid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
