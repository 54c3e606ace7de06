"""The fleet's Prometheus client (``affmon.fleet.client``) against real local HTTP servers
started here: one that answers as Prometheus does, one that hangs (the timeout), one that
answers errors or no JSON; and nothing listening (unreachable). Every failure is one line
that says which; ``affmon fleet`` ends on it with exit status 2 and no traceback."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from affmon.fleet.client import (
    BadAnswer,
    HttpError,
    PrometheusClient,
    PrometheusError,
    TimedOut,
    Unreachable,
    base_url,
)
from tests.helpers.prom import free_port

REPO = Path(__file__).resolve().parent.parent.parent
Seen = list[tuple[str, dict[str, list[str]]]]  # each request's path and form
Reply = Callable[[dict[str, list[str]], str], tuple[int, bytes]]  # (form, path) -> (status, body)


@contextmanager
def server(
    reply: Reply, hang: threading.Event | None = None
) -> Iterator[tuple[str, list[tuple[str, dict[str, list[str]]]]]]:
    """An HTTP server on 127.0.0.1 answering every POST with ``reply``; with ``hang``, it waits
    for that event before answering. Yields its base URL and the requests it got."""
    seen: Seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            form = parse_qs(self.rfile.read(length).decode())
            seen.append((self.path, form))
            if hang is not None:
                hang.wait(60)
            status, body = reply(form, self.path)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        if hang is not None:
            hang.set()
        httpd.shutdown()
        httpd.server_close()


def vector(result: list[dict[str, Any]]) -> Reply:
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()
    return lambda form, path: (200, body)


def test_an_instant_query_is_posted_and_its_vector_returned():
    result = [{"metric": {"instance": "a:1", "part": "up"}, "value": [100.0, "1"]}]
    with server(vector(result)) as (url, seen):
        client = PrometheusClient(url + "/")
        assert client.query("up", at=100.5) == result
        assert seen == [("/api/v1/query", {"query": ["up"], "time": ["100.500"]})]
        assert client.queries == 1 and client.seconds > 0


def test_a_range_query_asks_its_range_and_step():
    body = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode()
    with server(lambda form, path: (200, body)) as (url, seen):
        assert PrometheusClient(url).query_range("x", 10, 70, 15) == []
        ((path, form),) = seen
        assert path == "/api/v1/query_range"
        assert (form["start"], form["end"], form["step"]) == (["10.000"], ["70.000"], ["15"])


def test_a_server_that_hangs_is_a_timeout_within_the_limit():
    hang = threading.Event()
    with server(vector([]), hang) as (url, _):
        started = time.monotonic()
        with pytest.raises(TimedOut) as caught:
            PrometheusClient(url, timeout_s=0.5).query("up")
        waited = time.monotonic() - started
    assert waited < 30  # 0.5 s asked; generous for a loaded machine, far below the hang
    assert str(caught.value) == f"Prometheus at {url} did not answer within 0.5 s"


def test_nothing_listening_is_unreachable():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(Unreachable) as caught:
        PrometheusClient(url).query("up")
    assert str(caught.value) == f"Prometheus at {url} is unreachable: Connection refused"


@pytest.mark.parametrize(
    ("status", "body", "error", "words"),
    [
        (400, b'{"status":"error","errorType":"bad_data","error":"parse error:\\nunexpected"}', HttpError, "HTTP 400"),
        (503, b"Service Unavailable", HttpError, "HTTP 503"),
        (200, b"<html>a login page</html>", BadAnswer, "did not answer JSON"),
        (200, b'{"status":"error","error":"query timed out"}', BadAnswer, "query timed out"),
        (200, b'{"status":"success","data":{"resultType":"matrix","result":[]}}', BadAnswer, "not a vector"),
        (200, b"[1, 2]", BadAnswer, "did not answer the API's JSON"),
    ],
)
def test_bad_answers_are_one_line_that_says_why(status, body, error, words):
    with server(lambda form, path: (status, body)) as (url, _), pytest.raises(error) as caught:
        PrometheusClient(url).query("up")
    message = str(caught.value)
    assert words in message and url in message and "\n" not in message


@pytest.mark.parametrize("text", ["prometheus:9090", "ftp://host", "http://", "http://h:99999", "http://h/?q=1", ""])
def test_what_is_not_a_prometheus_url_is_refused(text):
    with pytest.raises(PrometheusError):
        base_url(text)


def test_a_path_prefix_is_kept():
    assert base_url("https://host/prometheus/") == "https://host/prometheus"


def run_fleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "affmon", "fleet", *args], capture_output=True, text=True, cwd=REPO, timeout=120
    )


def test_the_command_ends_in_one_line_and_status_2_when_prometheus_is_not_there():
    url = f"http://127.0.0.1:{free_port()}"
    for output in ("--json", "--once"):
        done = run_fleet("--prometheus", url, output)
        assert done.returncode == 2, done
        assert done.stderr == f"affmon: Prometheus at {url} is unreachable: Connection refused\n"
        assert done.stdout == ""
    done = run_fleet("--prometheus", "localhost:9090", "--json")
    assert (done.returncode, done.stderr) == (2, "affmon: not a Prometheus URL (http://HOST:PORT): 'localhost:9090'\n")


def test_the_command_says_a_timeout_in_one_line():
    hang = threading.Event()
    with server(vector([]), hang) as (url, _):
        done = run_fleet("--prometheus", url, "--json", "--timeout", "0.5")
    assert (done.returncode, done.stderr) == (2, f"affmon: Prometheus at {url} did not answer within 0.5 s\n")


def test_a_closed_connection_is_unreachable():
    """A server that accepts and closes without a word (a proxy in front of a dead one)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            conn.recv(65536)
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        with pytest.raises(Unreachable) as caught:
            PrometheusClient(url).query("up")
    finally:
        stop.set()
        thread.join()
        listener.close()
    assert str(caught.value).startswith(f"Prometheus at {url} is unreachable: ")
