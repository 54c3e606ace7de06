"""``/proc/PID/numa_maps``: parsed from real multi-node text (tests/fixtures/proc/SOURCES.md),
from generated text, from this machine's own file of a live process (against its VmRSS),
and read within its bound."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from affmon.collect.numa_maps import (
    memory_node,
    parse_numa_maps,
    parse_statm,
    read_numa_maps,
    read_one_node,
    reread_period_s,
)
from affmon.core.errors import ParseError
from affmon.core.model.samples import NodeMemory

FIXTURES = Path(__file__).parent.parent / "fixtures" / "proc"
KIB = 1024
MIB = 1 << 20


def fixture(name: str) -> str:
    return (FIXTURES / f"numa_maps__{name}.txt").read_text()


# -- real text from multi-node machines ----------------------------------------------


def test_the_kernel_documentation_s_four_node_example() -> None:
    memory = parse_numa_maps(fixture("linux-doc-4node"))
    # Node 0: ld.so's 24 and libc's 41 file pages. Node 3: forty 4 kB pages and one 2 MiB
    # hugetlb page; each line's own kernelpagesize_kB sizes its pages.
    assert memory.resident_bytes_by_node == {0: 65 * 4 * KIB, 3: 40 * 4 * KIB + 2048 * KIB}
    # Anonymous: the lines with no file (1 + 3 + 3 + 2 + stack 3 + 1 pages) and the hugetlb
    # page behind "/anon_hugepage (deleted)"; the COW pages of file mappings stay "file".
    assert memory.anon_bytes_by_node == {3: 13 * 4 * KIB + 2048 * KIB}
    assert memory.mappings == 16 and memory.unsized_pages == 0 and not memory.truncated
    assert memory.to_json() == {"0": 266240, "3": 2260992}


def test_two_nodes_a_bound_shared_mapping_that_escaped_to_node_1() -> None:
    memory = parse_numa_maps(fixture("lkml-mbind-thp-2node"))
    assert memory.resident_bytes_by_node == {0: 396800 * 4 * KIB, 1: 127488 * 4 * KIB}
    assert memory.resident_bytes == 2 << 30  # the reproducer's 2 GiB, every page touched
    assert memory.anon_bytes_by_node == {}  # a /dev/shm file: shared, not the process's own


def test_two_nodes_an_anonymous_mapping_before_and_after_a_partial_migration() -> None:
    before = parse_numa_maps(fixture("lkml-thp-migration-2node.before"))
    after = parse_numa_maps(fixture("lkml-thp-migration-2node.after"))
    assert before.anon_bytes_by_node == {0: 100 * MIB}
    assert after.anon_bytes_by_node == {0: 18602 * 4 * KIB, 1: 6998 * 4 * KIB}
    assert before.resident_bytes == after.resident_bytes == 100 * MIB


# -- generated text -------------------------------------------------------------------

PAGE_KIB = st.sampled_from([4, 16, 64, 2048, 1048576])
MAPPING = st.fixed_dictionaries(
    {
        "address": st.integers(0, 2**48 - 1),
        "policy": st.sampled_from(["default", "bind:0", "interleave:0-3", "prefer:1", "bind:1-2"]),
        "file": st.sampled_from(
            [None, "/usr/lib/libc.so.6", "/dev/shm/torch_1\\040(deleted)", "/memfd:x\\040(deleted)"]
        ),
        "flags": st.lists(st.sampled_from(["heap", "stack", "huge"]), max_size=1),
        "pages": st.dictionaries(st.integers(0, 1023), st.integers(1, 10**9), max_size=4),
        "page_kib": PAGE_KIB,
        "extra": st.lists(st.sampled_from(["anon=3", "dirty=1", "mapmax=6", "active=0", "swapcache=2"]), max_size=3),
    }
)


def render(m: dict[str, object]) -> str:
    items = [f"{m['address']:x}", str(m["policy"])]
    if m["file"] is not None:
        items.append(f"file={m['file']}")
    items += [*m["flags"], *m["extra"]]  # type: ignore[misc]
    pages = m["pages"]
    assert isinstance(pages, dict)
    if pages:  # the kernel prints the counts, then the page size, only for a mapping with pages
        items += [f"N{node}={count}" for node, count in sorted(pages.items())]
        items.append(f"kernelpagesize_kB={m['page_kib']}")
    return " ".join(items)


@settings(max_examples=200, deadline=None)
@given(st.lists(MAPPING, max_size=30))
def test_generated_text_sums_pages_times_their_own_page_size(mappings: list[dict[str, object]]) -> None:
    resident: dict[int, int] = {}
    anon: dict[int, int] = {}
    for m in mappings:
        pages = m["pages"]
        assert isinstance(pages, dict) and isinstance(m["page_kib"], int)
        for node, count in pages.items():
            size = count * m["page_kib"] * KIB
            resident[node] = resident.get(node, 0) + size
            if m["file"] is None or str(m["file"]).startswith("/memfd:"):
                anon[node] = anon.get(node, 0) + size
    memory = parse_numa_maps("\n".join(render(m) for m in mappings) + "\n")
    assert memory.resident_bytes_by_node == resident
    assert memory.anon_bytes_by_node == anon
    assert memory.mappings == len(mappings)


def test_a_line_without_a_page_size_uses_the_base_page_unless_it_is_huge() -> None:
    text = "00400000 default anon=2 dirty=2 N1=2\n7f0000000000 default file=/x huge anon=1 N1=1\n"
    memory = parse_numa_maps(text, base_page_bytes=64 * KIB)  # a kernel before 3.19 on 64 kB pages
    assert memory.resident_bytes_by_node == {1: 128 * KIB}
    assert memory.unsized_pages == 1  # a huge page of unknown size is counted, not guessed


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("N0=1 kernelpagesize_kB=4", "numa_maps line 1 is not '<address> <policy> ...': 'N0=1 kernelpagesize_kB=4'"),
        ("00400000 default\n7f00 default N0=-1", "numa_maps line 2: not a count in 'N0=-1'"),
        ("7f00 default N0=1 kernelpagesize_kB=4k", "numa_maps line 1: not a count in 'kernelpagesize_kB=4k'"),
        ("7f00 default N99999=1", "numa_maps line 1: node id out of range in 'N99999=1'"),
        ("7f00 default N0=\x1b[2J", "numa_maps line 1: not a count in 'N0=\\x1b[2J'"),
    ],
)
def test_text_that_is_not_numa_maps_is_one_clear_error(text: str, message: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse_numa_maps(text)
    assert str(caught.value) == message


# -- this machine -----------------------------------------------------------------------

TOUCHER = """
import mmap, sys
size = int(sys.argv[1]) << 20
area = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for offset in range(0, size, mmap.PAGESIZE):
    area[offset] = 1
print("ready", flush=True)
sys.stdin.read()
"""


@contextmanager
def toucher(mib: int) -> Iterator[int]:
    """A process that wrote every page of ``mib`` MiB of anonymous memory, and waits."""
    proc = subprocess.Popen(
        [sys.executable, "-c", TOUCHER, str(mib)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def vm_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * KIB
    raise AssertionError("no VmRSS")


def memory_nodes() -> set[int]:
    text = Path("/sys/devices/system/node/has_memory").read_text().strip()
    nodes: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        nodes.update(range(int(low), int(high or low) + 1))
    return nodes


def test_a_live_process_s_pages_are_its_vm_rss_on_this_machine_s_nodes() -> None:
    with toucher(128) as pid:
        rss_before = vm_rss(pid)
        memory = read_numa_maps(pid)
        rss_after = vm_rss(pid)
    assert memory is not None and not memory.truncated
    assert set(memory.resident_bytes_by_node) <= memory_nodes()
    # The 128 MiB it wrote are anonymous and resident.
    assert memory.anon_bytes >= 128 * MIB
    # The same pages as VmRSS, give or take what the two reads do not share: VmRSS comes
    # from per-CPU counters that may lag by a few pages per CPU; numa_maps also counts
    # hugetlb pages (none here) and leaves out VM_PFNMAP/VM_IO mappings ([vvar]).
    slack = 2 * MIB
    assert min(rss_before, rss_after) - slack <= memory.resident_bytes <= max(rss_before, rss_after) + slack


def test_the_reader_stops_at_its_bound_and_says_so() -> None:
    with toucher(8) as pid:
        whole = read_numa_maps(pid)
        cut = read_numa_maps(pid, max_bytes=1)
    assert whole is not None and not whole.truncated and whole.mappings > 0
    assert cut == NodeMemory(truncated=True)  # nothing counted past the bound, and it says so


def test_a_process_that_is_gone_or_a_tree_without_the_file_is_unknown(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert read_numa_maps(proc.pid) is None
    (tmp_path / "proc/42").mkdir(parents=True)
    assert read_numa_maps(42, str(tmp_path)) is None  # a kernel without NUMA has no numa_maps
    (tmp_path / "proc/42/numa_maps").write_text(fixture("linux-doc-4node"))
    recorded = read_numa_maps(42, str(tmp_path))
    assert recorded is not None and recorded.resident_bytes_by_node[0] == 65 * 4 * KIB


def test_a_recorded_tree_s_link_does_not_lead_out_of_it(tmp_path: Path) -> None:
    (tmp_path / "proc/7").mkdir(parents=True)
    os.symlink("/proc/self/numa_maps", tmp_path / "proc/7/numa_maps")  # the tree's /proc/self: absent
    assert read_numa_maps(7, str(tmp_path)) is None


@pytest.mark.parametrize(("cost_s", "period_s"), [(0.0, 5.0), (0.03, 5.0), (0.2, 20.0), (1.0, 100.0)])
def test_the_reread_period_keeps_the_walk_under_one_percent(cost_s: float, period_s: float) -> None:
    assert reread_period_s(cost_s) == pytest.approx(period_s)


# -- a machine whose memory is all on one node -------------------------------------------


@pytest.mark.parametrize(
    ("has_memory", "node"),
    [("0\n", 0), ("2\n", 2), ("0-1\n", None), ("0,2\n", None), ("garbage\n", None), (None, None)],
)
def test_the_one_memory_node_is_read_from_sysfs(tmp_path: Path, has_memory: str | None, node: int | None) -> None:
    if has_memory is not None:
        (tmp_path / "sys/devices/system/node").mkdir(parents=True)
        (tmp_path / "sys/devices/system/node/has_memory").write_text(has_memory)
    assert memory_node(str(tmp_path)) == node


def test_statm_on_one_node_is_the_resident_set_as_numa_maps_counts_it() -> None:
    """Where every page is on one node, ``statm`` (no page-table walk) gives what the walk
    would: the resident set, the 128 MiB written anonymous."""
    nodes = memory_nodes()
    node = min(nodes)
    with toucher(128) as pid:
        rss_before = vm_rss(pid)
        walked = read_numa_maps(pid)
        one = read_one_node(pid, node)
        rss_after = vm_rss(pid)
    assert one is not None and walked is not None
    assert set(one.resident_bytes_by_node) == {node}
    assert one.anon_bytes >= 128 * MIB
    slack = 2 * MIB
    assert min(rss_before, rss_after) - slack <= one.resident_bytes <= max(rss_before, rss_after) + slack
    if len(nodes) == 1:  # this machine's case: the walk found the same pages on the same node
        assert abs(one.resident_bytes - walked.resident_bytes) <= slack
        assert abs(one.anon_bytes - walked.anon_bytes) <= 8 * MIB  # statm's "shared" is file and shmem pages


def test_statm_that_is_not_statm_is_a_parse_error_and_a_gone_process_unknown(tmp_path: Path) -> None:
    with pytest.raises(ParseError):
        parse_statm("12 x 3 4 5 6 0\n", 0)
    assert parse_statm("100 50 20 1 0 30 0\n", 1, page_bytes=4096) == NodeMemory(
        resident_bytes_by_node={1: 50 * 4096}, anon_bytes_by_node={1: 30 * 4096}
    )
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert read_one_node(proc.pid, 0) is None
