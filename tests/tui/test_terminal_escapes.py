"""Names and command lines are other users' text: whatever they hold, what affmon writes to
a terminal shows every control character (C0, DEL, C1), line separator and bidi control as
``?`` (as ``ps`` does), and a "\\n" in a name cannot forge a line. JSON keeps the raw name.

The renderers are fed real recordings whose process, thread, user, command-line and GPU
names are replaced by hostile text (hypothesis); the command line is run on a live process
that renamed itself and its thread to escape sequences.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from affmon.actions.pin import PinResult
from affmon.actions.threads import ThreadResult
from affmon.actions.undo import UndoResult
from affmon.commands.diagnose import diagnose_run, findings_text
from affmon.commands.report import snapshot_text, topology_text
from affmon.core.model.rates import Snapshot, make_snapshot
from affmon.core.model.samples import Sample
from affmon.core.model.topology import Topology
from affmon.core.plan.advice import propose_pin
from affmon.core.plan.planner import plan_machine
from affmon.core.rules.base import Finding
from affmon.core.text import term_safe, term_safe_output
from affmon.sources.stream import SourceInfo
from affmon.tui.model.header_line import header_segments
from affmon.tui.model.monitor import Monitor
from affmon.tui.model.table import TableOptions, table_rows
from affmon.tui.model.views import View, thread_rows
from affmon.tui.palette import Palette
from affmon.tui.screens import pin_result_text, proposal_text, undo_result_text
from affmon.tui.widgets.cores import core_map_text
from affmon.tui.widgets.detail import ThreadTable, detail_text
from affmon.tui.widgets.gpus import gpu_line
from affmon.tui.widgets.processes import process_cells, thread_cells
from tests.helpers.live import usable_cpus, workload
from tests.helpers.recordings import load
from tests.tui.helpers import is_active

HWLOC_XML = Path(__file__).parent.parent / "fixtures" / "hwloc_xml"
PALETTE = Palette("red", "yellow", "green", "cyan", "grey", "dim", "white", ("blue",))
SOME = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TITLE = "\x1b]0;PWNED\x07"  # sets the terminal's title
WIPE = "\x1b[2J\x1b[H"  # clears the screen
HOSTILE = [
    TITLE,
    WIPE,
    "\n",
    "\r",
    "\t",
    "\x00",
    "\x08",
    "\x7f",
    "\x85",  # C1 next line
    "\x9b2J",  # C1 CSI
    "\u2028",
    "\u2029",
    "\u202e",
    "\u2066",
    "\u061c",
    "\u200f",
    "\ud800",  # a lone surrogate: JSON may hold one
    "[bold red]",
    "[/]",
]


def active(text: str, layout: str = "") -> list[str]:
    """The code points a terminal would act on, other than the layout's own ``layout``."""
    return [c for c in text if c not in layout and is_active(c)]


names = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(st.one_of(st.sampled_from("".join(HOSTILE)), st.characters()), min_size=1, max_size=20),
)
name_lists = st.lists(names, min_size=1, max_size=5)


# -- term_safe itself -------------------------------------------------------------------


@given(st.text(st.one_of(st.sampled_from("".join(HOSTILE)), st.characters(codec=None))))
def test_term_safe_turns_each_active_code_point_into_a_question_mark_and_keeps_the_rest(text):
    safe = term_safe(text)
    assert len(safe) == len(text)
    for before, after in zip(text, safe, strict=True):
        assert after == ("?" if is_active(before) else before)
    assert term_safe(safe) == safe


@given(st.text(st.one_of(st.sampled_from("".join(HOSTILE)), st.characters(codec=None))))
def test_term_safe_output_keeps_only_newlines_and_tabs(text):
    safe = term_safe_output(text)
    assert len(safe) == len(text)
    for before, after in zip(text, safe, strict=True):
        assert after == ("?" if is_active(before) and before not in "\n\t" else before)


def test_term_safe_and_term_safe_output_judge_every_code_point():
    every = "".join(map(chr, range(0x110000)))
    expected = "".join("?" if is_active(c) else c for c in every)
    assert term_safe(every) == expected
    layout = {ord("\n"): "\n", ord("\t"): "\t"}
    assert term_safe_output(every) == "".join(layout.get(i, c) for i, c in enumerate(expected))


def test_term_safe_shows_escapes_as_ps_does():
    assert term_safe(TITLE) == "?]0;PWNED?"
    assert term_safe("line\nforged\u202e") == "line?forged?"
    assert term_safe("pt_data_worker") == "pt_data_worker"
    assert term_safe("données ✓ 学习") == "données ✓ 学习"


# -- recordings with hostile names --------------------------------------------------------


def renamed(sample: Sample, pool: list[str]) -> Sample:
    """Every process, thread, user, command line, thread state and GPU name from ``pool``."""
    cycle = itertools.cycle(pool)
    processes = []
    for p in sample.processes:
        threads = tuple(dataclasses.replace(t, name=next(cycle), state=next(cycle)[:1]) for t in p.threads)
        cmdline = None if p.cmdline is None else f"{next(cycle)} --flag {next(cycle)}"
        processes.append(dataclasses.replace(p, name=next(cycle), user=next(cycle), cmdline=cmdline, threads=threads))
    gpus = tuple(dataclasses.replace(g, name=next(cycle)) for g in sample.gpus)
    return dataclasses.replace(sample, processes=tuple(processes), gpus=gpus)


def hostile_samples(recording: str, pool: list[str]) -> tuple[Topology, list[Sample]]:
    header, samples = load(recording)
    return header.topology, [renamed(s, pool) for s in samples[-3:]]


def diagnosed(recording: str, pool: list[str]) -> tuple[list[Finding], Snapshot, int]:
    """``affmon diagnose`` over the recording's last three samples, renamed from ``pool``."""
    topology, samples = hostile_samples(recording, pool)
    findings, last, _ = diagnose_run(samples, topology, {})
    return findings, last, len(samples) - 1


def snapshots(recording: str, pool: list[str]) -> list[Snapshot]:
    header, samples = load(recording)
    hostile = [renamed(s, pool) for s in samples[-3:]]
    return [make_snapshot(a, b, header.topology) for a, b in itertools.pairwise(hostile)]


def views(recording: str, pool: list[str]) -> list[View]:
    header, samples = load(recording)
    info = SourceInfo(pool[0], pool[-1], 1.0, pool[0], len(samples))
    monitor = Monitor(header.topology, info)
    out = []
    for s in samples[-3:]:
        view = monitor.feed(renamed(s, pool))
        if view is not None:
            out.append(view)
    return out


BENIGN = ["name"]


@pytest.mark.parametrize("recording", ["hogs", "overlap"])
@SOME
@given(pool=name_lists)
def test_snapshot_text_escapes_every_name_and_keeps_its_lines(recording, pool):
    snap = snapshots(recording, pool)[-1]
    text = snapshot_text(snap, nvml_status=pool[0])
    assert active(text, layout="\n") == []
    benign = snapshot_text(snapshots(recording, BENIGN)[-1], nvml_status="NVML: ok")
    assert text.count("\n") == benign.count("\n")
    assert len(text.splitlines()) == len(benign.splitlines())


@SOME
@given(pool=name_lists)
def test_topology_text_escapes_gpu_bus_ids_and_vendors(pool):
    topology = load("ddp2_overlap")[0].topology
    gpus = tuple(
        dataclasses.replace(g, pci_bus_id=pool[i % len(pool)], vendor=pool[-1]) for i, g in enumerate(topology.gpus)
    )
    text = topology_text(dataclasses.replace(topology, gpus=gpus))
    assert active(text, layout="\n") == []
    assert text.count("\n") == topology_text(topology).count("\n")


@pytest.mark.parametrize("recording", ["hogs", "overlap"])
@SOME
@given(pool=name_lists)
def test_findings_messages_and_diagnose_text_escape_the_names_they_quote(recording, pool):
    findings, last, intervals = diagnosed(recording, pool)
    assert {f.code for f in findings} >= {"CONTENDED"}  # the rule that names other processes
    for f in findings:
        assert active(f.message) == [], f.message
        for key in ("reasons", "warnings"):
            for line in (f.suggestion or {}).get(key, []):
                assert active(line) == [], line
    text = findings_text(findings, last, intervals)
    assert active(text, layout="\n") == []
    benign = findings_text(*diagnosed(recording, BENIGN))
    assert text.count("\n") == benign.count("\n")


def test_findings_json_keeps_the_raw_names():
    findings, _last, _intervals = diagnosed("hogs", [TITLE])
    contended = next(f for f in findings if f.code == "CONTENDED")
    others = json.loads(json.dumps(contended.to_json()))["evidence"]["others"]
    assert others and all(o["name"] == TITLE for o in others)
    assert TITLE not in contended.message and "?]0;PWNED?" in contended.message


@SOME
@given(pool=name_lists)
def test_plan_reasons_escape_gpu_bus_ids(pool):
    topology = load("ddp2_overlap")[0].topology
    gpus = tuple(dataclasses.replace(g, pci_bus_id=f"{pool[i % len(pool)]}{i}") for i, g in enumerate(topology.gpus))
    plan = plan_machine(dataclasses.replace(topology, gpus=gpus))
    for line in [*plan.warnings, *plan.notes, *(r for p in plan.plans for r in p.reasons)]:
        assert active(line) == [], line


def text_of_view(view: View) -> list[str]:
    """Every text the monitor's panes show for one view, as plain strings."""
    out: list[str] = []
    rows = table_rows(view, TableOptions(training_only=False, show_threads=True))
    colors = {pid: "blue" for pid in view.jobs}
    for row in rows:
        cells = process_cells(row, PALETTE, colors) if row.process else thread_cells(row, PALETTE)
        out += [c.plain for c in cells]
    for p in view.processes:
        out.append(detail_text(p, view.findings_of(p.pid), PALETTE).plain)
        out += [c.plain for t in thread_rows(view.snapshot, p.pid) for c in ThreadTable._cells_of(t, PALETTE)]
    out += [gpu_line(g, PALETTE).plain for g in view.gpus]
    out += [text for _, text, _ in header_segments(view.header, paused=False, clock_text="12:00:00")]
    out.append(core_map_text(view.cores, PALETTE, colors, view.processes[0], 80).plain)
    out += [f.message for f in view.findings]
    return out


@pytest.mark.parametrize("recording", ["hogs", "overlap"])
@SOME
@given(pool=name_lists)
def test_every_pane_of_the_monitor_escapes_every_name(recording, pool):
    view = views(recording, pool)[-1]
    for p in view.processes:
        for text in (p.name, p.cmdline or "", p.user or ""):
            assert active(text) == [], text
    for t in (t for p in view.processes for t in thread_rows(view.snapshot, p.pid)):
        assert active(t.name) == [] and active(t.state) == []
    for g in view.gpus:
        assert active(g.name or "") == []
    for text in text_of_view(view):
        assert active(text, layout="\n") == [], text
    # A detail pane has as many lines as with plain names: none forged by a "\n" in one.
    benign = views(recording, BENIGN)[-1]
    for p in view.processes[:20]:
        lines = detail_text(p, view.findings_of(p.pid), PALETTE).plain.count("\n")
        b = benign.process(p.pid)
        assert b is not None
        assert lines == detail_text(b, benign.findings_of(p.pid), PALETTE).plain.count("\n")


@pytest.mark.parametrize("recording", ["hogs", "overlap"])
@SOME
@given(pool=name_lists, isolate=st.booleans(), with_children=st.booleans())
def test_the_pin_dialog_escapes_the_processes_it_names(recording, pool, isolate, with_children):
    view = views(recording, pool)[-1]
    proposal = propose_pin(view.snapshot, view.jobs[0])
    assert proposal is not None
    text = proposal_text(proposal, isolate=isolate, with_children=with_children, p=PALETTE).plain
    assert active(text, layout="\n") == []
    benign = propose_pin(views(recording, BENIGN)[-1].snapshot, view.jobs[0])
    assert benign is not None
    assert text.count("\n") == proposal_text(
        benign, isolate=isolate, with_children=with_children, p=PALETTE
    ).plain.count("\n")


def result_texts(message: str, error: str) -> list[str]:
    threads = (ThreadResult(7, 8, frozenset({0}), None, "failed", message),)
    return [
        pin_result_text(PinResult(False, frozenset({0}), threads, error, True, None, warning=message), PALETTE).plain,
        pin_result_text(PinResult(True, frozenset({0}), threads, None, False, "id", warning=message), PALETTE).plain,
        undo_result_text(UndoResult(False, (), threads, error), PALETTE).plain,
        undo_result_text(UndoResult(True, ("id",), threads, None), PALETTE).plain,
    ]


@SOME
@given(message=names, error=names)
def test_pin_and_undo_results_in_the_tui_escape_messages(message, error):
    for text, benign in zip(result_texts(message, error), result_texts("m", "e"), strict=True):
        assert active(text, layout="\n") == []
        assert text.count("\n") == benign.count("\n")


# -- the command line -------------------------------------------------------------------


def affmon(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "affmon", *args], capture_output=True, timeout=timeout)


def raw_active(data: bytes, layout: str = "\n") -> list[str]:
    """Active code points in a command's raw output (undecodable bytes count as active)."""
    text = data.decode("utf-8", "surrogateescape")
    return active(text, layout)


def test_an_error_naming_a_hostile_file_is_one_escaped_line(tmp_path):
    missing = tmp_path / f"{TITLE}\nforged line\u202e.xml"
    out = affmon("topology", "--hwloc-xml", str(missing))
    assert out.returncode == 2
    assert out.stdout == b""
    assert out.stderr.startswith(b"affmon: ") and out.stderr.count(b"\n") == 1 and out.stderr.endswith(b"\n")
    assert raw_active(out.stderr) == []
    assert b"?]0;PWNED?" in out.stderr and b"\x1b" not in out.stderr


def test_a_crafted_hwloc_xml_bus_id_reaches_topology_and_plan_escaped(tmp_path):
    # XML 1.0 forbids C0 controls even as character references, but allows C1 ones and
    # the bidi overrides: a hwloc file can carry them into a GPU's bus id.
    source = (HWLOC_XML / "hwloc-xml__nvidiaDGX2.xml").read_text(encoding="utf-8")
    crafted = source.replace('pci_busid="', 'pci_busid="&#x9b;2J&#x202e;')
    path = tmp_path / "crafted.xml"
    path.write_text(crafted, encoding="utf-8")
    data = json.loads(affmon("topology", "--hwloc-xml", str(path), "--json").stdout)
    assert data["gpus"] and all(g["pci_bus_id"].startswith("\x9b2j\u202e") for g in data["gpus"])  # JSON: raw
    for args in (("topology",), ("plan",)):
        out = affmon(*args, "--hwloc-xml", str(path))
        assert out.returncode == 0, out.stderr
        assert raw_active(out.stdout) == [] and raw_active(out.stderr) == []
        assert b"?2j?" in out.stdout


def crafted_thread(message: str) -> ThreadResult:
    return ThreadResult(os.getpid(), os.getpid(), frozenset({0}), None, "failed", message)


@SOME
@given(message=names)
def test_pin_and_undo_on_the_command_line_write_no_control_characters(message):
    from affmon import cli
    from affmon.commands import pinning

    journal = Path(tempfile.gettempdir()) / f"affmon-escapes-{os.getpid()}.journal"
    journal.touch()
    saved = (pinning.default_journal_path, pinning.undo, pinning.pin, sys.stdout, sys.stderr)
    failed = UndoResult(False, (), (crafted_thread(message),), message)
    pinned = PinResult(False, frozenset({0}), (crafted_thread(message),), message, True, None, warning=message)
    out, err = io.StringIO(), io.StringIO()
    try:
        pinning.default_journal_path = lambda: journal  # type: ignore[assignment]
        pinning.undo = lambda *a, **k: failed  # type: ignore[assignment]
        pinning.pin = lambda *a, **k: pinned  # type: ignore[assignment]
        sys.stdout, sys.stderr = out, err
        assert cli.main(["undo", "--all"]) == 1
        assert cli.main(["pin", str(os.getpid()), "--cpus", str(usable_cpus()[0]), "--dry-run"]) == 1
    finally:
        pinning.default_journal_path, pinning.undo, pinning.pin, sys.stdout, sys.stderr = saved
        journal.unlink()
    assert active(out.getvalue(), layout="\n\t") == [] and active(err.getvalue(), layout="\n\t") == []
    assert err.getvalue().startswith("affmon: ")


# -- a live process that named itself with escape sequences ------------------------------

HOSTILE_CHILD = r"""
import hashlib, os, sys, threading, time
cpu = int(sys.argv[1])
os.sched_setaffinity(0, {cpu})
named = threading.Event()
def spin():
    with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
        f.write("\x1b[2J")
    named.set()
    data = b"x" * (1 << 20)
    while True:
        hashlib.sha256(data).digest()
threading.Thread(target=spin, daemon=True).start()
named.wait()
with open("/proc/self/comm", "w") as f:
    f.write("\x1b]0;PWNED\x07")
print(os.getpid(), flush=True)
time.sleep(120)
"""
ARGV0 = "\x1b]2;ARGV\x07\u202eevil\nforged"


@contextmanager
def hostile_process(cpu: int) -> Iterator[int]:
    """A process whose argv[0], name and busy thread's name are escape sequences."""
    proc = subprocess.Popen(
        [ARGV0, "-c", HOSTILE_CHILD, str(cpu), "\x1b[31mred"],
        executable=sys.executable,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else b""
        assert line, f"the hostile process did not start (exit {proc.wait()})"
        yield int(line)
    finally:
        proc.kill()
        proc.wait()


def test_snapshot_of_a_process_named_with_escapes_prints_none_of_them():
    with hostile_process(usable_cpus()[0]) as pid:
        with open(f"/proc/{pid}/comm", "rb") as f:
            assert f.read() == TITLE.encode() + b"\n"  # the kernel really holds the escape
        text = affmon("snapshot", "--pid", str(pid), "--interval", "0.3")
        raw = affmon("snapshot", "--pid", str(pid), "--interval", "0.3", "--json")
    assert text.returncode == 0, text.stderr
    assert b"\x1b" not in text.stdout and b"\x07" not in text.stdout
    assert raw_active(text.stdout) == [] and raw_active(text.stderr) == []
    assert b"?]2;ARGV??evil?forged -c" in text.stdout  # the process row: its command line
    assert b"?]0;PWNED?" in text.stdout and b"?[2J" in text.stdout  # its threads' rows
    forged = [line for line in text.stdout.split(b"\n") if b"forged" in line and str(pid).encode() not in line]
    assert forged == []  # argv's "\n" made no line of its own: "forged" stays in the process's row
    data = json.loads(raw.stdout)
    process = next(p for p in data["processes"] if p["pid"] == pid)
    assert process["name"] == TITLE
    assert process["cmdline"].startswith(ARGV0)
    assert "\x1b[2J" in {t["name"] for t in process["threads"]}


def test_diagnose_naming_a_hostile_contender_prints_no_escape():
    cpu = usable_cpus()[0]
    with hostile_process(cpu) as hog, workload("--cpus", str(cpu), "--busy", "1") as job:
        time.sleep(0.2)
        args = ("diagnose", "--pid", str(job["pid"]), "--interval", "0.7", "--samples", "4")
        text = affmon(*args)
        raw = affmon(*args, "--json")
    assert text.returncode in (0, 1), text.stderr
    assert b"\x1b" not in text.stdout + text.stderr and b"\x07" not in text.stdout + text.stderr
    assert raw_active(text.stdout) == [] and raw_active(text.stderr) == []
    findings = json.loads(raw.stdout)["findings"]
    contended = [f for f in findings if f["code"] == "CONTENDED"]
    assert contended, findings  # two busy threads on one CPU: the job waits, the hog is named
    others = [o for f in contended for o in f["evidence"]["others"]]
    assert {o["name"] for o in others if o["pid"] == hog} == {TITLE}  # JSON: the raw name
    if hog in [o["pid"] for o in others[:5]]:  # the message names the five busiest others
        assert f"{hog} (?]0;PWNED?)".encode() in text.stdout
