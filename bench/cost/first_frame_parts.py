"""Where the monitor's first frame goes, for one checkout: a breakdown, not a comparison
with a peer (``bench.cost.tui_cost --first-frames`` times it against htop's).

* launch to the first frame: ``python -m affmon --readonly`` on a pseudo-terminal of 140x40,
  from its launch until the frame's bytes (the header's ``CPUs``) arrive, read every 2 ms;
  the median of ``--launches``; beside it the interpreter alone (``python -c pass``), the
  floor under any Python program;
* the same launch with the first frame's drawing wrapped: the CPU time the process had
  spent when the frame was drawn, how much of it went to Python building dataclasses as
  their modules were imported (``dataclasses._process_class`` timed: it compiles each
  class's generated methods one by one), and which of affmon's modules were loaded by then
  (``--modules`` lists them: for a look at what the first frame need not load).

Run it from the checkout to measure (its ``affmon`` is imported from the working directory),
beside another checkout's run to compare two trees; alternate them, the machine drifts::

    python -m bench.cost.first_frame_parts [--launches 16] [--modules]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import select
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from typing import Any

TIMEOUT_S = 20.0

# The monitor, its first frame's drawing wrapped: what the process spent by then, on what.
SPY = """
import dataclasses, json, os, sys, time
build, spent, made = dataclasses._process_class, [0.0], [0]
def timed(*args, **kwargs):
    start = time.perf_counter()
    try:
        return build(*args, **kwargs)
    finally:
        spent[0] += time.perf_counter() - start
        made[0] += 1
dataclasses._process_class = timed
import affmon.tui.first_frame as first_frame
drawn = first_frame.draw_first_frame
def spy(*args, **kwargs):
    view = drawn(*args, **kwargs)
    with open(sys.argv[1], "w") as out:
        json.dump({"drew": view is not None, "cpu": time.process_time(), "dataclasses": spent[0],
                   "made": made[0], "modules": sorted(sys.modules)}, out)
    os._exit(0)
first_frame.draw_first_frame = spy
from affmon.cli import main
main(["--readonly", "--interval", "1"])
"""


def on_terminal(argv: list[str], until: bytes | None, timeout_s: float = TIMEOUT_S) -> tuple[float, bytes]:
    """Seconds from the launch of ``argv`` on a new pseudo-terminal of 140x40 until ``until``
    shows in what it writes (None: until it ends), and what it wrote by then."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    start = time.monotonic()
    pid, fd = pty.fork()
    if pid == 0:  # the child: the pty is its terminal
        os.execve(sys.executable, [sys.executable, *argv], env)
    try:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 140, 0, 0))
        seen = b""
        while until is None or until not in seen:
            if time.monotonic() - start > timeout_s:
                raise SystemExit(f"no first frame within {timeout_s:.0f} s")
            ready, _, _ = select.select([fd], [], [], 0.002)
            if ready:
                try:
                    seen += os.read(fd, 65536)
                except OSError:  # it ended
                    break
        return time.monotonic() - start, seen
    finally:
        if until is not None:
            os.kill(pid, 9)
        os.close(fd)
        os.waitpid(pid, 0)


def interpreter() -> float:
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.monotonic() - start


def spied(path: str, timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """The monitor run until its first frame is drawn (``SPY``, writing to ``path``): whether
    it drew one, its CPU time by then, the dataclasses built and every module loaded."""
    _, wrote = on_terminal(["-c", SPY, path], None, timeout_s)
    try:
        with open(path) as f:
            parts: dict[str, Any] = json.load(f)
    except (OSError, ValueError):
        tail = wrote.decode("utf-8", "replace")[-2000:]
        raise SystemExit(f"the monitor drew no first frame; it wrote:\n{tail}") from None
    os.unlink(path)
    return parts


def ms(values: list[float]) -> str:
    return f"{1e3 * statistics.median(values):6.1f} ms (range {1e3 * min(values):.1f}-{1e3 * max(values):.1f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--launches", type=int, default=16, help="launches of each kind (median)")
    ap.add_argument("--modules", action="store_true", help="list the affmon modules the first frame loaded")
    args = ap.parse_args()
    import compileall

    compileall.compile_dir("affmon", quiet=1)  # as pip install does: not the compiler's cost
    frames, floors, cpus, built = [], [], [], []
    parts: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.launches):  # one of each in turn
            frames.append(on_terminal(["-m", "affmon", "--readonly", "--interval", "1"], b"CPUs")[0])
            floors.append(interpreter())
            parts = spied(os.path.join(tmp, "parts.json"))
            cpus.append(parts["cpu"])
            built.append(parts["dataclasses"])
    print(f"launch to the first frame        {ms(frames)}")
    print(f"  the interpreter alone          {ms(floors)}")
    print(f"  CPU spent by the first frame   {ms(cpus)}")
    print(f"    of which dataclasses built   {ms(built)} ({parts['made']} classes)")
    ours = [m for m in parts["modules"] if m == "affmon" or m.startswith("affmon.")]
    print(f"  affmon modules loaded          {len(ours)}")
    if args.modules:
        print("\n".join(f"    {m}" for m in ours))


if __name__ == "__main__":
    main()
