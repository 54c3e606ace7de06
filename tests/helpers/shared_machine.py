"""On a shared machine affmon acts only on the job it names: run inside a private PID
namespace (this script is its PID 1), with its own journal.

    python tests/helpers/shared_machine.py

Runs itself again inside ``unshare --pid --fork --mount-proc`` and prints one JSON object:

* ``pin 1``, ``tune 1`` and ``diagnose --pid 1``: PID 1 (here this script: the namespace's
  init) is no job: refused in one line, and no "to apply: affmon pin 1" advice;
* a job whose child started a session of its own (a daemon it spawned) and one whose child
  became another user (uid 65534): ``pin --with-children`` refuses in one line naming that
  child and changes nothing; with ``--include-others`` it pins them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent
CHILD = """
import os, sys, time
mode = sys.argv[1]
pid = os.fork()
if pid == 0:
    if mode == "session":
        os.setsid()
    else:
        os.setresgid(65534, 65534, 65534)
        os.setresuid(65534, 65534, 65534)
    time.sleep(300)
    os._exit(0)
print(pid, flush=True)
time.sleep(300)
"""


def affmon(*args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "affmon", *args], capture_output=True, text=True, timeout=120, cwd=REPO)
    return {"status": out.returncode, "stdout": out.stdout, "stderr": out.stderr}


def masks(pids: list[int]) -> dict[str, list[int]]:
    return {str(p): sorted(os.sched_getaffinity(p)) for p in pids}


def inside() -> dict[str, Any]:
    got: dict[str, Any] = {"me": os.getpid()}
    cpus = sorted(os.sched_getaffinity(0))
    got["pin_1"] = affmon("pin", "1", "--cpus", str(cpus[0]))
    got["tune_1"] = affmon("tune", "1", "--dry-run", "--interval", "0.3")
    got["diagnose_1"] = affmon("diagnose", "--pid", "1", "--interval", "0.5")
    for mode in ("session", "user"):
        job = subprocess.Popen([sys.executable, "-c", CHILD, mode], stdout=subprocess.PIPE, text=True)
        try:
            assert job.stdout is not None
            child = int(job.stdout.readline())
            time.sleep(0.3)
            pids = [job.pid, child]
            before = masks(pids)
            refused = affmon("pin", str(job.pid), "--cpus", str(cpus[0]), "--with-children")
            after_refused = masks(pids)
            included = affmon("pin", str(job.pid), "--cpus", str(cpus[0]), "--with-children", "--include-others")
            got[mode] = {
                "child": child,
                "before": before,
                "refused": refused,
                "after_refused": after_refused,
                "included": included,
                "after_included": masks(pids),
            }
            affmon("undo", str(job.pid))
        finally:
            job.kill()
            job.wait()
    return got


def main() -> int:
    if sys.argv[1:] == ["--inside"]:
        print(json.dumps(inside()))
        return 0
    unshare = shutil.which("unshare")
    if unshare is None:
        print("setup: needs unshare (util-linux)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as state:
        env = {**os.environ, "XDG_STATE_HOME": state}
        argv = [unshare, "--pid", "--fork", "--mount-proc", sys.executable, __file__, "--inside"]
        return subprocess.run(argv, cwd=REPO, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
