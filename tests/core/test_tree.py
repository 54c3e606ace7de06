"""The process tree (``affmon.core.model.tree``): ancestors, descendants and the nearest root
above a process, on a tree built by hand, on loops a reused PID can make in ``/proc``, and
on parents missing from the map; and each walk it replaced, kept here as it was, giving
what its caller now gives on the H200 recordings and on those recordings with their
parents redrawn (loops included)."""

from __future__ import annotations

import signal
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from itertools import islice

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from affmon.core.model.jobs import find_jobs
from affmon.core.model.rates import ProcessRates, Snapshot, make_snapshot
from affmon.core.model.samples import ProcessSample, Sample
from affmon.core.model.tree import ancestors, descendants, root_of
from affmon.core.plan.advice import training_pids
from affmon.core.plan.audit_ranks import _descendants, find_ranks
from tests.helpers.recordings import load

#       1            30 (its parent, 99, not in the map: an orphan)
#     /   \           |
#   10     20        31
#  /  \     |
# 11   13  21
# |
# 12
TREE = {1: 0, 10: 1, 11: 10, 12: 11, 13: 10, 20: 1, 21: 20, 30: 99, 31: 30}


@contextmanager
def ends_within(seconds: float) -> Iterator[None]:
    """Fail, rather than hang, when the block runs longer than ``seconds``."""

    def stop(signum: int, frame: object) -> None:
        raise TimeoutError(f"the walk did not end within {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_ancestors_are_nearest_first_and_end_where_the_map_ends() -> None:
    assert list(ancestors(12, TREE)) == [11, 10, 1]  # 1's parent, 0, is not in the map
    assert list(ancestors(21, TREE)) == [20, 1]
    assert list(ancestors(1, TREE)) == []
    assert list(ancestors(31, TREE)) == [30]  # an orphan: its parent 99 was not read
    assert list(ancestors(77, TREE)) == []  # a PID not in the map has none known


def test_ancestors_are_walked_only_as_far_as_they_are_read() -> None:
    class Upto(Mapping[int, "int | None"]):
        """TREE, but asking 10 for its parent fails."""

        def __getitem__(self, pid: int) -> int | None:
            if pid == 10:
                raise AssertionError("walked past what was read")
            return TREE[pid]

        def __contains__(self, pid: object) -> bool:
            return pid in TREE

        def __iter__(self) -> Iterator[int]:
            return iter(TREE)

        def __len__(self) -> int:
            return len(TREE)

    assert list(islice(ancestors(12, Upto()), 2)) == [11, 10]
    with pytest.raises(AssertionError):
        list(ancestors(12, Upto()))


def test_descendants_take_the_roots_and_everything_below_them() -> None:
    assert descendants([10], TREE) == {10, 11, 12, 13}
    assert descendants([1], TREE) == {1, 10, 11, 12, 13, 20, 21}
    assert descendants([11, 20], TREE) == {11, 12, 20, 21}
    assert descendants([12], TREE) == {12}
    assert descendants([99], TREE) == {99, 30, 31}  # a root not in the map: its children still count
    assert descendants([], TREE) == set()


def test_root_of_is_the_nearest_root_at_or_above() -> None:
    assert root_of(12, {10}, TREE) == 10
    assert root_of(12, {10, 11}, TREE) == 11  # the nearest
    assert root_of(10, {10, 1}, TREE) == 10  # itself
    assert root_of(13, {1}, TREE) == 1
    assert root_of(21, {10}, TREE) is None  # another branch
    assert root_of(31, {1}, TREE) is None  # the orphan's walk ends at 30
    assert root_of(31, {99}, TREE) is None  # 99 is no process of the map: no walk reaches it


LOOP = {5: 6, 6: 7, 7: 5, 8: 7, 4: 4}  # 5 -> 6 -> 7 -> 5 with 8 below 7; 4 its own parent


def test_a_loop_ends_every_walk() -> None:
    with ends_within(5.0):
        assert list(ancestors(8, LOOP)) == [7, 5, 6]
        assert list(ancestors(5, LOOP)) == [6, 7]
        assert list(ancestors(4, LOOP)) == []
        assert descendants([7], LOOP) == {5, 6, 7, 8}
        assert descendants([8], LOOP) == {8}
        assert descendants([4], LOOP) == {4}
        assert root_of(8, {1}, LOOP) is None
        assert root_of(4, {1}, LOOP) is None
        assert root_of(8, {6}, LOOP) == 6


# -- the walks the tree replaced, as they were ------------------------------------------


def old_sampler_descendants(roots: Sequence[int], pairs: Sequence[tuple[int, int]]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, ppid in pairs:
        children.setdefault(ppid, []).append(pid)
    found = set(roots)
    stack = list(found)
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def old_find_jobs(snapshot: Snapshot) -> list[tuple[int, tuple[int, ...]]]:
    """``find_jobs`` with its own ``root_of`` and ``_under``: (root, members) of each job."""
    watched = {p.sample.pid: p for p in snapshot.processes if p.sample.watched and not p.sample.kernel}

    def under(pid: int, roots: set[int]) -> bool:
        seen: set[int] = set()
        up: int | None = pid
        while up is not None and up in watched and up not in seen:
            if up in roots:
                return True
            seen.add(up)
            up = watched[up].sample.ppid
        return False

    roots = {pid for pid, p in watched.items() if p.sample.gpu_indices}
    if roots:
        ranked = {pid for pid in watched if under(pid, roots)}
        rest = {pid: p for pid, p in watched.items() if pid not in ranked and not p.sample.training}
        roots |= {pid for pid, p in rest.items() if (p.sample.ppid or -1) not in rest}
    else:
        roots = {pid for pid, p in watched.items() if (p.sample.ppid or -1) not in watched}

    def root_of(p: ProcessRates) -> int | None:
        seen: set[int] = set()
        while p.sample.pid not in roots:
            seen.add(p.sample.pid)
            parent = watched.get(p.sample.ppid or -1)
            if parent is None or parent.sample.pid in seen:
                return None
            p = parent
        return p.sample.pid

    groups: dict[int, list[int]] = {}
    for p in watched.values():
        root = root_of(p)
        if root is not None:
            groups.setdefault(root, []).append(p.sample.pid)
    return [(root, tuple(sorted(members, key=lambda m: (m != root, m)))) for root, members in sorted(groups.items())]


def old_training_pids(snapshot: Snapshot) -> frozenset[int]:
    on_gpu = {p.sample.pid for p in snapshot.processes if p.sample.gpu_indices}
    if not on_gpu:
        return frozenset(p.sample.pid for p in snapshot.processes if p.sample.training)
    parent = {p.sample.pid: p.sample.ppid for p in snapshot.processes}
    found = set(on_gpu)
    for pid in parent:
        seen: set[int] = set()
        up: int | None = pid
        while up is not None and up not in seen and up not in found:
            seen.add(up)
            up = parent.get(up)
        if up in found:
            found |= seen
    return frozenset(found)


def old_ancestors(pid: int, by_pid: Mapping[int, ProcessSample]) -> list[int]:
    chain: list[int] = []
    seen = {pid}
    parent = by_pid[pid].ppid
    while parent is not None and parent in by_pid and parent not in seen:
        chain.append(parent)
        seen.add(parent)
        parent = by_pid[parent].ppid
    return chain


def old_find_ranks(sample: Sample, within: Sequence[int] = ()) -> list[int]:
    """``find_ranks`` with no environments read: the ranks are the watched GPU processes."""
    by_pid = {p.pid: p for p in sample.processes}
    candidates = {p.pid for p in sample.processes if p.watched and not p.kernel and p.gpu_indices}
    wanted = set(within)
    ranks = []
    for pid in sorted(candidates):
        chain = old_ancestors(pid, by_pid)
        if candidates.intersection(chain):
            continue
        if wanted and not wanted.intersection([pid, *chain]):
            continue
        ranks.append(pid)
    return ranks


def old_audit_descendants(pid: int, sample: Sample) -> tuple[ProcessSample, ...]:
    children: dict[int, list[ProcessSample]] = {}
    for p in sample.processes:
        if p.ppid is not None:
            children.setdefault(p.ppid, []).append(p)
    found: list[ProcessSample] = []
    seen = {pid}
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child.pid not in seen:
                seen.add(child.pid)
                found.append(child)
                todo.append(child.pid)
    return tuple(sorted(found, key=lambda p: p.pid))


# -- the callers, as before: on the recordings, then with their parents redrawn ------------

NAMES = ("clean", "ddp2_fixed", "overlap", "hogs", "cpu_only", "input_bound")


@dataclass(frozen=True)
class Case:
    name: str
    previous: Sample
    current: Sample


def case(name: str, parents: Mapping[int, int | None] | None = None) -> Case:
    _, samples = load(name)

    def redrawn(s: Sample) -> Sample:
        if not parents:
            return s
        return replace(s, processes=tuple(replace(p, ppid=parents.get(p.pid, p.ppid)) for p in s.processes))

    return Case(name, redrawn(samples[-2]), redrawn(samples[-1]))


def check_callers_as_before(c: Case) -> None:
    header, _ = load(c.name)
    snapshot = make_snapshot(c.previous, c.current, header.topology)
    sample = c.current
    assert [(j.pid, tuple(m.sample.pid for m in j.members)) for j in find_jobs(snapshot)] == old_find_jobs(snapshot)
    assert training_pids(snapshot) == old_training_pids(snapshot)
    pairs = [(p.pid, p.ppid) for p in sample.processes if p.ppid is not None]
    pids = [p.pid for p in sample.processes]
    for roots in ([1], pids[:1], pids[-3:], [p.pid for p in sample.processes if p.gpu_indices]):
        assert descendants(roots, dict(pairs)) == old_sampler_descendants(roots, pairs)
    on_gpu = [p.pid for p in sample.processes if p.gpu_indices]
    for within in ((), (1,), tuple(on_gpu[:1]), tuple(pids[:5])):
        assert find_ranks(sample, {}, within) == old_find_ranks(sample, within)
    for pid in [*on_gpu, 1, *pids[:5]]:
        assert _descendants(pid, sample) == old_audit_descendants(pid, sample)


@pytest.mark.parametrize("name", NAMES)
def test_each_former_walk_gives_what_its_caller_gives_on_a_recording(name: str) -> None:
    c = case(name)
    check_callers_as_before(c)
    # and the recording holds what the walks are for: a job with members below its root
    header, _ = load(name)
    jobs = find_jobs(make_snapshot(c.previous, c.current, header.topology))
    assert jobs and any(len(j.members) > 1 for j in jobs)


def test_the_ddp_recording_s_ranks_are_found_below_torchrun() -> None:
    c = case("ddp2_fixed")
    parents = {p.pid: p.ppid for p in c.current.processes}
    ranks = find_ranks(c.current, {})
    assert ranks == [904, 905]  # two ranks, each below the torchrun agent 885
    for rank in ranks:
        assert list(ancestors(rank, parents))[:2] == [885, 674]
        assert {d.pid for d in _descendants(rank, c.current)} == descendants([rank], parents) - {rank}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(NAMES))
def test_each_former_walk_gives_what_its_caller_gives_with_parents_redrawn_loops_and_all(
    data: st.DataObject, name: str
) -> None:
    _, samples = load(name)
    watched = sorted({p.pid for p in samples[-1].processes if p.watched})
    anyone = sorted({p.pid for p in samples[-1].processes})
    parents = data.draw(
        st.dictionaries(
            st.sampled_from(watched),
            st.one_of(st.sampled_from(watched), st.sampled_from(anyone), st.sampled_from([1, 0, 99_999]), st.none()),
            max_size=8,
        )
    )
    with ends_within(20.0):
        check_callers_as_before(case(name, parents))
