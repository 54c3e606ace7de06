"""On a shared machine affmon acts only on the job it names (``tests/helpers/shared_machine.py``, in a
private PID namespace whose init is the script itself): PID 1 is no job, and a pin with its
children stops at the job's own processes (its user and session)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).parent.parent / "helpers" / "shared_machine.py"


@pytest.fixture(scope="module")
def got() -> dict[str, Any]:
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    found: dict[str, Any] = json.loads(out.stdout)
    assert found["me"] == 1  # the scenarios ran as the namespace's init
    return found


def one_line(stderr: str) -> bool:
    return len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr


def test_pid_1_is_no_job_to_pin_tune_or_advise(got):
    for name in ("pin_1", "tune_1"):
        out = got[name]
        assert out["status"] != 0 and one_line(out["stderr"]) and "PID 1 is the machine's init" in out["stderr"]
    diagnosed = got["diagnose_1"]
    assert "affmon pin 1" not in diagnosed["stdout"]
    assert "STALLED" not in diagnosed["stdout"]  # a script waiting on its child's pipe is no stalled training loop


@pytest.mark.parametrize(("mode", "said"), [("session", "belongs to session"), ("user", "belongs to user nobody")])
def test_a_pin_with_children_stops_at_the_jobs_own_processes(got, mode, said):
    seen = got[mode]
    refused = seen["refused"]
    assert refused["status"] != 0 and one_line(refused["stderr"])
    assert f"PID {seen['child']} " in refused["stderr"] and said in refused["stderr"]
    assert "--include-others" in refused["stderr"]
    assert seen["after_refused"] == seen["before"]  # nothing changed
    assert seen["included"]["status"] == 0, seen["included"]
    assert set(map(tuple, seen["after_included"].values())) == {(min(seen["before"][str(seen["child"])]),)}
