"""A thread number reused between a pin's listing and its set, forced: run inside a private
PID namespace, where writing N-1 to ``/proc/sys/kernel/ns_last_pid`` makes the next task get
the number N.

    python tests/helpers/tid_reuse_pin.py

A process with a thread that ends on request is pinned to one CPU by ``affmon.actions.pin``
with an ``AffinityOps`` that, on the set of that thread, first ends it and starts ``sleep``
with its number, then makes the set: the set lands on ``sleep``. Prints one JSON object: the
masks of ``sleep`` and of the process's threads after the pin, the pin's result lines, and
whether the number was really reused.
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
sys.path.insert(0, str(REPO))

NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"
VICTIM = """
import json, os, sys, threading, time
ready = threading.Event()
tid = []
def victim():
    tid.append(threading.get_native_id())
    ready.set()
    sys.stdin.readline()  # ends when told
t = threading.Thread(target=victim)
t.start()
ready.wait()
print(json.dumps({"pid": os.getpid(), "victim": tid[0]}), flush=True)
t.join()
print("ended", flush=True)
time.sleep(300)
"""


def inside() -> dict[str, Any]:
    from affmon.actions.describe import result_text
    from affmon.actions.journal import Journal
    from affmon.actions.pin import pin
    from affmon.actions.threads import OsAffinity
    from affmon.core.model.cpuset import CpuSet

    cpus = sorted(os.sched_getaffinity(0))
    job = subprocess.Popen([sys.executable, "-c", VICTIM], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert job.stdin is not None and job.stdout is not None
    info = json.loads(job.stdout.readline())
    victim: int = info["victim"]
    strangers: list[subprocess.Popen[bytes]] = []

    class Racing(OsAffinity):
        """On the set of the victim thread: end it, start ``sleep`` with its number, then set."""

        def set(self, tid: int, cpus: CpuSet) -> None:
            if tid == victim and not strangers:
                assert job.stdin is not None and job.stdout is not None
                job.stdin.write("end\n")
                job.stdin.flush()
                assert job.stdout.readline().strip() == "ended"
                end = time.monotonic() + 10
                while time.monotonic() < end:
                    Path(NS_LAST_PID).write_text(str(victim - 1))
                    stranger = subprocess.Popen(["sleep", "300"])
                    strangers.append(stranger)
                    if stranger.pid == victim:
                        break
                    time.sleep(0.01)
            super().set(tid, cpus)

    try:
        with tempfile.TemporaryDirectory() as state:
            result = pin(info["pid"], frozenset({cpus[0]}), ops=Racing(), journal=Journal(Path(state) / "j.jsonl"))
        reused = [s for s in strangers if s.pid == victim]
        return {
            "cpus": cpus,
            "victim": victim,
            "reused": bool(reused),
            "stranger_mask": sorted(os.sched_getaffinity(victim)) if reused else None,
            "job_masks": {t: sorted(os.sched_getaffinity(int(t))) for t in os.listdir(f"/proc/{info['pid']}/task")},
            "ok": result.ok,
            "lines": result_text(result),
        }
    finally:
        for s in strangers:
            s.kill()
        job.kill()


def main() -> int:
    if sys.argv[1:] == ["--inside"]:
        print(json.dumps(inside()))
        return 0
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        print("setup: needs root and unshare (a PID namespace, and ns_last_pid)", file=sys.stderr)
        return 2
    argv = [unshare, "--pid", "--fork", "--mount-proc", sys.executable, __file__, "--inside"]
    return subprocess.run(argv, cwd=REPO).returncode


if __name__ == "__main__":
    sys.exit(main())
