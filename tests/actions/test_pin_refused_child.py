"""A ``--with-children`` pin whose descendant the kernel refuses to change (EPERM: a
setuid program under a user's job), in a private PID namespace with its own journal
(``unshare --pid --fork --mount-proc``). The descendant runs with another effective user
than its real one; root may change it all the same, so the refusal is the kernel's answer
to a user, given by an ``AffinityOps`` that refuses that process's threads.

Without ``skip_refused`` the pin fails, names the process and why (a setuid program, its
effective and real users), says how to pin the others, and changes nothing. With it, the
others are pinned, the refused one is left as it was and named, and undo puts the others
back.

Run alone: ``python tests/actions/test_pin_refused_child.py SCENARIO`` prints the scenario's JSON.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO))  # run as a script inside the namespace too

from tests.helpers.live import needs_namespace, run_in_namespace, scenario_main  # noqa: E402
from tests.helpers.proc import distinct_masks  # noqa: E402


@needs_namespace
def test_a_refused_descendant_is_named_and_the_others_pinned_only_when_asked() -> None:
    got = run_in_namespace(__file__, "refused_child")
    refused = got["refused"]
    assert not refused["ok"] and refused["unchanged"]
    error = refused["error"]
    assert f"PID {got['child']} (python) under PID {got['job']} runs a setuid program" in error
    assert "(effective user nobody, real user root): not permitted to change its affinity" in error
    assert "--skip-refused" in error
    skipped = got["skipped"]
    assert skipped["ok"], skipped["error"]
    assert skipped["job_masks"] == [got["A"]] and skipped["child_masks"] == [got["BOTH"]]
    assert f"PID {got['child']}" in skipped["warning"] and "left as it is" in skipped["warning"]
    assert got["undo_ok"] and got["after_undo"] == [got["BOTH"]]


# -- the scenario, inside the namespace ----------------------------------------------------

JOB = """
import os, sys, threading
stop = threading.Event()
for _ in range(3):
    threading.Thread(target=stop.wait, daemon=True).start()
child = os.fork()
if child == 0:
    os.setresuid(0, 65534, 0)  # what a setuid program does: another effective user than the real one
    stop.wait()
print(child, flush=True)
sys.stdin.read()
"""


def refused_child(state: Path) -> dict[str, Any]:
    import errno

    from affmon.actions.journal import Journal
    from affmon.actions.pin import pin
    from affmon.actions.threads import OsAffinity
    from affmon.actions.undo import undo
    from affmon.core.model.cpuset import CpuSet

    both = sorted(os.sched_getaffinity(0))
    a = both[0]
    journal = Journal(state / "journal.jsonl")
    job = subprocess.Popen([sys.executable, "-c", JOB], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout is not None
        child = int(job.stdout.readline())
        child_tids = {int(t) for t in os.listdir(f"/proc/{child}/task")}

        class Refusing(OsAffinity):
            """The kernel's answer to a user for a process that runs as another."""

            def set(self, tid: int, cpus: CpuSet) -> None:
                if tid in child_tids:
                    raise OSError(errno.EPERM, "Operation not permitted")
                super().set(tid, cpus)

        refused = pin(job.pid, {a}, with_children=True, ops=Refusing(), journal=journal)
        unchanged = distinct_masks(job.pid) == [both] and distinct_masks(child) == [both]
        skipped = pin(job.pid, {a}, with_children=True, ops=Refusing(), journal=journal, skip_refused=True)
        job_masks, child_masks = distinct_masks(job.pid), distinct_masks(child)
        undone = undo(journal, job.pid, ops=Refusing())
        return {
            "A": [a],
            "BOTH": both,
            "job": job.pid,
            "child": child,
            "refused": {"ok": refused.ok, "error": refused.error or "", "unchanged": unchanged},
            "skipped": {
                "ok": skipped.ok,
                "error": skipped.error,
                "warning": skipped.warning or "",
                "job_masks": job_masks,
                "child_masks": child_masks,
            },
            "undo_ok": undone.ok,
            "after_undo": distinct_masks(job.pid),
        }
    finally:
        job.kill()


if __name__ == "__main__":
    sys.exit(scenario_main([refused_child]))
