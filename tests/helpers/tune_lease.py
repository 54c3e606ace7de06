"""A tune owns its job for the length of the tune: scenarios run in a private PID namespace
with their own journal and lease directory, on processes this script starts.

    python tests/helpers/tune_lease.py pin_during_tune|two_tunes|sighup|sigkill

Runs itself again inside ``unshare --pid --fork --mount-proc`` (``XDG_STATE_HOME`` and
``AFFMON_LEASE_DIR`` in a temporary directory) and prints one JSON object: the masks of
every task before, during and after (read here with ``sched_getaffinity``, not by affmon),
and what each affmon said and how it exited.

* ``pin_during_tune``: ``affmon tune`` is trying row 1; ``affmon pin PID --cpus C`` must
  refuse in one line and change nothing; ``--force`` ends the tune (which puts its trial
  back) and pins; ``affmon undo PID`` then gives every task the mask it had before tune.
* ``two_tunes``: a second ``affmon tune`` of the same job refuses in one line naming the
  first, and changes nothing; the first ends as usual.
* ``sighup``: ``kill -HUP`` of a tune trying a row (its terminal went away): every mask is
  back as before, exit status 130.
* ``sigkill``: ``kill -9`` of a tune trying a row: the trial stays (nothing can run after
  SIGKILL); the next ``affmon pin`` names the tune that died and offers the undo; ``affmon
  undo PID`` restores and the stale lease is gone.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO))  # run as a script: the repository's tests package

from tests.helpers.proc import thread_masks  # noqa: E402

WORKLOAD = Path(__file__).parent.parent / "helpers" / "workload.py"
TUNE = ["--no-isolate", "--settle", "1", "--window", "2", "--interval", "0.3"]


def affmon(*args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "affmon", *args], capture_output=True, text=True, timeout=120, cwd=REPO)
    return {"status": out.returncode, "stdout": out.stdout, "stderr": out.stderr}


def masks(pids: list[int]) -> dict[str, list[int]]:
    """tid -> its mask (sorted), as JSON keeps them, for every thread of ``pids`` still alive."""
    return {str(tid): sorted(m) for tid, m in thread_masks(*pids, skip_exited=True).items()}


def start_tune(pid: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "affmon", "tune", str(pid), *TUNE],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def trying(tune: subprocess.Popen[str], pids: list[int], before: dict[str, list[int]]) -> list[str]:
    """Read the tune's lines until it tries row 1 and its trial is in force (some mask moved)."""
    assert tune.stdout is not None
    lines = []
    for line in tune.stdout:
        lines.append(line.rstrip())
        if line.startswith("trying row 1"):
            break
    end = time.monotonic() + 20
    while masks(pids) == before and time.monotonic() < end:
        time.sleep(0.05)
    return lines


def finish(tune: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = tune.communicate(timeout=120)
    return {"status": tune.returncode, "stdout": out, "stderr": err}


def leases() -> list[str]:
    return sorted(os.listdir(os.environ["AFFMON_LEASE_DIR"]))


def inside(mode: str) -> dict[str, Any]:
    cpus = sorted(os.sched_getaffinity(0))
    job = subprocess.Popen(
        [sys.executable, str(WORKLOAD), "--busy", "2", "--child", "--seconds", "300"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert job.stdout is not None
        info = json.loads(job.stdout.readline())
        pids = [info["pid"], info["child"]]
        time.sleep(0.5)
        before = masks(pids)
        got: dict[str, Any] = {"cpus": cpus, "info": info, "before": before}
        tune = start_tune(info["pid"])
        got["tune_lines"] = trying(tune, pids, before)
        got["during"] = masks(pids)
        got["leases_during"] = leases()
        if mode == "pin_during_tune":
            got["pin"] = affmon("pin", str(info["pid"]), "--cpus", str(cpus[0]))
            got["after_refused_pin"] = masks(pids)
            got["pin_force"] = affmon("pin", str(info["pid"]), "--cpus", str(cpus[0]), "--force")
            got["tune"] = finish(tune)
            got["after_force"] = masks(pids)
            got["undo"] = affmon("undo", str(info["pid"]))
        elif mode == "two_tunes":
            got["second"] = affmon("tune", str(info["pid"]), *TUNE)
            got["after_second"] = masks(pids)
            tune.send_signal(signal.SIGINT)
            got["tune"] = finish(tune)
        elif mode == "sighup":
            tune.send_signal(signal.SIGHUP)
            got["tune"] = finish(tune)
        elif mode == "sigkill":
            tune.kill()
            got["tune"] = finish(tune)
            got["after_kill"] = masks(pids)
            got["leases_after_kill"] = leases()
            got["pin"] = affmon("pin", str(info["pid"]), "--cpus", ",".join(map(str, cpus)), "--dry-run")
            got["undo"] = affmon("undo", str(info["pid"]))
        got["after"] = masks(pids)
        got["leases_after"] = leases()
        return got
    finally:
        job.kill()
        job.wait()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["pin_during_tune", "two_tunes", "sighup", "sigkill"])
    ap.add_argument("--inside", action="store_true")
    a = ap.parse_args()
    if a.inside:
        print(json.dumps(inside(a.mode)))
        return 0
    unshare = shutil.which("unshare")
    if unshare is None:
        print("setup: needs unshare (util-linux)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as state:
        lease_dir = Path(state) / "leases"
        lease_dir.mkdir()
        lease_dir.chmod(0o1777)
        env = {**os.environ, "XDG_STATE_HOME": state, "AFFMON_LEASE_DIR": str(lease_dir)}
        argv = [unshare, "--pid", "--fork", "--mount-proc", sys.executable, __file__, a.mode, "--inside"]
        return subprocess.run(argv, cwd=REPO, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
