"""``diagnose`` after an undo killed half way, in a private PID namespace with its own
journal (``unshare --pid --fork --mount-proc``, ``XDG_STATE_HOME`` in a temporary
directory): the entry is pending, some threads are still on the pin's mask, and the
finding says to run ``affmon undo`` again (what finishes it), not that other software
reset the pin (and it suggests no pin). While an affmon holds the journal's lock a
pending entry may be its work in progress: nothing is said of it then.

Run alone: ``python tests/actions/test_undo_cut_short.py SCENARIO`` prints the scenario's JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO))  # run as a script inside the namespace too

from tests.helpers.crash import crashing_undo  # noqa: E402
from tests.helpers.live import needs_namespace, run_in_namespace, scenario_main  # noqa: E402
from tests.helpers.proc import sleepers, start_ticks  # noqa: E402


@needs_namespace
def test_diagnose_after_an_undo_killed_half_way_says_to_run_undo_again() -> None:
    got = run_in_namespace(__file__, "killed_undo_diagnosed")
    assert got["killed_code"] == 70 and got["state"] == "pending" and got["still_pinned"] > 0
    drift = got["drift"]
    assert drift is not None, got["stdout"]
    assert f"run `affmon undo {got['pid']}` again" in drift["message"]
    assert "other software" not in drift["message"]
    assert drift["suggestion"] is None  # no pin to make again
    assert f"affmon undo {got['pid']}" in (drift["remedy"] or "")
    # While an affmon holds the lock, the pending entry may be its work: nothing is said.
    assert got["cut_short_while_locked"] == []
    assert got["cut_short_unlocked"] == [[got["pid"], got["start"]]]


# -- the scenario, inside the namespace ----------------------------------------------------


def killed_undo_diagnosed(state: Path) -> dict[str, Any]:
    from affmon.actions.journal import Journal, default_journal_path, expected_masks
    from affmon.actions.pin import pin

    os.environ["XDG_STATE_HOME"] = str(state)
    a = sorted(os.sched_getaffinity(0))[0]
    path = default_journal_path()
    journal = Journal(path)
    job = sleepers(30)
    try:
        pinned = pin(job.pid, {a}, journal=journal)
        assert pinned.ok and pinned.journal_id is not None
        killed = subprocess.run(crashing_undo(job.pid, path, after=11), cwd=REPO)
        still = sum(
            os.sched_getaffinity(int(t)) == {a} for t in os.listdir(f"/proc/{job.pid}/task")
        )  # fmt: skip
        other = Journal(path)
        with other.locked():  # an affmon at work: its pending entry is not cut short
            while_locked = list(expected_masks(journal).cut_short)
        unlocked = list(expected_masks(journal).cut_short)
        out = subprocess.run(
            [sys.executable, "-m", "affmon", "diagnose", "--pid", str(job.pid), "--interval", "0.3", "--json"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        report = json.loads(out.stdout)
        findings = report["findings"] if isinstance(report, dict) else report
        drift = next((f for f in findings if f["code"] == "AFFINITY_DRIFT"), None)
        return {
            "pid": job.pid,
            "start": start_ticks(job.pid),
            "killed_code": killed.returncode,
            "state": journal.get(pinned.journal_id).state,
            "still_pinned": still,
            "cut_short_while_locked": [list(k) for k in while_locked],
            "cut_short_unlocked": [list(k) for k in unlocked],
            "drift": drift,
            "stdout": out.stdout[-2000:] + out.stderr[-1000:],
        }
    finally:
        job.kill()


if __name__ == "__main__":
    sys.exit(scenario_main([killed_undo_diagnosed]))
