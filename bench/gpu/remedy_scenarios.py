"""Problems whose cure is not (only) a core set, planted in a real training job on a GPU, each
with affmon's diagnosis, affmon's one-key fix and a hand fix measured in the same process.

Run on a GPU machine from the repository root (torch; affmon from this checkout)::

    python -m bench.gpu.remedy_scenarios [--out DIR] [--rounds 3] [--window 8] [--settle 6]
        [--scenarios threads,own_data,confined,stalled] [--device cuda]

One job (``bench/workloads/remedy_job.py``: ResNet-18, 6 DataLoader workers with one
intra-op thread each, torch augmentation on the CPU) per scenario; its knobs change while it
runs. Measured first clean, then ``--rounds`` times in turn: planted; affmon's fix
(``affmon diagnose`` names it, then ``affmon pin PID --suggest --with-children``, what ``r``
does, is run and the job measured as it left it); the hand fix.

* ``threads``: every worker runs 16 intra-op threads (about 100 busy threads on 16 CPUs).
  Hand fix: one thread per worker. Expected: OVERSUBSCRIBED with a thread budget; no pin.
* ``own_data``: ``num_workers=0``, the loop loads and augments its own batches. Hand fix: 6
  workers. Expected: INPUT_BOUND saying the loop loads its own data, with a worker count;
  no pin.
* ``confined``: the main loop thread and the pin-memory thread held to CPU 0, the workers
  wide. Hand fix: both threads back to the job's CPUs. Expected: CONFINED_THREAD naming
  them; affmon's pin gives them the job's CPUs back (>= 0.9x the hand fix).
* ``stalled``: the workers' storage hangs: each worker's next item opens a FIFO no one
  writes, and blocks there. Hand fix: the storage answers (a writer opens the FIFO, which is
  then removed). Expected: STALLED with where the workers sleep; no pin. (Forked workers
  with large OpenMP pools, which deadlocked once in torch 2.11 on an H200, did not deadlock
  in three tries there: they ran oversubscribed instead, and were named OVERSUBSCRIBED.)

Prints a table (samples/s clean / planted / affmon's fix / hand fix per round, what affmon
named) and writes it with every diagnosis and pin to ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from affmon.collect.loop import LoopSampler

ROOT = Path(__file__).resolve().parent.parent.parent
PY = sys.executable
RATE = re.compile(r"RATE t=([\d.]+) samples_per_s=([\d.]+)")

CLEAN = {"workers": 6, "worker_threads": 1, "main_threads": 16, "context": "spawn", "timeout": 20}
PLANTED: dict[str, dict[str, Any]] = {
    "threads": {**CLEAN, "worker_threads": 16},
    "own_data": {**CLEAN, "workers": 0},
    "confined": CLEAN,
    "stalled": CLEAN,
}
HAND: dict[str, dict[str, Any]] = {
    "threads": CLEAN,
    "own_data": CLEAN,
    "confined": CLEAN,
    "stalled": CLEAN,
}
EXPECTED = {"threads": "OVERSUBSCRIBED", "own_data": "INPUT_BOUND", "confined": "CONFINED_THREAD", "stalled": "STALLED"}
PLACEMENT_FIX = {"confined"}  # where affmon's own pin is the cure


@dataclass
class Job:
    proc: subprocess.Popen[str]
    log: Path
    control: Path
    pid: int = 0

    def rates(self) -> list[tuple[float, float]]:
        return [(float(t), float(r)) for t, r in RATE.findall(self.log.read_text())]

    def clock(self) -> float:
        found = self.rates()
        return found[-1][0] if found else 0.0

    def set(self, control: dict[str, Any]) -> None:
        tmp = self.control.with_suffix(".tmp")
        tmp.write_text(json.dumps(control))
        tmp.replace(self.control)


@dataclass
class Round:
    planted: float = 0.0
    affmon: float = 0.0
    hand: float = 0.0
    codes: list[str] = field(default_factory=list)
    named: bool = False
    remedy: str = ""
    pin: dict[str, Any] = field(default_factory=dict)
    changed: bool | None = None


@dataclass
class Row:
    scenario: str
    clean: float = 0.0
    rounds: list[Round] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def affmon(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "affmon", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def start(out: Path, name: str, control: dict[str, Any], device: str) -> Job:
    log = out / f"{name}.log"
    ctl = out / f"{name}.control.json"
    job = Job(
        subprocess.Popen(
            [PY, "-m", "bench.workloads.remedy_job", "--control", str(ctl), "--device", device],
            cwd=ROOT,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        ),
        log,
        ctl,
    )
    job.set(control)
    end = time.time() + 240
    while time.time() < end:
        m = re.search(r"READY pid=(\d+)", log.read_text())
        if m:
            job.pid = int(m.group(1))
            return job
        if job.proc.poll() is not None:
            raise RuntimeError(f"{name} exited: {log.read_text()[-2000:]}")
        time.sleep(0.5)
    raise RuntimeError(f"{name} never became ready")


def stop(job: Job) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(job.proc.pid, signal.SIGKILL)
    job.proc.wait()


def measure(job: Job, seconds: float) -> float:
    """The job's mean samples/s over the next ``seconds`` (its 2-s RATE windows)."""
    t0 = job.clock()
    time.sleep(seconds + 2.5)
    rates = [r for t, r in job.rates() if t0 + 1.0 < t <= t0 + seconds + 2.5]
    return sum(rates) / len(rates) if rates else 0.0


def settle_after_loader(job: Job, seconds: float, timeout: float = 60) -> None:
    """Wait for the job to rebuild its DataLoader (a ``LOADER`` line) and train again (two
    ``RATE`` lines after it), then ``seconds``. A stalled pipeline trains no more: then only
    the rebuild is waited for."""
    before = job.log.read_text().count("LOADER")
    end = time.time() + timeout
    while time.time() < end and job.log.read_text().count("LOADER") <= before:
        time.sleep(0.5)
    while time.time() < end:
        text = job.log.read_text()
        after = text[text.rfind("LOADER") :]
        if len(RATE.findall(after)) >= 2 or "STALL" in after:
            break
        time.sleep(0.5)
    time.sleep(seconds)


def threads_of(pid: int) -> list[int]:
    return [int(t) for t in os.listdir(f"/proc/{pid}/task")]


def feeder(pid: int) -> int | None:
    """The pin-memory thread: the thread of the rank that waits on a worker's pipe."""
    sampler = LoopSampler(pid)
    end = time.time() + 10
    while time.time() < end:
        sampler._find_feeders()
        if sampler.feeders:
            return min(sampler.feeders)
        time.sleep(0.2)
    return None


def diagnose(job: Job, out: Path, tag: str, text: bool) -> tuple[list[dict[str, Any]], str]:
    got = affmon("diagnose", "--json", "--pid", str(job.pid), "--samples", "5", "--interval", "1")
    (out / f"diagnose_{tag}.json").write_text(got.stdout + got.stderr)
    if text:  # what a person reads, once a scenario
        said = affmon("diagnose", "--pid", str(job.pid), "--samples", "3", "--interval", "1")
        (out / f"diagnose_{tag}.txt").write_text(said.stdout + said.stderr)
    try:
        found: list[dict[str, Any]] = json.loads(got.stdout)["findings"]
    except (ValueError, KeyError):
        return [], got.stderr
    return found, ""


def one_key_fix(job: Job, out: Path, tag: str) -> dict[str, Any]:
    got = affmon("pin", str(job.pid), "--suggest", "--with-children", "--json")
    (out / f"pin_{tag}.json").write_text(got.stdout + got.stderr)
    try:
        found: dict[str, Any] = json.loads(got.stdout)
    except ValueError:
        found = {"error": got.stderr.strip()}
    found["status"] = got.returncode
    return found


def storage(job: Job) -> Path:
    return job.control.with_suffix(".storage")


def plant(scenario: str, job: Job, cpus: set[int], state: dict[str, Any]) -> None:
    job.set(PLANTED[scenario])
    if scenario == "stalled":
        os.mkfifo(storage(job))
    if scenario == "confined":
        tids = [job.pid] + ([state["feeder"]] if state.get("feeder") else [])
        for tid in tids:
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(tid, {min(cpus)})


def hand_fix(scenario: str, job: Job, cpus: set[int], state: dict[str, Any]) -> None:
    job.set(HAND[scenario])
    if scenario == "stalled":  # the storage answers: a writer comes, and the FIFO goes
        try:
            fd = os.open(storage(job), os.O_WRONLY | os.O_NONBLOCK)  # the blocked readers count
        except OSError:  # ENXIO: no worker was waiting in it
            fd = None
        os.unlink(storage(job))
        if fd is not None:
            os.close(fd)
    if scenario == "confined":
        for tid in [job.pid] + ([state["feeder"]] if state.get("feeder") else []):
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(tid, cpus)


def run(scenario: str, out: Path, rounds: int, window: float, settle: float, device: str) -> Row:
    row = Row(scenario)
    cpus = set(os.sched_getaffinity(0))
    job = start(out, scenario, CLEAN, device)
    rebuilds = PLANTED[scenario] != HAND[scenario] or PLANTED[scenario] != CLEAN
    try:
        time.sleep(settle)
        row.clean = measure(job, window)
        state: dict[str, Any] = {"feeder": feeder(job.pid) if scenario == "confined" else None}
        if scenario == "confined":
            row.notes.append(f"main thread {job.pid}, pin-memory thread {state['feeder']}")
        for r in range(rounds):
            this = Round()
            plant(scenario, job, cpus, state)
            if rebuilds:
                settle_after_loader(job, settle)
            else:
                time.sleep(settle)
            if scenario == "stalled":
                time.sleep(4)  # the batches already made are used up: the loop waits
            findings, err = diagnose(job, out, f"{scenario}_{r}", text=r == 0)
            if err:
                row.notes.append(f"round {r}: diagnose failed: {err[:200]}")
            this.planted = measure(job, window)
            this.codes = sorted({f["code"] for f in findings if f["pid"] == job.pid})
            named = [f for f in findings if f["code"] == EXPECTED[scenario] and f["pid"] == job.pid]
            this.named = bool(named)
            if named:
                f = named[0]
                this.remedy = f.get("remedy") or json.dumps((f.get("evidence") or {}).get("advice")) or ""
            this.pin = one_key_fix(job, out, f"{scenario}_{r}")
            this.changed = this.pin.get("changed", bool(this.pin.get("threads")))
            time.sleep(settle if this.changed else 1)
            this.affmon = measure(job, window)
            if this.changed:
                affmon("undo", str(job.pid))  # back to the planted state before the hand fix
                time.sleep(1)
            hand_fix(scenario, job, cpus, state)
            if rebuilds:
                settle_after_loader(job, settle, timeout=90)
            else:
                time.sleep(settle)
            this.hand = measure(job, window)
            row.rounds.append(this)
            print(f"{scenario} round {r}: {this}", flush=True)
    finally:
        stop(job)
    return row


def passed(row: Row) -> bool:
    for r in row.rounds:
        if not r.named:
            return False
        if row.scenario in PLACEMENT_FIX:
            if not r.changed or r.affmon < 0.9 * r.hand:
                return False
        elif r.changed:
            return False
    return bool(row.rounds)


def table(rows: list[Row]) -> str:
    lines = [
        "| scenario | round | samples/s clean | planted | affmon's fix | hand fix | affmon / hand | affmon named "
        "| affmon's pin | pass |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ok = "yes" if passed(row) else "NO"
        for i, r in enumerate(row.rounds):
            pin = "pinned" if r.changed else "no pin: " + str(r.pin.get("no_change", r.pin.get("error", "")))[:60]
            ratio = f"{r.affmon / r.hand:.2f}" if r.hand else "-"
            lines.append(
                f"| {row.scenario} | {i + 1} | {row.clean:.0f} | {r.planted:.0f} | {r.affmon:.0f} | {r.hand:.0f} | "
                f"{ratio} | {', '.join(r.codes) or 'nothing'} | {pin} | {ok} |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/remedy_scenarios"))
    ap.add_argument("--scenarios", default=",".join(EXPECTED))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=float, default=8.0)
    ap.add_argument("--settle", type=float, default=6.0)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("XDG_STATE_HOME", str(out / "state"))  # this run's own journal
    rows = []
    t0 = time.time()
    for scenario in a.scenarios.split(","):
        rows.append(run(scenario, out, a.rounds, a.window, a.settle, a.device))
        print(table(rows[-1:]), flush=True)
    text = table(rows)
    print(text)
    for row in rows:
        for n in row.notes:
            print(f"note {row.scenario}: {n}")
        for i, r in enumerate(row.rounds):
            print(f"remedy {row.scenario} {i + 1}: {r.remedy}")
    print(f"ran {time.time() - t0:.0f} s")
    (out / "table.md").write_text(text + "\n")
    dump = {
        row.scenario: {"clean": row.clean, "rounds": [r.__dict__ for r in row.rounds], "notes": row.notes}
        for row in rows
    }
    (out / "results.json").write_text(json.dumps(dump, indent=2, default=str))
    sys.exit(0 if all(passed(r) for r in rows) else 1)


if __name__ == "__main__":
    main()
