"""Helpers for tests that spawn real processes with a known affinity."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

WORKLOAD = Path(__file__).parent.parent / "helpers" / "workload.py"
LOOP_WORKLOAD = Path(__file__).parent.parent / "helpers" / "loop_workload.py"


@contextmanager
def spawned(script: Path, *args: str) -> Iterator[dict[str, Any]]:
    """Start ``script`` with ``args``; yield its first line, JSON; kill its whole session after."""
    proc = subprocess.Popen(
        [sys.executable, str(script), *args], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line:
            raise RuntimeError(f"{script.name} {args} did not start (exit {proc.wait()})")
        yield json.loads(line)
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()


def workload(*args: str) -> AbstractContextManager[dict[str, Any]]:
    """Start ``workload.py`` with ``args``; yield its JSON line; kill it and its children."""
    return spawned(WORKLOAD, *args)


def loop(*args: str) -> AbstractContextManager[dict[str, Any]]:
    """Start ``loop_workload.py`` with ``args``; yield its JSON line; kill it and its children."""
    return spawned(LOOP_WORKLOAD, *args)


def usable_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


class Driven:
    """A helper process driven over its stdin: one command a line, one JSON answer a line.
    ``info``: its first line (its PID and what it set up)."""

    def __init__(self, proc: subprocess.Popen[str], info: dict[str, Any]) -> None:
        self.proc = proc
        self.info = info
        self.pid: int = info["pid"]

    def send(self, command: str) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())


@contextmanager
def driven(script: Path, *args: str, argv0: str | None = None) -> Iterator[Driven]:
    """Start ``script`` with ``args`` (``argv0``: the name the interpreter is started
    under, as a shell's ``exec -a``); yield it once it said what it is; kill its whole
    session after."""
    proc = subprocess.Popen(
        [argv0 or sys.executable, str(script), *args],
        executable=sys.executable,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        yield Driven(proc, json.loads(proc.stdout.readline()))
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()


# Tests that pin run their scenarios in a private PID namespace of their own (the script
# re-run inside with ``unshare``), never on the machine's other processes.
needs_namespace = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or len(os.sched_getaffinity(0)) < 2,
    reason="needs root, unshare (a private PID namespace) and two CPUs",
)


def run_in_namespace(script: str, scenario: str, *args: str) -> dict[str, Any]:
    """``script SCENARIO [ARGS...]`` run in a private PID namespace; its last stdout line, JSON."""
    argv = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, script, scenario, *args]
    out = subprocess.run(
        argv, cwd=Path(__file__).resolve().parent.parent.parent, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    return got


def scenario_main(scenarios: Iterable[Callable[..., dict[str, Any]]]) -> int:
    """The ``main`` of a scenario script, run inside the namespace as ``script SCENARIO
    [PATH...]``: the scenario function of that name is called with a temporary state
    directory and each ``PATH`` as a ``Path``; what it returns is printed as one JSON line,
    with the seconds it took."""
    by_name = {f.__name__: f for f in scenarios}
    scenario, *paths = sys.argv[1:]
    with tempfile.TemporaryDirectory() as state:
        started = time.monotonic()
        got = by_name[scenario](Path(state), *map(Path, paths))
        got["seconds"] = round(time.monotonic() - started, 2)
    print(json.dumps(got))
    return 0
