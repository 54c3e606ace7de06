"""Where a watched process's memory is and what placed it, through the whole path: the
sampler reads them from live processes, snapshot --json prints them, recordings keep
them, and the tick raises REMOTE_MEMORY from them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from affmon.collect.numa_maps import memory_node
from affmon.collect.sampler import Sampler, Selection
from affmon.core.model.context import Context
from affmon.core.model.rates import make_snapshot
from affmon.core.model.samples import NodeMemory, ProcessSample, Sample, ThreadSample
from affmon.core.model.topology import NumaNode, Topology
from affmon.core.recording.format import process_from_json, process_to_json
from affmon.core.rules.base import RuleInputs as RuleContext
from affmon.core.rules.evaluate import evaluate
from tests.helpers.live import driven

QUIET = Path(__file__).parent.parent / "helpers" / "quiet_other.py"
GIB = 1 << 30


def vm_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_training_process_has_its_memory_and_context_read(tmp_path, monkeypatch):
    runtime = tmp_path / "libtorch_cpu.so"
    runtime.write_bytes(b"\0" * 4096)
    monkeypatch.setenv("SLURM_JOB_ID", "31337")
    monkeypatch.setenv("SLURM_LOCALID", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with driven(QUIET, "--name", "python3", "--runtime", str(runtime)) as job:
        sample = Sampler("/", Selection(pids=(job.pid,))).sample()
        (p,) = [q for q in sample.processes if q.pid == job.pid]
        assert p.training
        assert p.context is not None and (p.context.scheduler, p.context.slurm_job_id) == ("slurm", "31337")
        assert p.context.local_rank == 1 and p.context.from_environ
        assert p.memory is not None
        # One node with memory: read from statm, no walk of numa_maps (which counts mappings);
        # several: the walk. Either is the process's resident set (docs/memory.md: within a few pages).
        assert (p.memory.mappings > 0) == (memory_node("/") is None)
        assert abs(p.memory.resident_bytes - vm_rss(job.pid)) < 8 << 20


def test_snapshot_json_prints_memory_by_node_and_context(tmp_path):
    runtime = tmp_path / "libnccl.so.2"
    runtime.write_bytes(b"\0" * 4096)
    env = dict(os.environ, SLURM_JOB_ID="4242")
    proc = subprocess.Popen(
        [sys.executable, str(QUIET), "--name", "python3", "--runtime", str(runtime)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline()
        out = subprocess.run(
            [sys.executable, "-m", "affmon", "snapshot", "--pid", str(proc.pid), "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        (p,) = [q for q in json.loads(out.stdout)["processes"] if q["pid"] == proc.pid]
        nodes = p["memory_by_node"]
        assert nodes and all(k.isdigit() and v > 0 for k, v in nodes.items())
        assert p["context"]["scheduler"] == "slurm" and p["context"]["slurm_job_id"] == "4242"
    finally:
        proc.kill()
        proc.wait()


def test_a_rank_under_torchrun_with_numa_binding_says_so(tmp_path):
    """A launcher named torchrun (its comm) started with --numa-binding node: its child's
    context names the mode."""
    launcher = tmp_path / "torchrun"
    launcher.write_text(
        "import subprocess, sys\n"
        "open('/proc/self/comm', 'w').write('torchrun')\n"
        f"child = subprocess.Popen([sys.executable, {str(QUIET)!r}, '--name', 'python3'], stdin=subprocess.PIPE)\n"
        "print(child.pid, flush=True)\n"
        "child.wait()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, str(launcher), "--numa-binding", "node", "train.py"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "quiet_other" not in Path(f"/proc/{child}/cmdline").read_text():
            time.sleep(0.05)
        sample = Sampler("/", Selection(pids=(proc.pid,))).sample()
        (p,) = [q for q in sample.processes if q.pid == child]
        assert p.context is not None and p.context.numa_binding == "node"
    finally:
        subprocess.run(["pkill", "-KILL", "-P", str(proc.pid)], check=False)
        proc.kill()
        proc.wait()


def sample_with(memory: NodeMemory | None, mask: frozenset[int], t: float) -> Sample:
    main = ThreadSample(100, 5, "python", "S", 0, 0, int(t * 1e9), 0, 1, 0, 0, 0, mask)
    p = ProcessSample(
        100, 5, 1, "python", 0, "root", "python train.py", None, None, (main,), training=True, memory=memory
    )
    return Sample(t, t, 0.0, (p,), ())


TWO_NODES = Topology.build(
    source="test",
    online_cpus=frozenset(range(4)),
    allowed_cpus=frozenset(range(4)),
    numa_nodes=(NumaNode(0, frozenset({0, 1})), NumaNode(1, frozenset({2, 3}))),
    packages=(),
    cores=(),
    l3_groups=(),
    gpus=(),
)


def test_the_tick_raises_remote_memory_from_the_sampled_memory():
    far = NodeMemory({0: GIB // 4, 1: 3 * GIB}, {0: GIB // 4, 1: 3 * GIB}, mappings=10)
    snap = make_snapshot(sample_with(far, frozenset({0, 1}), 1.0), sample_with(far, frozenset({0, 1}), 2.0), TWO_NODES)
    codes = [f.code for f in evaluate(snap, RuleContext(TWO_NODES))]
    assert "REMOTE_MEMORY" in codes
    near = NodeMemory({0: 3 * GIB}, {0: 3 * GIB}, mappings=10)
    snap = make_snapshot(
        sample_with(near, frozenset({0, 1}), 1.0), sample_with(near, frozenset({0, 1}), 2.0), TWO_NODES
    )
    assert "REMOTE_MEMORY" not in [f.code for f in evaluate(snap, RuleContext(TWO_NODES))]


def test_memory_and_context_round_trip_through_a_recording():
    p = sample_with(NodeMemory({0: 5, 3: 7}, {3: 7}, mappings=2, truncated=True), frozenset({0}), 1.0).processes[0]
    p = replace(
        p,
        context=Context(
            scheduler="kubernetes", pod_uid="0a1b", qos="guaranteed", exclusive_cpus=frozenset({2, 3}), local_rank=0
        ),
    )
    back = process_from_json(json.loads(json.dumps(process_to_json(p))))
    assert back == p
