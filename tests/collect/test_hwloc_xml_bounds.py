"""hwloc XML is read in bounded time and memory.

Files built here: the shape that took 70 s and 3.7 GB (caches nested thousands deep,
each with a PU beside the next cache), deep chains of Groups, thousands of GPUs under
one ancestor with a big cpuset, streams without end and files beyond the size bound.
Memory is measured with ``tracemalloc`` as a multiple of the file's size (no timing
assertions): a reader whose memory grows with the square of the file fails it by far.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tracemalloc
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from affmon.collect import hwloc_xml
from affmon.collect.hwloc_xml import MAX_DEPTH, MAX_XML_BYTES, read_hwloc_xml
from affmon.core.errors import ParseError, SourceError
from affmon.core.model.cpuset import MAX_CPU_ID

REPO = Path(__file__).resolve().parent.parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "hwloc_xml" / "hwloc-xml__24em64t-2n6c2t-pci.xml"
MEMORY_LIMIT_BYTES = 1 << 30
# Peak Python memory of a read, per byte of file: the fixtures and the files below
# take 6-30; the quadratic reader took 560 (900 nested caches) and 960 (3,000 GPUs).
MEMORY_PER_FILE_BYTE = 100

HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE topology SYSTEM "hwloc2.dtd">\n<topology version="2.0">\n'
TAIL = "</topology>\n"


def mask(cpus: int) -> str:
    """hwloc's spelling of CPUs 0..cpus-1 (cpus a multiple of 32)."""
    return ",".join(["0xffffffff"] * (cpus // 32))


def machine(inner: str, cpus: str = "0x00000001", kind: str = "Machine") -> str:
    attrs = f'cpuset="{cpus}" complete_cpuset="{cpus}" allowed_cpuset="{cpus}" nodeset="0x1" allowed_nodeset="0x1"'
    node = f'<object type="NUMANode" os_index="0" cpuset="{cpus}" nodeset="0x1"/>'
    return f'<object type="{kind}" os_index="0" {attrs}>{node}{inner}</object>\n'


def nested_caches(levels: int) -> str:
    """The reported shape: an L2 cache holding a PU and the next L2 cache, ``levels`` deep."""
    opening = "".join(
        f'<object type="L2Cache" cpuset="0x1" depth="2" cache_size="1" cache_type="0">'
        f'<object type="PU" os_index="{i}" cpuset="0x1"/>'
        for i in range(levels)
    )
    return HEAD + machine(opening + "</object>" * levels) + TAIL


def nested_groups(levels: int) -> str:
    opening = '<object type="Group" cpuset="0x1" nodeset="0x1">' * levels
    pu = '<object type="PU" os_index="0" cpuset="0x1"/>'
    return HEAD + machine(opening + pu + "</object>" * levels) + TAIL


def many_gpus(gpus: int, cpus: int) -> str:
    pus = "".join(f'<object type="PU" os_index="{i}"/>' for i in range(cpus))
    pci_type = "0302 [10de:20b0] [10de:134f] a1"
    devices = "".join(
        f'<object type="PCIDev" pci_busid="{i // 256:04x}:{i % 256:02x}:00.0" pci_type="{pci_type}"/>'
        for i in range(gpus)
    )
    return HEAD + machine(pus + devices, cpus=mask(cpus)) + TAIL


def write(tmp_path: Path, text: str, name: str = "topology.xml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def peak_bytes_of_read(path: Path) -> int:
    tracemalloc.start()
    try:
        read_hwloc_xml(str(path))
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


def affmon_topology(xml: str, stdin: int | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "affmon", "topology", "--hwloc-xml", xml, "--json"],
        capture_output=stdin is None,
        stdin=stdin,
        stdout=None if stdin is None else subprocess.PIPE,
        stderr=None if stdin is None else subprocess.PIPE,
        text=True,
        cwd=REPO,
        timeout=300,  # a hang guard only: each run takes a second or two
        preexec_fn=limit_memory,
    )


def one_line_refusal(run: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr.startswith("affmon: ") and run.stderr.count("\n") == 1
    assert fragment in run.stderr


# --------------------------------------------------------------------------------- depth


@pytest.mark.parametrize("shape", ["caches", "groups"])
def test_twenty_thousand_levels_are_refused_in_one_line(tmp_path: Path, shape: str) -> None:
    text = nested_caches(20_000) if shape == "caches" else nested_groups(20_000)
    run = affmon_topology(str(write(tmp_path, text)))
    one_line_refusal(run, f"nested more than {MAX_DEPTH} deep")


def test_depth_bound_is_exact(tmp_path: Path) -> None:
    # <topology>, Machine, the Groups, then the PU: MAX_DEPTH elements deep is read.
    read_hwloc_xml(str(write(tmp_path, nested_groups(MAX_DEPTH - 3))))
    with pytest.raises(ParseError, match=f"nested more than {MAX_DEPTH} deep"):
        read_hwloc_xml(str(write(tmp_path, nested_groups(MAX_DEPTH - 2))))


# ------------------------------------------------------- linear below the depth bound


def test_nested_caches_below_the_bound_read_in_linear_memory(tmp_path: Path) -> None:
    path = write(tmp_path, nested_caches(900))
    topology = read_hwloc_xml(str(path))
    # Each PU is in the nearest cache of the top level: one group per cache, no overlap.
    assert sorted(tuple(g.cpus) for g in topology.l3_groups) == [(i,) for i in range(900)]
    assert peak_bytes_of_read(path) < MEMORY_PER_FILE_BYTE * path.stat().st_size


def test_gpus_sharing_an_ancestor_read_in_linear_memory(tmp_path: Path) -> None:
    path = write(tmp_path, many_gpus(3000, 4096))
    topology = read_hwloc_xml(str(path))
    assert len(topology.gpus) == 3000
    assert {g.local_cpus for g in topology.gpus} == {frozenset(range(4096))}
    assert {g.numa_node for g in topology.gpus} == {0}
    assert peak_bytes_of_read(path) < MEMORY_PER_FILE_BYTE * path.stat().st_size


# ---------------------------------------------------------------------------- file size


def test_file_beyond_the_size_bound_is_refused_unread(tmp_path: Path) -> None:
    path = write(tmp_path, HEAD)
    os.truncate(path, MAX_XML_BYTES + 1)  # sparse: refused from its size, before any read
    with pytest.raises(SourceError, match="larger than 32 MiB"):
        read_hwloc_xml(str(path))
    os.truncate(path, MAX_XML_BYTES)  # at the bound it is read, and is not XML
    with pytest.raises(ParseError, match="malformed XML"):
        read_hwloc_xml(str(path))


def test_endless_stream_is_refused(tmp_path: Path) -> None:
    run = affmon_topology("/dev/zero")
    one_line_refusal(run, "larger than 32 MiB")


def test_pipe_is_still_read() -> None:
    """``--hwloc-xml <(lstopo --of xml)`` hands affmon a pipe: the bound must not stop it."""
    with FIXTURE.open("rb") as source:
        reader, writer = os.pipe()
        with os.fdopen(writer, "wb") as pipe_in:
            pipe_in.write(source.read())  # fits the pipe buffer (64 KiB)
        try:
            run = affmon_topology("/dev/stdin", stdin=reader)
        finally:
            os.close(reader)
    assert (run.returncode, run.stderr) == (0, "")
    assert run.stdout == affmon_topology(str(FIXTURE)).stdout


# ---------------------------------------------------------------------- hostile values


def test_pu_id_beyond_any_cpu_is_refused(tmp_path: Path) -> None:
    pu = f'<object type="PU" os_index="{MAX_CPU_ID + 1}"/>'
    with pytest.raises(ParseError, match="beyond any Linux CPU id"):
        read_hwloc_xml(str(write(tmp_path, HEAD + machine(pu) + TAIL)))


def test_messages_escape_what_the_file_holds(tmp_path: Path) -> None:
    # XML 1.0 allows C1 controls (CSI is \\x9b) and bidirectional overrides in values.
    kind = "Machine\u009b2J\u202e"
    text = HEAD + machine('<object type="PU" os_index="0"/>', cpus="0xzz" + "z" * 5000, kind=kind) + TAIL
    with pytest.raises(ParseError) as caught:
        read_hwloc_xml(str(write(tmp_path, text)))
    message = str(caught.value)
    assert message.isprintable() and len(message) < len(str(tmp_path)) + 300


def test_a_shared_locality_is_parsed_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls = []
    real = hwloc_xml._mask

    def counting(path: str, elem: ET.Element, name: str) -> frozenset[int]:
        calls.append(name)
        return real(path, elem, name)

    monkeypatch.setattr(hwloc_xml, "_mask", counting)
    read_hwloc_xml(str(write(tmp_path, many_gpus(50, 64))))
    # The machine's allowed_cpuset, the NUMA node's cpuset, the GPUs' shared ancestor's
    # cpuset and nodeset: each once.
    assert sorted(calls) == ["allowed_cpuset", "cpuset", "cpuset", "nodeset"]
