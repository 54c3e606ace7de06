"""The planner's inputs that ``affmon tune``'s candidates rest on: a measured need in CPUs,
CPU-only training peers, and the same noise floor as the findings'."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from affmon.core.plan.planner import MOVE_OFF_MIN_CPU_PERCENT, Occupant, suggest
from affmon.core.rules.base import DEFAULT_THRESHOLDS
from tests.helpers.planning import G4, IDLE_PEERS, cpus, hog, small_machine, suggest_g4, xml


def test_a_measured_need_sizes_the_window_instead_of_demand_times_headroom():
    hogs = [hog(900 + c, str(c)) for c in range(4, 24)]
    # demand 2.0 x 1.25 would make 3 CPUs (2 cores); a measured need of 8 CPUs makes 4 cores.
    s = suggest(
        xml(G4),
        gpu_bus_ids=("0000:35:00.0",),
        allowed_cpus=None,
        current_cpus=frozenset(),
        demand_cpus=2.0,
        others=hogs,
        need_cpus=8,
    )
    assert s.cpus == cpus("0-3,48-51")
    assert not any("want" in w or "needs" in w for w in s.warnings)


def test_a_need_beyond_the_domain_is_said_once_in_the_planners_words():
    s = suggest(
        xml(G4),
        gpu_bus_ids=("0000:35:00.0",),
        allowed_cpus=None,
        current_cpus=frozenset(),
        demand_cpus=10.0,
        others=IDLE_PEERS,
        need_cpus=20,
    )
    assert len(s.cpus) == 12
    assert [w for w in s.warnings if "needs" in w] == [
        "It needs 20 CPUs but the suggestion has only 12: its domain has no more."
    ]
    assert not any("want" in w for w in s.warnings)


def test_others_on_every_allowed_cpu_are_not_offered_a_move_to_nowhere():
    topology = small_machine(nodes={0: "0-1"}, smt=1, gpus=[])
    s = suggest(
        topology,
        gpu_bus_ids=(),
        allowed_cpus=None,
        current_cpus=cpus("0"),
        demand_cpus=2.0,
        others=[hog(900, "0-1")],
        need_cpus=2,
    )
    assert s.cpus == cpus("0-1") and s.move_off == ()
    assert any("nowhere to move them" in w for w in s.warnings)
    assert not any("--isolate" in w for w in s.warnings)


def test_a_cpu_only_training_job_holding_cpus_is_a_peer():
    # Two CPU-only training jobs on one 48-CPU pool: the other holds its first half.
    other = Occupant(101, "python", frozenset(), 0.0, True, (), cpus("0-11,48-59"))
    s = suggest_g4(gpu_bus_ids=(), allowed_cpus=cpus("0-23,48-71"), others=[other])
    assert not any("No other training process" in r for r in s.reasons)
    assert any("among 2 training processes" in r for r in s.reasons)
    assert not s.cpus & cpus("0-11,48-59")
    assert not any("not held by other training processes" in w for w in s.warnings)


def test_the_planners_noise_floor_is_the_findings_one():
    assert DEFAULT_THRESHOLDS.neighbour_floor_percent == MOVE_OFF_MIN_CPU_PERCENT


@given(st.floats(min_value=DEFAULT_THRESHOLDS.neighbour_floor_percent, max_value=100.0))
def test_a_contender_advice_hands_over_is_moved_however_light(percent):
    # Hogs on every core but the first four; the need (8 CPUs) does not fit in the free ones.
    hogs = [hog(900 + c, str(c), percent=percent) for c in range(4, 24)]
    s = suggest(
        xml(G4),
        gpu_bus_ids=("0000:35:00.0",),
        allowed_cpus=None,
        current_cpus=frozenset(),
        demand_cpus=6.0,
        others=hogs,
        need_cpus=12,
    )
    assert s.move_off and set(s.move_off) <= {h.pid for h in hogs if h.cpus & s.cpus}
