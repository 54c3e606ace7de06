"""``affmon diagnose`` and ``affmon pin --suggest`` on jobs whose cure is not a new core set,
inside a private PID namespace with its own journal: the pins touch only the processes this
script starts.

    python tests/helpers/remedy_pins.py oversubscribed|confined

Runs itself again inside ``unshare --pid --fork --mount-proc`` with ``XDG_STATE_HOME`` in a
temporary directory, and prints one JSON object: what diagnose found, what pin said and
did, and every thread's mask before and after (read by this script, not by affmon).
"""

from __future__ import annotations

import argparse
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
sys.path.insert(0, str(REPO))  # run as a script: the repository's tests package

from tests.helpers.proc import thread_masks  # noqa: E402

WORKLOAD = Path(__file__).parent.parent / "helpers" / "remedy_workload.py"


def affmon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "affmon", *args], capture_output=True, text=True, timeout=120, cwd=REPO
    )


def masks(pids: list[int]) -> dict[str, list[int]]:
    """tid -> its mask (sorted), as JSON keeps them, for every thread of ``pids`` still alive."""
    return {str(tid): sorted(m) for tid, m in thread_masks(*pids, skip_exited=True).items()}


def journal_entries() -> int:
    state = Path(os.environ["XDG_STATE_HOME"]) / "affmon"
    return sum(len(p.read_text().splitlines()) for p in state.glob("*.jsonl")) if state.exists() else 0


def inside(mode: str) -> dict[str, Any]:
    cpus = sorted(os.sched_getaffinity(0))
    # Eight busy threads a CPU: more than any machine's CPUs can run without queueing.
    count = str(max(16, 8 * len(cpus)))
    args = ["threads", "--count", count] if mode == "oversubscribed" else ["confined", "--cpu", str(cpus[0])]
    job = subprocess.Popen([sys.executable, str(WORKLOAD), *args], stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout is not None
        info = json.loads(job.stdout.readline())
        time.sleep(1.0)
        pids = [info["pid"], *info["workers"]]
        found = affmon("diagnose", "--json", "--pid", str(info["pid"]), "--interval", "1", "--samples", "4")
        before = masks(pids)
        pinned = affmon("pin", str(info["pid"]), "--suggest", "--with-children", "--json")
        after = masks(pids)
        return {
            "info": info,
            "cpus": cpus,
            "diagnose": {"status": found.returncode, "stderr": found.stderr, **json.loads(found.stdout or "{}")},
            "pin": {"status": pinned.returncode, "stderr": pinned.stderr, **json.loads(pinned.stdout or "{}")},
            "before": before,
            "after": after,
            "journal_lines": journal_entries(),
        }
    finally:
        job.kill()
        job.wait()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["oversubscribed", "confined"])
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
        env = {**os.environ, "XDG_STATE_HOME": state}
        argv = [unshare, "--pid", "--fork", "--mount-proc", sys.executable, __file__, a.mode, "--inside"]
        return subprocess.run(argv, cwd=REPO, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
