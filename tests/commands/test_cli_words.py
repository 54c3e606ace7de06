"""The words of the one-shot commands: a command printed as a shell would run it, counts
that agree with their nouns, a plan that says which GPUs it is for once."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).parent.parent / "fixtures"


def affmon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "affmon", *args], capture_output=True, text=True, timeout=120)


def test_exec_dry_run_prints_the_command_as_a_shell_would_run_it():
    argv = ["python3", "-c", "print(1)", "it's here"]
    out = affmon("exec", "--gpu", "0", "--dry-run", "--", *argv)
    assert out.returncode == 0, out.stderr
    shown = out.stdout.strip().rsplit(": ", 1)[1]
    assert shown == "python3 -c 'print(1)' 'it'\"'\"'s here'"
    assert shlex.split(shown) == argv  # pasted into a shell, it is the same command


def test_one_cpu_offline_is_said_in_the_singular_and_several_in_the_plural():
    one = affmon("pin", "1", "--cpus", "4000", "--dry-run")
    assert one.returncode == 2 and "CPU 4000 is offline or do not exist" not in one.stderr
    assert "CPU 4000 is offline" in one.stderr, one.stderr
    many = affmon("pin", "1", "--cpus", "4000-4001", "--dry-run")
    assert many.returncode == 2 and "CPUs 4000-4001 are offline" in many.stderr, many.stderr


def test_a_plan_names_the_gpus_it_is_for_once():
    xml = next(iter(sorted((FIXTURES / "hwloc_xml").glob("*.xml"))))
    out = affmon("plan", "--hwloc-xml", str(xml))
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0]
    assert first == "GPUs planned: every GPU in the topology", first


def test_a_pins_thread_lines_have_a_column_header_and_an_undo_counts_its_pins():
    from affmon.actions.describe import THREAD_HEADER, result_text, undo_text
    from affmon.actions.pin import PinResult
    from affmon.actions.threads import ThreadResult
    from affmon.actions.undo import UndoResult

    moved = ThreadResult(10, 11, frozenset({0, 1}), frozenset({1}), "set", "")
    result = PinResult(ok=True, cpus=frozenset({1}), threads=(moved,), error=None, rolled_back=False, journal_id="e1")
    lines = result_text(result)
    assert lines[0] == THREAD_HEADER and "MASK BEFORE" in lines[0]
    assert lines[1].split()[:3] == ["10", "11", "set"]
    assert undo_text(UndoResult(True, ("e1",), (), None)) == ["undid 1 pin: e1"]
