"""``--pid`` on every command that takes it, as the README writes it: several PIDs after one
``--pid``; a process named by ``--pid`` gets its pages per NUMA node whatever it runs; and
only a python process (or one with a GPU context) named by ``--pid`` gets a loop line."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from affmon.cli import build_parser
from affmon.collect.sampler import Sampler, Selection
from affmon.core.model.samples import GpuProcess, GpuSample, PcieLink
from affmon.sources.live import probed_pids
from tests.helpers.live import driven

QUIET = Path(__file__).parent.parent / "helpers" / "quiet_other.py"


def affmon(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "affmon", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    ("args", "pids"),
    [
        (["snapshot", "--pid", "5", "6", "--json"], [5, 6]),
        (["snapshot", "--pid", "5", "--pid", "6"], [5, 6]),
        (["diagnose", "--pid", "5", "6", "7", "--samples", "4"], [5, 6, 7]),
        (["record", "out.jsonl", "--pid", "5", "6"], [5, 6]),
        (["record", "--pid", "5", "6", "--duration", "2", "out.jsonl"], [5, 6]),
        (["audit", "--pid", "5", "6", "--strict"], [5, 6]),
        (["snapshot"], []),
    ],
)
def test_every_subcommand_with_pid_takes_several(args: list[str], pids: list[int]) -> None:
    assert build_parser().parse_args(args).pid == pids


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["record", "--pid", "5", "out.jsonl"], "put FILE first, affmon record FILE --pid PID"),
        (["diagnose", "--pid", "5", "x"], "not a process id: 'x'"),
        (["snapshot", "--pid"], "expected at least one argument"),
    ],
)
def test_a_pid_list_that_swallows_something_else_says_so_in_one_line(args: list[str], message: str) -> None:
    out = affmon(*args)
    assert out.returncode == 2 and out.stdout == ""
    [line] = out.stderr.splitlines()
    assert line.startswith("affmon: ") and message in line


@contextmanager
def two_plain_pythons() -> Iterator[tuple[int, int]]:
    """Two python processes with no GPU or deep-learning runtime mapped."""
    with driven(QUIET, "--name", "python3") as first, driven(QUIET, "--name", "python3") as second:
        yield first.pid, second.pid


def test_snapshot_and_diagnose_take_two_pids_and_watch_both() -> None:
    with two_plain_pythons() as (a, b):
        snap = affmon("snapshot", "--pid", str(a), str(b), "--json", "--interval", "0.5")
        diag = affmon("diagnose", "--pid", str(a), str(b), "--json", "--interval", "0.3", "--samples", "3")
    assert snap.returncode == 0, snap.stderr
    watched = {p["pid"]: p for p in json.loads(snap.stdout)["processes"]}  # snapshot lists the watched
    assert set(watched) == {a, b}
    # Named by --pid: its pages per NUMA node, though it maps no runtime (not training).
    for pid in (a, b):
        memory = watched[pid]["memory_by_node"]
        assert isinstance(memory, dict) and memory and sum(memory.values()) > 0, memory
    assert diag.returncode in (0, 1), diag.stderr
    assert {line["pid"] for line in json.loads(diag.stdout)["loops"]} == {a, b}


def test_a_named_process_that_is_not_python_gets_no_loop_line() -> None:
    shell = subprocess.Popen(["sleep", "120"])
    try:
        with driven(QUIET, "--name", "python3") as python:
            out = affmon("snapshot", "--pid", str(shell.pid), str(python.pid), "--json", "--interval", "1")
            diag = affmon("diagnose", "--pid", str(shell.pid), "--interval", "0.5", "--samples", "3")
    finally:
        shell.kill()
        shell.wait()
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [p["pid"] for p in data["processes"] if "loop" in p] == [python.pid]
    named = next(p for p in data["processes"] if p["pid"] == shell.pid)
    assert named["memory_by_node"] is not None  # named: its pages read, whatever it runs
    assert diag.returncode in (0, 1), diag.stderr
    assert f"loop of {shell.pid}" not in diag.stdout


def gpu_with(pid: int) -> GpuSample:
    """A GPU as NVML would list it with ``pid`` holding a context on it."""
    return GpuSample(
        index=0,
        name="fake",
        pci_bus_id="0000:3b:00.0",
        uuid=None,
        util_percent=None,
        mem_util_percent=None,
        mem_used_bytes=None,
        mem_total_bytes=None,
        pcie_tx_bytes_total=None,
        pcie_rx_bytes_total=None,
        pcie_tx_window_bytes_per_s=None,
        pcie_rx_window_bytes_per_s=None,
        pcie_link=PcieLink(None, None, None, None),
        power_w=None,
        sm_clock_mhz=None,
        mem_clock_mhz=None,
        processes=(GpuProcess(pid, 1 << 30),),
    )


def test_a_named_process_with_a_gpu_context_is_probed_whatever_it_runs() -> None:
    shell = subprocess.Popen(["sleep", "120"])
    try:
        plain = Sampler("/", Selection(pids=(shell.pid,)))
        on_gpu = Sampler("/", Selection(pids=(shell.pid,)), gpu_source=lambda: (gpu_with(shell.pid),))
        assert probed_pids(plain.sample(), plain) == ()
        assert probed_pids(on_gpu.sample(), on_gpu) == (shell.pid,)
    finally:
        shell.kill()
        shell.wait()
