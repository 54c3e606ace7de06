"""What the demo banner says: ``affmon --demo`` replays the recording in ``affmon/data``
(a ResNet-18 job beside 16 CPU hogs of another tenant on one H200; 20 s in,
``affmon pin --suggest --with-children --isolate`` moved the hogs off the job's CPUs).

The banner names what is planted, says when the pin happened (the first view in which a
rank's mask differs from the one before: read from the recording, not from a sample
number), and at the end how to play it again. Pure: it takes the view's facts."""

from __future__ import annotations

from dataclasses import dataclass

from affmon.core import fmt
from affmon.core.model.cpuset import CpuSet


@dataclass(frozen=True)
class DemoState:
    """``rank``: the job's root PID (None until one is seen) and ``mask`` its mask in the
    last view; ``pinned_to``: its mask after the pin, once a change was seen;
    ``finished``: the recording has no more samples."""

    rank: int | None = None
    mask: CpuSet | None = None
    pinned_to: CpuSet | None = None
    finished: bool = False


def next_state(state: DemoState, rank: int | None, mask: CpuSet | None, finished: bool) -> DemoState:
    """The state after one view (``rank``: the first job root, ``mask`` its mask): the
    first rank seen is followed; a change of its mask is the pin."""
    if state.rank is None or rank != state.rank:
        return DemoState(rank, mask, state.pinned_to if rank == state.rank else None, finished)
    pinned = state.pinned_to
    if state.mask is not None and mask is not None and mask != state.mask:
        pinned = mask
    return DemoState(rank, mask, pinned, finished)


def demo_banner(state: DemoState) -> str:
    """One or two lines at 80 columns."""
    rank = f"rank {state.rank}" if state.rank is not None else "the training rank"
    if state.finished:
        return f"DEMO ended: after the pin {rank}'s findings cleared and its wait fell. R plays it again, q quits"
    if state.pinned_to is not None:
        return (
            f"DEMO: `affmon pin --isolate` just put {rank} on CPUs {fmt.cpus(state.pinned_to)} and moved "
            "the hogs off them: watch WAIT fall and the findings clear"
        )
    return (
        f"DEMO, recorded on an H200: {rank} trains beside 16 CPU hogs of another tenant (STARV, CONTEND, "
        "GPUSTV). Select it, press r for affmon's plan"
    )
