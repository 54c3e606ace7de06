"""The multi-GPU proof's cross-NUMA launcher (bench/numa/cross_numa.py) on recorded machines
with two NUMA nodes: each rank must land on a node that is not its GPU's, and a machine
with one node must be refused in one line (the lent 2-GPU machine has one node, so this
is the only place the placement logic runs before a multi-node machine is lent)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from affmon.core.errors import AffmonError
from affmon.core.model.topology import Core, Gpu, NumaNode, Package, Topology
from affmon.sources.live import load_topology
from bench.numa.cross_numa import wrong_node

ROOT = Path(__file__).resolve().parent.parent.parent
XML = ROOT / "tests/fixtures/hwloc_xml"


@pytest.mark.parametrize(
    "name", ["hwloc-xml__nvidiaDGX2.xml", "mpibind-xml__coral-lassen.xml", "mpibind-xml__eas-tioga.xml"]
)
def test_every_gpu_gets_cpus_of_another_node(name: str) -> None:
    topology = load_topology(hwloc_xml=str(XML / name))
    for gpu in topology.gpus:
        own, node, cpus = wrong_node(topology, gpu.pci_bus_id)
        assert own == gpu.numa_node
        assert node != own
        assert cpus, f"{gpu.pci_bus_id}: empty CPU set"
        assert set(topology.nodes_of(cpus)) == {node}
        if gpu.local_cpus:
            assert not cpus & gpu.local_cpus


def test_one_node_machine_is_refused() -> None:
    """The lent 2-GPU machine's shape: one node holding every CPU, GPUs on it."""
    cpus = frozenset(range(32))
    topology = Topology.build(
        source="sysfs",
        online_cpus=cpus,
        allowed_cpus=cpus,
        numa_nodes=[NumaNode(0, cpus)],
        packages=[Package(0, cpus)],
        cores=[Core(0, frozenset({c})) for c in cpus],
        l3_groups=[],
        gpus=[Gpu("0000:18:00.0", "nvidia", 0, cpus), Gpu("0000:2a:00.0", "nvidia", 0, cpus)],
    )
    with pytest.raises(AffmonError, match="one NUMA node with CPUs"):
        wrong_node(topology, "0000:2a:00.0")
    unknown = Topology.build(
        source="sysfs",
        online_cpus=cpus,
        allowed_cpus=cpus,
        numa_nodes=[NumaNode(0, frozenset(range(16))), NumaNode(1, frozenset(range(16, 32)))],
        packages=[Package(0, cpus)],
        cores=[Core(0, frozenset({c})) for c in cpus],
        l3_groups=[],
        gpus=[Gpu("0000:18:00.0", "nvidia", None, None)],
    )
    with pytest.raises(AffmonError, match="does not say which NUMA node"):
        wrong_node(unknown, "0000:18:00.0")


def _run(local_rank: str, xml: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env.update({"LOCAL_RANK": local_rank, "PYTHONPATH": str(ROOT), **(env_extra or {})})
    return subprocess.run(
        [sys.executable, str(ROOT / "bench/numa/cross_numa.py"), "--hwloc-xml", xml, "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_dry_run_names_the_wrong_node_for_each_local_rank() -> None:
    xml = str(XML / "hwloc-xml__nvidiaDGX2.xml")
    topology = load_topology(hwloc_xml=xml)
    nvidia = [g for g in topology.gpus if g.vendor == "nvidia"]
    for rank in (0, len(nvidia) - 1):
        done = _run(str(rank), xml)
        assert done.returncode == 0, done.stderr
        gpu = nvidia[rank]
        assert f"GPU {gpu.pci_bus_id} on node {gpu.numa_node}, pinned to node {1 - gpu.numa_node}" in done.stdout


def test_bad_environment_is_one_line_and_exit_2() -> None:
    xml = str(XML / "hwloc-xml__nvidiaDGX2.xml")
    for local, extra in [("x", {}), ("3", {"CUDA_VISIBLE_DEVICES": "0,1"})]:
        done = _run(local, xml, extra)
        assert done.returncode == 2
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("cross_numa: ")
        assert "Traceback" not in done.stderr
