"""A thread number reused between a pin's listing and its set lands the set on another task:
the pin checks each set against the thread's start time, gives the stranger its creator's
mask back at once and says so (``tests/helpers/tid_reuse_pin.py``: forced with ``ns_last_pid`` in a
private PID namespace)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parent.parent / "helpers" / "tid_reuse_pin.py"


def test_a_set_that_landed_on_a_task_that_took_the_number_is_undone_and_reported():
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["reused"], "the number was not reused: nothing was tested"
    assert got["ok"]
    # The stranger (sleep, started by the test with the test's mask) has its creator's mask,
    # not the pinned one; the job's remaining thread is pinned.
    assert got["stranger_mask"] == got["cpus"]
    assert list(got["job_masks"].values()) == [[got["cpus"][0]]]
    text = "\n".join(got["lines"])
    assert f"TID {got['victim']} was taken by another task (sleep)" in text
    assert "exited before its mask was set" in text
