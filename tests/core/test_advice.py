"""Suggestions drawn from recordings of a real job: who must move off, who is a peer."""

import gzip
import itertools
from pathlib import Path

from affmon.core.model.jobs import find_jobs
from affmon.core.model.rates import Snapshot, make_snapshot
from affmon.core.plan.advice import occupants, suggest_for_job, training_pids
from affmon.core.recording.format import read_recording

RECORDINGS = Path(__file__).parent.parent / "fixtures" / "recordings"


def last_snapshot(name: str) -> Snapshot:
    with gzip.open(RECORDINGS / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        header, samples = read_recording(f, name)
        pairs = list(itertools.pairwise(samples))
    return make_snapshot(*pairs[-1], header.topology)


def hog_pids(snap: Snapshot) -> set[int]:
    return {p.sample.pid for p in snap.processes if p.sample.cmdline and "while True" in p.sample.cmdline}


def test_every_busy_hog_must_move_not_only_those_seen_on_the_cpus():
    snap = last_snapshot("hogs")
    (job,) = find_jobs(snap)
    hogs = hog_pids(snap)
    assert len(hogs) == 16
    assert not hogs & training_pids(snap)  # python, but not on a GPU: another tenant
    s = suggest_for_job(job, snap)
    assert set(s.move_off) == hogs  # they may all run anywhere, so all of them must move
    assert 5 <= len(s.cpus) <= 8  # sized to the job's demand with headroom, not all 16 CPUs
    assert any("pin --isolate" in w for w in s.warnings)


def test_a_training_peer_is_shared_with_not_moved():
    snap = last_snapshot("overlap")
    a, b = find_jobs(snap)
    assert {a.pid, b.pid} | {m.sample.pid for m in a.members + b.members} <= training_pids(snap)
    peers = [o for o in occupants(snap, a.pids) if o.pid in b.pids]
    assert peers and all(o.training for o in peers)
    s = suggest_for_job(a, snap)
    assert not set(s.move_off) & b.pids


def test_a_healthy_job_alone_keeps_the_whole_machine():
    snap = last_snapshot("clean")
    (job,) = find_jobs(snap)
    s = suggest_for_job(job, snap)
    assert s.cpus == snap.topology.allowed_cpus and s.move_off == ()
