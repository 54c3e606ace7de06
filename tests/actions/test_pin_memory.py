"""``pin --migrate-memory``: the process's pages follow its threads to the new CPUs' node.

On this machine (one NUMA node) the migration is a no-op that says so, and the real
``migrate_pages(2)`` is called once with this machine's own node to prove the binding.
On recorded multi-node machines (a Grace Hopper-like tree with GPU-memory nodes, the
4-node and 2-node machines of the numa_maps fixtures) a live process is pinned through
fake affinity and memory system calls: the node masks passed, the journal, the rollback.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from affmon.actions.describe import result_text, undo_text
from affmon.actions.journal import Journal
from affmon.actions.journal_records import MemoryRecord, decode, encode
from affmon.actions.migrate import (
    ONE_NODE,
    DryRunMemory,
    MoveMemory,
    OsMemory,
    migrate_memory,
    node_mask,
)
from affmon.actions.pin import pin
from affmon.actions.threads import DryRunAffinity
from affmon.actions.undo import undo
from affmon.collect.numa_maps import parse_numa_maps
from affmon.collect.sysfs_topology import read_topology
from affmon.core.model.cpuset import CpuSet
from affmon.core.model.samples import NodeMemory
from affmon.core.model.topology import NumaNode, Topology
from tests.helpers.live import usable_cpus, workload
from tests.helpers.topology_trees import extract_tree

FIXTURES = Path(__file__).parent.parent / "fixtures" / "proc"
MIB = 1 << 20
A, B = usable_cpus()[:2]


def fixture(name: str) -> NodeMemory:
    return parse_numa_maps((FIXTURES / f"numa_maps__{name}.txt").read_text())


class FakeAffinity:
    """Masks kept in a dict: the CPUs of a recorded machine do not exist here."""

    def __init__(self, everything: CpuSet) -> None:
        self.everything = everything
        self.masks: dict[int, CpuSet] = {}

    def get(self, tid: int) -> CpuSet:
        return self.masks.get(tid, self.everything)

    def set(self, tid: int, cpus: CpuSet) -> None:
        self.masks[tid] = cpus


class FakeMemory:
    """Records each ``migrate_pages`` call; ``answer`` returns its result or raises."""

    def __init__(self, answer: Callable[[], int] = lambda: 0) -> None:
        self.calls: list[tuple[int, frozenset[int], frozenset[int]]] = []
        self.answer = answer

    def migrate(self, pid: int, old_nodes: frozenset[int], new_nodes: frozenset[int]) -> int:
        self.calls.append((pid, old_nodes, new_nodes))
        return self.answer()


def reads(*memories: NodeMemory | None) -> Callable[[int], NodeMemory | None]:
    """numa_maps answers in turn (before, after)."""
    queue = list(memories)
    return lambda pid: queue.pop(0)


@pytest.fixture(scope="module")
def gh200(tmp_path_factory: pytest.TempPathFactory) -> Topology:
    """Grace nodes 0 (CPUs 0-71) and 1 (72-143); GPU memory nodes 2 and 10; nodes 3-9 and
    11-17 with neither CPUs nor memory (tests/fixtures/sysfs/SOURCES.md)."""
    return read_topology(str(extract_tree(tmp_path_factory, "gh200x2")))


def tids(pid: int) -> set[int]:
    return {int(t) for t in os.listdir(f"/proc/{pid}/task")}


# -- this machine: one node -------------------------------------------------------------


def test_on_one_node_the_pin_happens_and_no_memory_moves(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    memory_ops = FakeMemory()
    with workload("--cpus", f"{A},{B}", "--sleepers", "2") as w:
        request = MoveMemory(read_topology("/"), ops=memory_ops)
        result = pin(w["pid"], {B}, journal=journal, move_memory=request)
        assert result.ok and result.memory is not None
        assert (result.memory.ok, result.memory.attempted, result.memory.message) == (True, False, ONE_NODE)
        assert {frozenset(os.sched_getaffinity(t)) for t in tids(w["pid"])} == {frozenset({B})}
    assert memory_ops.calls == []  # no system call, no numa_maps walk
    assert result.journal_id is not None and journal.get(result.journal_id).memory is None
    assert "memory: one NUMA node: nothing to move" in result_text(result)


def test_the_command_says_one_node_and_succeeds(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    with workload("--cpus", f"{A},{B}") as w:
        run = subprocess.run(
            [sys.executable, "-m", "affmon", "pin", str(w["pid"]), "--cpus", str(B), "--migrate-memory", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert run.returncode == 0, run.stderr
        out = json.loads(run.stdout)
        assert out["ok"] and out["memory"]["message"] == ONE_NODE and not out["memory"]["attempted"]
        assert frozenset(os.sched_getaffinity(w["pid"])) == {B}


def test_the_real_system_call_with_this_machine_s_node() -> None:
    """migrate_pages(2) for real: node 0 to node 0 moves nothing and returns 0 (the masks
    reached the kernel as masks); a node that has no memory is EINVAL, a PID that is gone
    ESRCH, both turned into one line."""
    with workload() as w:
        assert OsMemory().migrate(w["pid"], frozenset({0}), frozenset({0})) == 0
        two = Topology.build(
            source="test",
            online_cpus={A, B},
            allowed_cpus={A, B},
            numa_nodes=[NumaNode(0, frozenset({A})), NumaNode(5, frozenset({B}))],
            packages=(),
            cores=(),
            l3_groups=(),
            gpus=(),
        )
        # Node 5 does not exist here: the kernel refuses it as a target.
        refused = migrate_memory(w["pid"], 5, two)
        assert not refused.ok and refused.attempted
        assert refused.message == (
            f"memory not moved: node 5 is not a memory node PID {w['pid']} may use"
            " (its cpuset's mems, or the node has no memory)"
        )
        # Towards node 0 from "node 5": accepted, nothing to move; numa_maps read around it.
        moved = migrate_memory(w["pid"], 0, two, read=reads(NodeMemory({5: 4096}, {5: 4096}), NodeMemory({0: 4096})))
        assert moved.ok and moved.pages_not_moved == 0 and moved.moved_bytes == 4096
    with pytest.raises(OSError) as gone:
        OsMemory().migrate(w["pid"], frozenset({0}), frozenset({0}))
    assert gone.value.errno == errno.ESRCH


def test_node_masks_are_the_kernel_s_bitmaps() -> None:
    mask, maxnode = node_mask({0, 3, 65})
    assert list(mask) == [0b1001, 0b10] and maxnode == 129  # two 64-bit words; maxnode counts bits + 1
    empty, one = node_mask(())
    assert list(empty) == [0] and one == 65


# -- recorded multi-node machines: fake system calls --------------------------------------


def test_grace_hopper_pages_move_from_the_other_grace_to_the_new_cpus_node(tmp_path: Path, gh200: Topology) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    affinity = FakeAffinity(gh200.online_cpus)
    memory_ops = FakeMemory(lambda: 3)
    before = NodeMemory({0: 900 * MIB, 1: 100 * MIB, 2: 80 * MIB}, {0: 900 * MIB, 1: 100 * MIB})
    after = NodeMemory({0: 12 * MIB, 1: 988 * MIB, 2: 80 * MIB}, {0: 12 * MIB, 1: 988 * MIB})
    node1 = frozenset(range(72, 144))
    with workload("--sleepers", "2") as w:
        request = MoveMemory(gh200, ops=memory_ops, read=reads(before, after))
        result = pin(w["pid"], node1, ops=affinity, journal=journal, move_memory=request)
        assert result.ok and result.memory is not None and result.memory.ok
        # Every thread first, then the memory: node 0 (the other Grace) to node 1. The GPU
        # memory nodes 2 and 10 and the empty nodes are never a source.
        assert set(affinity.masks) == tids(w["pid"]) and set(affinity.masks.values()) == {node1}
        assert memory_ops.calls == [(w["pid"], frozenset({0}), frozenset({1}))]
        assert result.memory.message == (
            "moved 888 MiB from node 0 to node 1; 3 page(s) could not be moved (locked, busy, or node full)"
        )
        assert result.journal_id is not None
        entry = journal.get(result.journal_id)
        assert entry.state == "applied"
        assert entry.memory == MemoryRecord(
            pid=w["pid"],
            from_nodes=(0,),
            to_node=1,
            state="moved",
            bytes_before=((0, 900 * MIB), (1, 100 * MIB), (2, 80 * MIB)),
            bytes_after=((0, 12 * MIB), (1, 988 * MIB), (2, 80 * MIB)),
            pages_not_moved=3,
        )
        assert entry.memory.moved_bytes == 888 * MIB
        # Undo puts the masks back and says the memory stays.
        undone = undo(journal, w["pid"], ops=affinity)
        assert undone.ok and set(affinity.masks.values()) == {gh200.online_cpus}
        assert undone.notes == (
            f"{entry.id}: 888 MiB of PID {w['pid']}'s memory moved to node 1 by the pin stays there"
            " (undo puts back thread masks, not pages)",
        )
        assert undo_text(undone)[-1].startswith("memory: ")
    assert len(memory_ops.calls) == 1  # undo never moved memory


def test_the_intent_is_journaled_before_the_system_call(tmp_path: Path, gh200: Topology) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    seen: list[MemoryRecord | None] = []

    def look() -> int:
        [entry] = Journal(journal.path).entries()  # another reader, from the file
        seen.append(entry.memory)
        return 0

    with workload() as w:
        request = MoveMemory(gh200, ops=FakeMemory(look), read=reads(None, None))
        result = pin(
            w["pid"], frozenset(range(0, 72)), ops=FakeAffinity(gh200.online_cpus), journal=journal, move_memory=request
        )
    assert result.ok
    assert seen == [MemoryRecord(w["pid"], (1,), 0, "pending")]


def test_a_refused_migration_leaves_every_thread_pinned_and_says_why(tmp_path: Path, gh200: Topology) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    affinity = FakeAffinity(gh200.online_cpus)

    def refuse() -> int:
        raise OSError(errno.ENOMEM, os.strerror(errno.ENOMEM))

    with workload("--sleepers", "3") as w:
        # numa_maps before, and after the refusal (nothing moved)
        request = MoveMemory(
            gh200, ops=FakeMemory(refuse), read=reads(NodeMemory({1: MIB}, {1: MIB}), NodeMemory({1: MIB}, {1: MIB}))
        )
        result = pin(w["pid"], frozenset(range(0, 72)), ops=affinity, journal=journal, move_memory=request)
        assert result.ok and result.memory is not None and not result.memory.ok
        assert result.memory.message == "memory not moved: node 0 has not enough free memory"
        assert set(affinity.masks) == tids(w["pid"])  # all pinned, none half way
        assert set(affinity.masks.values()) == {frozenset(range(0, 72))}
    assert result.journal_id is not None
    entry = journal.get(result.journal_id)
    assert entry.state == "applied" and entry.memory is not None
    assert (entry.memory.state, entry.memory.error) == ("failed", result.memory.message)


def test_an_interrupted_migration_puts_every_thread_back(tmp_path: Path, gh200: Topology) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    affinity = FakeAffinity(gh200.online_cpus)

    def interrupt() -> int:
        raise KeyboardInterrupt

    with workload("--sleepers", "3") as w:
        request = MoveMemory(gh200, ops=FakeMemory(interrupt), read=reads(None))
        with pytest.raises(KeyboardInterrupt):
            pin(w["pid"], frozenset(range(0, 72)), ops=affinity, journal=journal, move_memory=request)
        assert set(affinity.masks) == tids(w["pid"])
        assert set(affinity.masks.values()) == {gh200.online_cpus}  # every one back, none left pinned
    [entry] = journal.entries()
    assert entry.state == "rolled-back"


def test_cpus_of_two_nodes_are_refused_before_anything_changes(tmp_path: Path, gh200: Topology) -> None:
    affinity = FakeAffinity(gh200.online_cpus)
    memory_ops = FakeMemory()
    with workload() as w:
        result = pin(
            w["pid"],
            {0, 72},
            ops=affinity,
            journal=Journal(tmp_path / "journal.jsonl"),
            move_memory=MoveMemory(gh200, ops=memory_ops),
        )
    assert not result.ok and not result.changed and result.memory is None
    assert result.error == "moving memory needs CPUs of one NUMA node: CPUs 0,72 span NUMA nodes 0-1"
    assert affinity.masks == {} and memory_ops.calls == []


def test_a_dry_run_says_what_would_move_and_moves_nothing(tmp_path: Path, gh200: Topology) -> None:
    affinity = FakeAffinity(gh200.online_cpus)
    memory_ops = FakeMemory()
    before = fixture("lkml-thp-migration-2node.after")  # 18602 pages on node 0, 6998 on node 1
    with workload() as w:
        request = MoveMemory(gh200, ops=memory_ops, read=reads(before))
        result = pin(w["pid"], frozenset(range(72, 144)), ops=DryRunAffinity(affinity), move_memory=request)
    assert result.ok and result.dry_run and result.memory is not None and result.memory.dry_run
    assert result.memory.message == "would move the memory on node 0 (73 MiB there now) to node 1"
    assert memory_ops.calls == [] and affinity.masks == {}


def test_a_four_node_machine_moves_from_every_other_node() -> None:
    four = Topology.build(
        source="test",
        online_cpus={A, B},
        allowed_cpus={A, B},
        numa_nodes=[
            NumaNode(n, frozenset({A}) if n == 0 else frozenset({B}) if n == 3 else frozenset({90 + n}))
            for n in range(4)
        ],
        packages=(),
        cores=(),
        l3_groups=(),
        gpus=(),
    )
    memory_ops = FakeMemory()
    before = fixture("linux-doc-4node")  # pages on nodes 0 and 3 (the kernel's documentation)
    with workload() as w:
        result = migrate_memory(w["pid"], 3, four, ops=memory_ops, read=reads(before, before))
    assert memory_ops.calls == [(w["pid"], frozenset({0, 1, 2}), frozenset({3}))]
    assert result.from_nodes == (0, 1, 2) and result.moved_bytes == 0


def test_memory_already_home_or_a_pid_reused_is_not_moved(gh200: Topology) -> None:
    memory_ops = FakeMemory()
    with workload() as w:
        home = migrate_memory(w["pid"], 1, gh200, ops=memory_ops, read=reads(NodeMemory({1: MIB, 2: MIB})))
        assert home.ok and not home.attempted and home.message == "its memory is already on node 1: nothing to move"
        reused = migrate_memory(w["pid"], 1, gh200, start_ticks=1, ops=memory_ops)
        assert not reused.ok and reused.message == f"PID {w['pid']} exited: no memory moved"
    assert memory_ops.calls == []


def test_the_journal_s_memory_record_round_trips_and_bad_ones_are_refused(tmp_path: Path) -> None:
    from affmon.actions.journal_records import JournalEntry

    record = MemoryRecord(7, (0, 2), 1, "moved", ((0, 10), (1, 5)), ((1, 15),), 0, None)
    entry = JournalEntry("x", 1.0, 7, 100, frozenset({1}), memory=record)
    assert decode(json.loads(json.dumps(encode(entry)))) == entry
    assert "memory" not in encode(JournalEntry("y", 1.0, 7, 100, frozenset({1})))  # old shape kept
    raw = encode(entry)
    raw["memory"]["state"] = "teleported"
    with pytest.raises(ValueError, match="unknown memory state 'teleported'"):
        decode(raw)


def test_dry_run_memory_records_what_it_would_ask() -> None:
    ops = DryRunMemory()
    assert ops.migrate(1, frozenset({0}), frozenset({1})) == 0
    assert ops.would_move == [(1, frozenset({0}), frozenset({1}))]
