"""Command line: parses and dispatches to ``affmon.commands``.

Every failure the user can cause (a PID that does not exist, a root that is not a
tree, a bad XML file, an unknown option) ends as one line on stderr and exit status 2;
no traceback reaches the user.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import NoReturn

from affmon import __version__
from affmon.commands.argtypes import count, pid, seconds, speed
from affmon.commands.escaped_output import escaped_streams
from affmon.core.errors import AffmonError
from affmon.core.text import term_safe

EXIT_USAGE = 2

# subcommand -> (module, function) in affmon.commands, imported only when used
COMMANDS = {
    "topology": ("observe", "cmd_topology"),
    "snapshot": ("observe", "cmd_snapshot"),
    "record": ("observe", "cmd_record"),
    "diagnose": ("diagnose", "cmd_diagnose"),
    "plan": ("plan", "cmd_plan"),
    "pin": ("pinning", "cmd_pin"),
    "exec": ("plan", "cmd_exec"),
    "undo": ("pinning", "cmd_undo"),
    "tune": ("tune", "cmd_tune"),
    "export": ("export", "cmd_export"),
    "audit": ("audit", "cmd_audit"),
    "fleet": ("fleet", "cmd_fleet"),
    "tui": ("tui", "cmd_tui"),  # no subcommand: the monitor
}
# Commands whose output is not escaped: the monitor and the fleet view draw with escape
# sequences (fleet escapes its --once text itself), and a recording or the exporter's
# output is data (JSON lines, Prometheus text) written as is.
RAW_OUTPUT = frozenset({"tui", "record", "export", "fleet"})


def monitor_pid(text: str) -> int:
    """The monitor's ``--pid`` takes every PID after it, so ``affmon --pid 5 snapshot``
    reads ``snapshot`` as a PID: say where the option goes."""
    if text in COMMANDS and text != "tui":
        raise argparse.ArgumentTypeError(
            f"not a process id: {text!r} (--pid before a command is the monitor's; "
            f"put it after the command: affmon {text} --pid PID)"
        )
    return pid(text)


def record_pid(text: str) -> int:
    """``record``'s ``--pid`` takes every PID after it, so ``affmon record --pid 5 out.jsonl``
    reads the file as a PID: say where FILE goes."""
    try:
        return pid(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"not a process id: {text!r} (--pid takes every PID after it: put FILE first, "
            "affmon record FILE --pid PID ...)"
        ) from None


def add_pids(parser: argparse.ArgumentParser, what: str, parse: Callable[[str], int] = pid) -> None:
    """``--pid`` as the monitor takes it: several PIDs after one ``--pid`` (``--pid 4242
    4243``), or ``--pid`` repeated."""
    parser.add_argument("--pid", type=parse, nargs="+", action="extend", default=[], metavar="PID", help=what)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """argparse prints usage plus the error; we print one line, like every other error."""
        sys.stderr.write(f"affmon: {term_safe(message)} (see affmon --help)\n")
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="affmon",
        description="Where GPU training processes' threads run, against NUMA nodes, caches and GPU locality. "
        "Without a command: the monitor (a terminal UI), live or replaying a recording.",
    )
    parser.add_argument("--version", action="version", version=f"affmon {__version__}")
    # The monitor's options. Their dests differ from the subcommands' (which set their
    # own defaults into the same namespace).
    parser.add_argument(
        "--pid",
        dest="tui_pid",
        type=monitor_pid,
        nargs="+",
        action="extend",
        default=[],
        metavar="PID",
        help="watch these PIDs and their descendants (--pid 4242 4243, or --pid repeated); the first is selected. "
        "Without it: GPU users, training launchers and what runs under them, and python processes with a GPU or "
        "deep-learning runtime mapped; --pid watches any other process (a plain python script) too",
    )
    parser.add_argument(
        "--interval",
        dest="tui_interval",
        type=seconds,
        default=1.0,
        metavar="SECONDS",
        help="seconds between samples, more than 0 and at most 3600 (default 1; live only)",
    )
    parser.add_argument("--replay", metavar="FILE", help="replay a recording (affmon record; .gz too)")
    parser.add_argument(
        "--demo", action="store_true", help="replay a real run recorded on an H200 (a job starved by CPU hogs, fixed)"
    )
    parser.add_argument(
        "--speed", type=speed, default=1.0, metavar="X", help="replay at X times the recorded pace (default 1)"
    )
    parser.add_argument(
        "--readonly",
        action="store_true",
        help="no key changes a process: r, u and T show the command to run instead (AFFMON_READONLY=1: the default)",
    )
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    topo = sub.add_parser("topology", help="the machine's CPUs, cores, caches, NUMA nodes and GPUs")
    source = topo.add_mutually_exclusive_group()
    source.add_argument("--root", metavar="DIR", help="read a recorded tree that mimics / (sys/, proc/)")
    source.add_argument("--hwloc-xml", metavar="FILE", help="read hwloc XML v2 (lstopo --of xml)")
    topo.add_argument("--json", action="store_true", help="print JSON")

    snap = sub.add_parser("snapshot", help="two samples of the watched processes' threads, as rates")
    add_pids(snap, "watch these PIDs and their descendants (any process: a python script without a GPU runtime too)")
    snap.add_argument("--all", action="store_true", help="watch every process, not only training ones")
    snap.add_argument(
        "--interval", type=seconds, default=1.0, metavar="SECONDS", help="between the two samples (default 1)"
    )
    snap.add_argument("--root", metavar="DIR", help="read /proc and /sys under DIR")
    snap.add_argument("--no-threads", action="store_true", help="text output: processes only")
    snap.add_argument("--json", action="store_true", help="print JSON")

    rec = sub.add_parser("record", help="write samples as JSON lines, to share or replay a run")
    rec.add_argument("file", metavar="FILE", help="where to write ('-' for standard output)")
    rec.add_argument(
        "--duration",
        type=seconds,
        default=10.0,
        metavar="SECONDS",
        help="how long to record (default 10: samples at 0, 1, ..., 10 s), then stop",
    )
    rec.add_argument("--interval", type=seconds, default=1.0, metavar="SECONDS", help="between samples (default 1)")
    add_pids(rec, "watch these PIDs and their descendants (after FILE)", record_pid)
    rec.add_argument("--all", action="store_true", help="watch every process (and record every command line)")
    rec.add_argument("--force", action="store_true", help="overwrite FILE if it exists")

    diag = sub.add_parser("diagnose", help="what is wrong with the training jobs' CPU placement")
    add_pids(diag, "diagnose these PIDs and their descendants (any process: a python script without a GPU runtime too)")
    diag.add_argument("--interval", type=seconds, default=1.0, metavar="SECONDS", help="between samples (default 1)")
    diag.add_argument("--samples", type=count(3, 1000), default=3, help="samples to take (default 3)")
    diag.add_argument("--json", action="store_true", help="print JSON")

    plan = sub.add_parser("plan", help="one core set per GPU rank, to launch jobs well")
    source = plan.add_mutually_exclusive_group()
    source.add_argument("--root", metavar="DIR", help="plan for a recorded tree that mimics /")
    source.add_argument("--hwloc-xml", metavar="FILE", help="plan for the machine this hwloc XML describes")
    plan.add_argument(
        "--gpus",
        metavar="LIST",
        help="plan for these GPUs only: indexes (NVML's; PCI bus order for --root/--hwloc-xml) or PCI bus ids "
        "(default: CUDA_VISIBLE_DEVICES, else the GPUs NVML can open, else all)",
    )
    plan.add_argument(
        "--ranks-per-gpu", type=count(1, 64), default=1, metavar="N", help="training processes per GPU (default 1)"
    )
    plan.add_argument("--json", action="store_true", help="print JSON")

    pin = sub.add_parser("pin", help="set the CPU mask of every thread of a process (journaled, undoable)")
    pin.add_argument("pid", type=pid, metavar="PID")
    what = pin.add_mutually_exclusive_group(required=True)
    what.add_argument("--cpus", metavar="LIST", help="CPUs to pin to, e.g. 0-7,16-23")
    what.add_argument("--suggest", action="store_true", help="pin to affmon's suggested core set")
    pin.add_argument("--with-children", action="store_true", help="also pin its descendants (DataLoader workers)")
    pin.add_argument(
        "--isolate", action="store_true", help="also move your other busy processes off those CPUs (root: not PID 1)"
    )
    pin.add_argument(
        "--isolate-all",
        action="store_true",
        help="with --isolate: also move other users' processes and deliberately pinned ones",
    )
    pin.add_argument(
        "--migrate-memory",
        action="store_true",
        help="then move the process's pages to the NUMA node of those CPUs (migrate_pages(2); journaled)",
    )
    pin.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
    pin.add_argument(
        "--force", action="store_true", help="a job another affmon is tuning: end that tune first (default: refuse)"
    )
    pin.add_argument(
        "--include-others",
        action="store_true",
        help="with --with-children, also pin descendants of another user or session (default: refuse)",
    )
    pin.add_argument(
        "--skip-refused",
        action="store_true",
        help="with --with-children, leave a descendant the kernel refuses to change (a setuid program) as it is"
        " and pin the others (default: the pin fails and changes nothing)",
    )
    pin.add_argument(
        "--interval", type=seconds, default=1.0, metavar="SECONDS", help="sampling for --suggest (default 1)"
    )
    pin.add_argument("--json", action="store_true", help="print JSON")

    ex = sub.add_parser("exec", help="pin to the plan for a GPU, then run CMD (threads inherit the mask)")
    which = ex.add_mutually_exclusive_group(required=True)
    which.add_argument("--gpu", type=count(0, 1023), metavar="N", help="plan for GPU N (NVML/PCI order)")
    which.add_argument("--from-env", action="store_true", help="GPU from LOCAL_RANK and CUDA_VISIBLE_DEVICES")
    ex.add_argument(
        "--ranks-per-gpu", type=count(1, 64), default=1, metavar="N", help="training processes per GPU (default 1)"
    )
    ex.add_argument("--root", metavar="DIR", help="plan against a recorded tree instead of this machine's /sys")
    ex.add_argument("--dry-run", action="store_true", help="print the plan's warnings, the mask and the command")
    ex.add_argument(
        "--strict", action="store_true", help="exit 2 when no plan can be made (default: warn, run CMD unpinned)"
    )
    ex.add_argument(
        "--workers",
        type=count(0, 1024),
        default=0,
        metavar="N",
        help="the DataLoader workers CMD starts: its intra-op pools get the rank's CPUs less N (OMP_NUM_THREADS; "
        "default 0)",
    )
    ex.add_argument(
        "--no-thread-budget", action="store_true", help="leave OMP_NUM_THREADS and MKL_NUM_THREADS as they are"
    )
    ex.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ...")

    aud = sub.add_parser("audit", help="is every rank of a running multi-rank job on its plan? (exit 1: one is not)")
    add_pids(aud, "audit the ranks under these PIDs (launchers)")
    aud.add_argument("--replay", dest="audit_replay", metavar="FILE", help="audit the last sample of a recording")
    aud.add_argument(
        "--ranks-per-gpu", type=count(1, 64), default=None, metavar="N", help="default: the most ranks found on one GPU"
    )
    aud.add_argument("--strict", action="store_true", help="exit 1 unless every mask is exactly its plan")
    aud.add_argument("--json", action="store_true", help="print JSON")

    undo = sub.add_parser("undo", help="restore the masks affmon changed (no PID: your newest pin)")
    target = undo.add_mutually_exclusive_group()
    target.add_argument("pid", type=pid, nargs="?", metavar="PID", help="the last pin of PID (default: the newest pin)")
    target.add_argument("--all", action="store_true", help="every pin affmon made, newest first")
    undo.add_argument("--json", action="store_true", help="print JSON")

    tune = sub.add_parser(
        "tune", help="try the planner's candidate placements on a running job, keep the one it runs best on"
    )
    tune.add_argument("pid", type=pid, metavar="PID")
    tune.add_argument("--settle", type=seconds, default=3.0, metavar="SECONDS", help="before each window (default 3)")
    tune.add_argument("--window", type=seconds, default=8.0, metavar="SECONDS", help="measured (default 8)")
    tune.add_argument(
        "--max-candidates", type=count(1, 32), default=6, metavar="N", help="placements to try (default 6)"
    )
    tune.add_argument(
        "--interval", type=seconds, default=1.0, metavar="SECONDS", help="sampling that sizes the job (default 1)"
    )
    tune.add_argument("--with-children", action=argparse.BooleanOptionalAction, default=True, help="pin its workers")
    isolation = tune.add_mutually_exclusive_group()
    isolation.add_argument("--no-isolate", action="store_true", help="never move other processes off its CPUs")
    isolation.add_argument(
        "--isolate-all", action="store_true", help="also move other users' processes and deliberately pinned ones"
    )
    tune.add_argument("--dry-run", action="store_true", help="list the candidates, change nothing")
    tune.add_argument("--json", action="store_true", help="print JSON")
    from affmon.commands.export import add_export_parser
    from affmon.commands.fleet import add_fleet_parser

    add_export_parser(sub)
    add_fleet_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, run the command, and end every ``AffmonError`` as one escaped line. A text
    command's output is escaped as a backstop (``escaped_output``): a name a renderer
    missed still cannot send an escape sequence to the terminal."""
    with escaped_streams():  # a usage error quotes what was typed
        args = build_parser().parse_args(argv)
    name = args.command or "tui"
    module, function = COMMANDS[name]
    try:
        with nullcontext() if name in RAW_OUTPUT else escaped_streams():
            path = module if module.startswith("affmon.") else f"affmon.commands.{module}"
            command = getattr(importlib.import_module(path), function)
            status: int = command(args)
            return status
    except AffmonError as exc:
        sys.stderr.write(f"affmon: {term_safe(str(exc))}\n")  # a file or process name in it stays on this line
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (affmon ... | head): exit quietly, as ps does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
