"""One definition of a training job (``Job.training``), said the same way everywhere: a
watched process that is not training (a plain script named by ``--pid``) is a process in
the core map's legend, in ``diagnose``'s count and in the ``r`` dialog, never a job; and a
dialog that has nobody to move names who is there rather than saying nothing is. On
synthetic samples of a two-CPU machine: a training process and a plain watched script,
both busy on CPU 0."""

from __future__ import annotations

from affmon.commands.diagnose import findings_text
from affmon.core.plan.advice import propose_pin
from affmon.core.rules.base import RuleInputs
from affmon.core.rules.evaluate import evaluate
from affmon.sources.stream import SourceInfo
from affmon.tui.model.monitor import Monitor
from affmon.tui.palette import Palette
from affmon.tui.screens import proposal_text
from affmon.tui.widgets.cores import core_map_text
from tests.helpers.sizing import Spec, machine, samples_of

PALETTE = Palette("red", "yellow", "green", "cyan", "grey", "dim", "white", ("blue", "magenta"))
CPU0 = frozenset({0})
BOTH = frozenset({0, 1})

# A training process (libtorch mapped: training) and a plain python script named by --pid
# (watched, not training), each with two busy threads queueing on CPU 0.
SPECS: list[Spec] = [
    (100, 1, "python3", True, True, False, [(100, 0, CPU0, [(400, 500)] * 3), (101, 0, CPU0, [(400, 500)] * 3)]),
    (200, 1, "python3", True, False, False, [(200, 0, CPU0, [(400, 500)] * 3), (201, 0, CPU0, [(400, 500)] * 3)]),
]


def views():
    topology = machine(2)
    m = Monitor(topology, SourceInfo("h", None, 1.0, "test"))
    out = [v for s in samples_of(SPECS) if (v := m.feed(s)) is not None]
    return topology, out


def test_the_legend_the_count_and_the_dialog_call_the_script_a_process():
    topology, vs = views()
    view = vs[-1]
    assert set(view.jobs) == {100, 200} and view.training_jobs == frozenset({100})
    colors = {pid: PALETTE.job(i) for i, pid in enumerate(view.jobs)}
    legend = core_map_text(view.cores, PALETTE, colors, None, 120, training=view.training_jobs).plain
    assert "job 100" in legend and "process 200" in legend and "job 200" not in legend
    # diagnose counts the same way
    snap = view.snapshot
    first = findings_text(evaluate(snap, RuleInputs(topology)), snap, 3).splitlines()[0]
    assert first.startswith("watched 1 training job (1 process), and 1 other watched process"), first
    # the r dialog on the script says what it is
    pr = propose_pin(snap, 200)
    assert pr is not None and not pr.training
    text = proposal_text(pr, isolate=True, with_children=True, p=PALETTE).plain
    assert "(a watched process, not training)" in text and "training rank" not in text


def test_a_dialog_with_nobody_to_move_names_who_is_there():
    _, vs = views()
    snap = vs[-1].snapshot
    pr = propose_pin(snap, 100)
    assert pr is not None
    text = proposal_text(pr, isolate=True, with_children=True, p=PALETTE).plain
    # The suggestion is both CPUs, every CPU either may use: nowhere to move the script to.
    assert pr.suggestion.cpus == BOTH and pr.suggestion.stuck == (200,) and not pr.move_off
    assert "nobody to move: the busy processes there (200) have nowhere else to go" in text
    assert "nothing else busy runs on those CPUs" not in text
