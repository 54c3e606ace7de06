"""Start a process whose names try to take over the terminal, to look at affmon against it.

The process names itself ``"\\x1b]0;PWNED\\x07"`` (an xterm title change) through
``/proc/self/comm``, names one thread ``"\\x1b[2J\\x1b[H"`` (wipe the screen) and another
with a bidirectional override, carries a command line with escapes and a newline, burns a
little CPU so affmon watches it as busy, and prints its PID. Then, for example:

    python -m bench.attacks.hostile_names --seconds 120 &
    affmon snapshot --pid PID; affmon diagnose --pid PID; affmon --pid PID

Every one of them must show the names with ``?`` in place of the control characters (as
``ps`` does), the terminal's title must not change and no pane may be wiped; ``--json``
keeps the raw names.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

CHILD = r"""
import os, sys, threading, time
def name_thread(name):
    with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
        f.write(name)
def busy(name, seconds):
    name_thread(name)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(20000))
        time.sleep(0.01)
seconds = float(sys.argv[1])
with open("/proc/self/comm", "w") as f:
    f.write("\x1b]0;PWNED\x07")
threads = [
    threading.Thread(target=busy, args=("\x1b[2J\x1b[H", seconds)),
    threading.Thread(target=busy, args=("\u202eevil\u202c", seconds)),
]
for t in threads:
    t.start()
print(os.getpid(), flush=True)
for t in threads:
    t.join()
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the process lives")
    args = parser.parse_args()
    argv = [sys.executable, "-c", CHILD, str(args.seconds), "\x1b]0;ARGV-PWNED\x07", "line one\nline two"]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    pid = child.stdout.readline().strip()
    print(f"hostile process: PID {pid} (for {args.seconds:g} s)", flush=True)
    try:
        child.wait()
    except KeyboardInterrupt:
        child.kill()
        child.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
