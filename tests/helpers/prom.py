"""A real Prometheus for tests: Debian's ``prometheus`` binary, which tests/run unpacks under
.cache/prometheus/ without installing the package (installed, it starts a service of its
own on :9090), else one on PATH. A missing binary fails the test: it does not skip.

``running(tmp, config)`` writes the configuration, starts Prometheus on 127.0.0.1 on a free
port with its data in ``tmp``, waits until it says it is ready, and kills it when the block
ends, whatever happens. The test scrapes only what its configuration names (loopback
addresses the test started). Every wait polls with a deadline.

``replaying_exporters`` starts the fleet such a Prometheus scrapes in the fleet tests (``FLEET``):
one ``affmon export --replay`` per loopback address, all on one port (``shared_port``).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CACHE = Path(__file__).resolve().parent.parent.parent / ".cache" / "prometheus" / "usr" / "bin"  # tests/run's
READY_TIMEOUT_S = 60.0  # a loaded 2-core machine starts it in seconds; the deadline is generous


def binary(name: str) -> str:
    """``name`` (prometheus, promtool) as tests/run unpacked it, else from PATH."""
    cached = CACHE / name
    if cached.is_file() and os.access(cached, os.X_OK):
        return str(cached)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"no {name} in {CACHE} or on PATH: tests/run unpacks Debian's prometheus package there")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def api(base: str, path: str, **params: str) -> Any:
    data = urllib.parse.urlencode(params).encode() if params else None
    with urllib.request.urlopen(f"{base}{path}", data=data, timeout=10) as response:
        return json.loads(response.read())


def query(base: str, promql: str) -> list[dict[str, Any]]:
    answer = api(base, "/api/v1/query", query=promql)
    assert answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def ready(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/-/ready", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@dataclass
class Prometheus:
    base: str  # http://127.0.0.1:PORT
    process: subprocess.Popen[bytes]
    log: Path

    def kill(self) -> None:
        """Stop it now (a test of what its clients say when it is gone)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


@contextmanager
def running(tmp: Path, config: str, *, extra_args: tuple[str, ...] = ()) -> Iterator[Prometheus]:
    """Prometheus with ``config`` (YAML text) on 127.0.0.1, data under ``tmp``; killed when the
    block ends. A port taken between probing and binding: another, three times."""
    config_file = tmp / "prometheus.yml"
    config_file.write_text(config)
    log = tmp / "prometheus.log"
    for _ in range(3):
        base = f"http://127.0.0.1:{free_port()}"
        with log.open("w") as out:
            process = subprocess.Popen(
                [
                    binary("prometheus"),
                    f"--config.file={config_file}",
                    f"--storage.tsdb.path={tmp / 'data'}",
                    f"--web.listen-address={base.removeprefix('http://')}",
                    "--log.level=warn",
                    *extra_args,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        server = Prometheus(base, process, log)
        try:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while process.poll() is None and not ready(base) and time.monotonic() < deadline:
                time.sleep(0.1)
            if process.poll() is None and ready(base):
                yield server
                return
        finally:
            server.kill()
    raise AssertionError(f"prometheus did not start:\n{log.read_text()[-3000:]}")


def scrape_config(jobs: dict[str, list[str]], *, interval: str = "1s", rule_files: tuple[str, ...] = ()) -> str:
    """A configuration scraping each job's targets every ``interval`` (evaluating rules as
    often)."""
    lines = [
        "global:",
        f"  scrape_interval: {interval}",
        f"  scrape_timeout: {interval}",
        f"  evaluation_interval: {interval}",
    ]
    if rule_files:
        lines.append("rule_files: [" + ", ".join(f"'{f}'" for f in rule_files) + "]")
    lines.append("scrape_configs:")
    for job, targets in jobs.items():
        listed = ", ".join(f"'{t}'" for t in targets)
        lines += [f"  - job_name: {job}", f"    static_configs: [{{targets: [{listed}]}}]"]
    return "\n".join(lines) + "\n"


# The fleet on one machine (docs/export.md): ``affmon export --replay`` processes, each on its
# own loopback address, all on one port.
REPO = Path(__file__).resolve().parent.parent.parent
RECORDINGS = REPO / "tests" / "fixtures" / "recordings"
# The fleet of the fleet tests and benchmarks: loopback address -> recording. A healthy
# node, a job starved by other tenants' hogs, one on a too-narrow mask, a two-GPU node of
# two ranks on one mask, and an input-bound rank (one DataLoader worker).
FLEET = {
    "127.0.0.2": "clean",
    "127.0.0.3": "hogs",
    "127.0.0.4": "narrow",
    "127.0.0.5": "ddp2_overlap",
    "127.0.0.6": "input_bound",
}
KILLED = "127.0.0.4"  # the exporter the stale-node tests kill
EXPORTERS_TIMEOUT_S = 60.0


def shared_port(addresses: Iterable[str]) -> int:
    """A port free on every one of ``addresses`` (each checked by binding it)."""
    for _ in range(20):
        port = free_port()
        try:
            with ExitStack() as held:
                for address in addresses:
                    s = held.enter_context(socket.socket())
                    s.bind((address, port))
            return port
        except OSError:
            continue
    raise AssertionError(f"no port free on {', '.join(addresses)}")


@contextmanager
def replaying_exporters(fleet: Mapping[str, str], port: int) -> Iterator[dict[str, subprocess.Popen[str]]]:
    """One ``affmon export --replay`` per address of ``fleet`` (address -> recording of
    tests/fixtures/recordings/), each killed when the block ends, whatever happens; each has
    said where it serves before this yields address -> process."""
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        for address, recording in fleet.items():
            replay = ["--replay", str(RECORDINGS / f"{recording}.jsonl.gz"), "--listen", f"{address}:{port}"]
            procs[address] = subprocess.Popen(
                [sys.executable, "-m", "affmon", "export", *replay], stderr=subprocess.PIPE, text=True, cwd=REPO
            )
        deadline = time.monotonic() + EXPORTERS_TIMEOUT_S
        for address, proc in procs.items():
            assert proc.stderr is not None
            ready_, _, _ = select.select([proc.stderr], [], [], max(deadline - time.monotonic(), 0))
            line = proc.stderr.readline() if ready_ else ""
            assert f"serving http://{address}:{port}/metrics, replaying" in line, (address, line, proc.poll())
        yield procs
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()
