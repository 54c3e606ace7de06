"""A pin or an undo killed between two system calls: the process exits (status 70) at its
``after``-th set of a thread's mask, with no rollback and no journal update, as a kill
there would leave it.

``crashing_pin`` and ``crashing_undo`` give the command line; run as a script:
``python tests/helpers/crash.py pin AFTER PID CPU JOURNAL`` or
``python tests/helpers/crash.py undo AFTER PID JOURNAL``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
EXIT_STATUS = 70


def crashing_pin(pid: int, cpu: int, journal: Path, after: int) -> list[str]:
    """Pin every thread of ``pid`` to ``cpu``, killed at the ``after``-th set."""
    return [sys.executable, __file__, "pin", str(after), str(pid), str(cpu), str(journal)]


def crashing_undo(pid: int, journal: Path, after: int) -> list[str]:
    """Undo the last pin of ``pid`` in ``journal``, killed at the ``after``-th set."""
    return [sys.executable, __file__, "undo", str(after), str(pid), str(journal)]


def main(argv: list[str]) -> None:
    sys.path.insert(0, str(REPO))
    from affmon.actions.journal import Journal
    from affmon.actions.pin import pin
    from affmon.actions.threads import OsAffinity
    from affmon.actions.undo import undo
    from affmon.core.model.cpuset import CpuSet

    what, after, pid, *rest = argv

    class Crash(OsAffinity):
        sets = 0

        def set(self, tid: int, cpus: CpuSet) -> None:
            Crash.sets += 1
            if Crash.sets == int(after):
                os._exit(EXIT_STATUS)
            super().set(tid, cpus)

    if what == "pin":
        cpu, journal = rest
        pin(int(pid), frozenset({int(cpu)}), ops=Crash(), journal=Journal(Path(journal)))
    else:
        (journal,) = rest
        undo(Journal(Path(journal)), int(pid), ops=Crash())


if __name__ == "__main__":
    main(sys.argv[1:])
