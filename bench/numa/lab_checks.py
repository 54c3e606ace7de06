"""The NUMA lab's checks, run inside the guest (``bench/numa/vm.py``) as one process that
prints one JSON object: what affmon said and what the guest's kernel says, side by side,
for ``tests/whole/test_numa_lab.py`` to compare on the host::

    python -m bench.numa.vm --shape two-nodes -- python -m bench.numa.lab_checks placement tui

Parts run in the order given, in one boot (``tests/whole/test_numa_lab.py`` runs ``placement
tui`` on two nodes, ``topology ranks`` on four, ``memory-only`` on the third shape).
``topology`` (also run first by ``placement`` and ``memory-only``): ``affmon topology
--json``, ``lstopo-no-graphics --of xml`` and the node files of sysfs. ``ranks``, ``tui``
and ``bandwidth`` are described in ``bench/numa/lab_ranks.py``, ``lab_tui.py`` and
``lab_bandwidth.py``. ``placement`` (two nodes) adds four pretend jobs
(``bench/numa/lab_jobs.py``) and what affmon makes of them:

* ``remote``: threads on node 1 (CPUs 2-3), its memory bound to node 0 with ``mbind``; its
  GPU on node 1. Expected: REMOTE_MEMORY; then the finding's own command moves the pages.
* ``spread``: busy threads pinned to CPU 1 and CPU 3 (both nodes); its GPU on node 0.
  Expected: CROSS_NUMA.
* ``local``: threads and memory on node 0, its GPU on node 0. Expected: neither.
* ``wrong``: threads and memory (first touch) on node 1, its GPU on node 0 (a rank
  started on the wrong node). Expected: CROSS_NUMA; ``pin --suggest --migrate-memory``
  brings threads and pages to node 0; ``undo`` puts the threads back, the pages stay.
* migrations the kernel does not make in full (``failed_migrations``): a 200 MiB job
  pinned to node 1 with ``--migrate-memory`` once another job has filled node 1 but for
  120 MiB (the kernel moves part, then runs out of room), and a pin made from a cpuset
  (cgroup v2) that allows memory on node 0 only (the kernel moves nothing).

``memory-only`` (two nodes and a memory-only node) adds a job with threads on node 0 and
its memory bound to node 2, a pin of it to node 1 with ``--migrate-memory``, and the plan
for a GPU whose node is the memory-only one, local to CPUs 2-3.

affmon runs in this process (``affmon.cli.main``, the function the ``affmon`` command
calls): each interpreter start costs 1-3 s on the guest's emulated CPUs. GPU locality is
injected as ``bench/numa/lab_gpus.py`` says; everything else is the guest kernel's.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from affmon.actions.migrate import OsMemory
from affmon.cli import main as affmon_main
from bench.numa.lab_bandwidth import bandwidth_part
from bench.numa.lab_gpus import LabGpu, fake_nvml, gpus_per_node, mount_pci_gpus, unmount_pci
from bench.numa.lab_jobs import JobSpec, RunningJob, numa_maps_bytes, runtime_file, start_job, stop_jobs, thread_masks
from bench.numa.lab_ranks import ranks_part
from bench.numa.lab_tui import tui_part

MIB = 1 << 20
NODE_DIR = Path("/sys/devices/system/node")


def affmon(*argv: str) -> dict[str, Any]:
    """``affmon ARGV`` in this process: exit status, output (parsed when JSON), seconds."""
    out, err = io.StringIO(), io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status: int | str | None = affmon_main(list(argv))
        except SystemExit as exc:
            status = exc.code
    text = out.getvalue()
    parsed: Any = None
    if "--json" in argv:
        with contextlib.suppress(ValueError):
            parsed = json.loads(text)
    return {
        "argv": list(argv),
        "rc": status if isinstance(status, int) else 2,
        "stdout": text if parsed is None else None,
        "json": parsed,
        "stderr": err.getvalue(),
        "seconds": round(time.monotonic() - started, 2),
    }


def node_facts() -> dict[str, Any]:
    """What sysfs says of each node (CPUs, memory, distances), of which nodes have CPUs and
    memory, and whether the kernel balances pages between nodes on its own."""
    nodes = {}
    for path in sorted(NODE_DIR.glob("node[0-9]*")):
        total_kb = re.search(r"MemTotal:\s+(\d+) kB", (path / "meminfo").read_text())
        nodes[path.name.removeprefix("node")] = {
            "cpulist": (path / "cpulist").read_text().strip(),
            "mem_total_bytes": int(total_kb[1]) * 1024 if total_kb else None,
            "distance": (path / "distance").read_text().split(),
        }
    return {
        "numa_balancing": Path("/proc/sys/kernel/numa_balancing").read_text().strip(),
        "nodes": nodes,
        "has_cpu": (NODE_DIR / "has_cpu").read_text().strip(),
        "has_memory": (NODE_DIR / "has_memory").read_text().strip(),
    }


def topology_part() -> dict[str, Any]:
    lstopo = subprocess.run(["lstopo-no-graphics", "--of", "xml", "-"], capture_output=True, text=True, check=False)
    return {
        "sysfs": node_facts(),
        "affmon": affmon("topology", "--json"),
        "lstopo_xml": lstopo.stdout if lstopo.returncode == 0 else None,
        "lstopo_error": lstopo.stderr[-2000:] if lstopo.returncode else None,
    }


def kernel_view(job: RunningJob) -> dict[str, Any]:
    return {"numa_maps": numa_maps_bytes(job.pid), "masks": thread_masks(job.pid)}


def journal_tail(lines: int = 3) -> list[Any]:
    """The last entries of affmon's journal (``$XDG_STATE_HOME/affmon/journal.jsonl``)."""
    path = Path(os.environ.get("XDG_STATE_HOME", "/tmp/state")) / "affmon" / "journal.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines()[-lines:]:
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


@contextlib.contextmanager
def jobs_running(specs: list[JobSpec], workdir: Path) -> Iterator[dict[str, RunningJob]]:
    runtime = runtime_file(workdir)
    started: dict[str, RunningJob] = {}
    try:
        for spec in specs:
            started[spec.name] = start_job(spec, runtime)
        yield started
    finally:
        stop_jobs(started.values())


def findings_by_pid(diagnose: dict[str, Any], jobs: dict[str, RunningJob]) -> dict[str, list[dict[str, Any]]]:
    """The codes (with message and evidence) ``diagnose --json`` gave each job."""
    by_pid: dict[int, list[dict[str, Any]]] = {}
    for f in (diagnose.get("json") or {}).get("findings", []):
        by_pid.setdefault(f.get("pid"), []).append(f)
    return {name: by_pid.get(job.pid, []) for name, job in jobs.items()}


def remedy_args(finding: dict[str, Any]) -> list[str] | None:
    """The pin a REMOTE_MEMORY finding asks for (``affmon pin PID --cpus ... --migrate-memory``
    in its message), with the CPUs of the home node its evidence names."""
    if not re.search(r"affmon pin \d+ --cpus \S+ --migrate-memory", finding.get("message", "")):
        return None
    processes = finding.get("evidence", {}).get("processes", [])
    if not processes:
        return None
    home = processes[0]["home_node"]
    cpus = (NODE_DIR / f"node{home}" / "cpulist").read_text().strip()
    return ["pin", str(processes[0]["pid"]), "--cpus", cpus, "--migrate-memory"]


def placement_part(workdir: Path) -> dict[str, Any]:
    gpus = gpus_per_node({0: "0-1", 1: "2-3"})
    gpu0, gpu1 = gpus
    mount_pci_gpus(workdir / "pci", gpus)
    specs = [
        JobSpec("lab-remote", frozenset({2, 3}), 96, memory_node=0),
        JobSpec("lab-spread", frozenset({0, 1, 2, 3}), 96, busy_cpus=(1, 3)),
        JobSpec("lab-local", frozenset({0, 1}), 96, memory_node=0, busy_cpus=(-1,)),
        JobSpec("lab-wrong", frozenset({2, 3}), 96, busy_cpus=(-1,)),
    ]
    result: dict[str, Any] = {"gpus": {g.bus_id: g.node for g in gpus}}
    try:
        with jobs_running(specs, workdir) as jobs:
            pids = {name: job.pid for name, job in jobs.items()}
            result["pids"] = pids
            on_gpu = {gpu0.bus_id: [pids["lab-spread"], pids["lab-local"], pids["lab-wrong"]]}
            on_gpu[gpu1.bus_id] = [pids["lab-remote"]]
            fake_nvml(gpus, on_gpu)
            watch = [arg for pid in pids.values() for arg in ("--pid", str(pid))]

            before = {name: numa_maps_bytes(pid) for name, pid in pids.items()}
            snapshot = affmon("snapshot", *watch, "--json")
            after = {name: numa_maps_bytes(pid) for name, pid in pids.items()}
            by_pid = {p["pid"]: p for p in (snapshot["json"] or {}).get("processes", [])}
            result["memory"] = {
                name: {
                    "numa_maps_before": before[name],
                    "numa_maps_after": after[name],
                    "affmon": (by_pid.get(pid) or {}).get("memory_by_node"),
                    "training": (by_pid.get(pid) or {}).get("training"),
                }
                for name, pid in pids.items()
            }
            result["snapshot"] = {k: v for k, v in snapshot.items() if k != "json"}

            diagnose = affmon("diagnose", *watch, "--samples", "3", "--json")
            result["diagnose"] = {k: v for k, v in diagnose.items() if k != "json"}
            result["findings"] = findings_by_pid(diagnose, jobs)

            result["remote"] = remote_round_trip(jobs["lab-remote"], result["findings"]["lab-remote"])
            result["wrong"] = suggest_round_trip(jobs["lab-wrong"])
    finally:
        unmount_pci()
        sys.modules.pop("pynvml", None)
    result["failed"] = failed_migrations(workdir)
    return result


def remote_round_trip(job: RunningJob, findings: list[dict[str, Any]]) -> dict[str, Any]:
    """The command the REMOTE_MEMORY finding names, with the kernel's view around it; then,
    the job's pin undone and its pages sent back to node 0 (``migrate_pages`` directly),
    ``pin --suggest --migrate-memory`` on the same job: its threads are on their node
    already, its memory is not, and the migration is what the pin does."""
    out: dict[str, Any] = {"before": kernel_view(job)}
    remote = next((f for f in findings if f.get("code") == "REMOTE_MEMORY"), None)
    args = None if remote is None else remedy_args(remote)
    out["finding_command"] = args
    if args is not None:
        out["pin"] = affmon(*args, "--json")
        out["after"] = kernel_view(job)
        out["journal"] = journal_tail(1)
        out["undo_pin"] = affmon("undo", str(job.pid), "--json")
    OsMemory().migrate(job.pid, frozenset({1}), frozenset({0}))  # its pages back on the remote node
    out["before_suggest"] = kernel_view(job)
    out["suggest"] = affmon("pin", str(job.pid), "--suggest", "--migrate-memory", "--json")
    out["after_suggest"] = kernel_view(job)
    return out


def suggest_round_trip(job: RunningJob) -> dict[str, Any]:
    out: dict[str, Any] = {"before": kernel_view(job)}
    out["pin"] = affmon("pin", str(job.pid), "--suggest", "--migrate-memory", "--json")
    out["after"] = kernel_view(job)
    out["journal"] = journal_tail(1)
    out["undo"] = affmon("undo", str(job.pid), "--json")
    out["after_undo"] = kernel_view(job)
    return out


def failed_migrations(workdir: Path) -> dict[str, Any]:
    """Two pins whose migration the kernel does not (fully) make: ``full``, node 1 nearly
    filled by another job before a 200 MiB job is pinned there with ``--migrate-memory``;
    ``fenced``, the pin made from a cpuset (cgroup v2) that allows memory on node 0 only."""
    out: dict[str, Any] = {}
    free = _node_free_bytes(1)
    filler_mib = max(64, (free >> 20) - 120)
    specs = [
        JobSpec("lab-filler", frozenset({2, 3}), filler_mib, memory_node=1),
        JobSpec("lab-mover", frozenset({0, 1}), 200, memory_node=0, busy_cpus=(-1,)),
    ]
    with jobs_running(specs, workdir) as jobs:
        job = jobs["lab-mover"]
        out["full"] = {"pid": job.pid, "node1_free_before_filler": free, "filler_mib": filler_mib}
        out["full"]["node1_free"] = _node_free_bytes(1)
        out["full"]["before"] = kernel_view(job)
        out["full"]["pin"] = affmon("pin", str(job.pid), "--cpus", "2-3", "--migrate-memory", "--json")
        out["full"]["after"] = kernel_view(job)
        out["full"]["journal"] = journal_tail(1)
    cgroup = Path("/sys/fs/cgroup")
    if not (cgroup / "cgroup.controllers").exists():
        subprocess.run(["mount", "-t", "cgroup2", "none", str(cgroup)], check=True)
    (cgroup / "cgroup.subtree_control").write_text("+cpuset")
    fence = cgroup / "lab-fence"
    fence.mkdir(exist_ok=True)
    (fence / "cpuset.cpus").write_text("0-3")
    (fence / "cpuset.mems").write_text("0")
    with jobs_running([JobSpec("lab-fenced", frozenset({0, 1}), 96, busy_cpus=(-1,))], workdir) as jobs:
        job = jobs["lab-fenced"]
        out["fenced"] = {"pid": job.pid, "before": kernel_view(job)}
        (fence / "cgroup.procs").write_text(str(os.getpid()))  # affmon's own cpuset: node 0
        try:
            out["fenced"]["pin"] = affmon("pin", str(job.pid), "--cpus", "2-3", "--migrate-memory", "--json")
        finally:
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))
        out["fenced"]["after"] = kernel_view(job)
        out["fenced"]["journal"] = journal_tail(1)
    return out


def _node_free_bytes(node: int) -> int:
    found = re.search(r"MemFree:\s+(\d+) kB", (NODE_DIR / f"node{node}" / "meminfo").read_text())
    return int(found[1]) * 1024 if found else 0


def memory_only_part(workdir: Path) -> dict[str, Any]:
    """A job with threads on node 0 and its memory bound to the memory-only node 2."""
    with jobs_running([JobSpec("lab-memnode", frozenset({0, 1}), 96, memory_node=2, busy_cpus=(-1,))], workdir) as jobs:
        job = jobs["lab-memnode"]
        watch = ("--pid", str(job.pid))
        out: dict[str, Any] = {"pid": job.pid, "before": kernel_view(job)}
        snapshot = affmon("snapshot", *watch, "--json")
        (mine,) = [p for p in (snapshot["json"] or {}).get("processes", []) if p["pid"] == job.pid] or [{}]
        out["affmon_memory"] = mine.get("memory_by_node")
        out["numa_maps"] = numa_maps_bytes(job.pid)
        diagnose = affmon("diagnose", *watch, "--samples", "3", "--json")
        out["findings"] = findings_by_pid(diagnose, jobs)["lab-memnode"]
        out["pin"] = affmon("pin", str(job.pid), "--cpus", "2-3", "--migrate-memory", "--json")
        out["after"] = kernel_view(job)
    # A GPU whose NUMA node is the memory-only one (as on Grace Hopper), local to CPUs 2-3.
    gpu = LabGpu("0000:10:00.0", 2, "2-3")
    mount_pci_gpus(workdir / "pci", [gpu])
    try:
        out["plan"] = affmon("plan", "--json")
    finally:
        unmount_pci()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("parts", nargs="+", choices=["topology", "placement", "memory-only", "ranks", "tui", "bandwidth"])
    ap.add_argument("--numa-balancing", type=int, default=0, help="bandwidth: the kernel's setting during it")
    ap.add_argument("--rounds", type=int, default=2, help="bandwidth: remote/migrated rounds")
    a = ap.parse_args(argv)
    started = time.monotonic()
    result: dict[str, Any] = {"parts": a.parts, "uptime_s_at_start": float(Path("/proc/uptime").read_text().split()[0])}
    if {"topology", "placement", "memory-only"} & set(a.parts):
        result["topology"] = topology_part()
    for part in a.parts:  # each in its own directory: a part's mounts and files end with it
        with tempfile.TemporaryDirectory(prefix="lab-") as tmp:
            workdir = Path(tmp)
            if part == "placement":
                result["placement"] = placement_part(workdir)
            elif part == "memory-only":
                result["memory_only"] = memory_only_part(workdir)
            elif part == "ranks":
                result["ranks"] = ranks_part(affmon, workdir)
            elif part == "bandwidth":
                result["bandwidth"] = bandwidth_part(rounds=a.rounds, numa_balancing=a.numa_balancing)
            elif part == "tui":
                result["tui"] = tui_part(workdir)
    result["seconds"] = round(time.monotonic() - started, 2)
    text = json.dumps(result, indent=1, default=str)
    out = os.environ.get("LAB_OUT")
    if out:
        Path(out, "checks.json").write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
