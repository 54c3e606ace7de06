"""The H200 "clean" recording (a rank on GPU 0 with four DataLoader workers) with synthetic
loop windows and GPU utilisation put in: what the tests of the loop breakdown in the tick
and in recordings are fed."""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from affmon.core.model.loop import DATA_WAIT, GPU_WAIT, OTHER, RUNNING, UNKNOWN, LoopWindow, WorkerStats
from affmon.core.model.samples import Sample
from tests.helpers.recordings import load

RANK = 415  # on GPU 0 in the "clean" recording; 475-478 are its workers


def input_window(seconds: float = 1.0, readable: bool = True) -> LoopWindow:
    """A loop 10% on a CPU, the rest blocked, on a worker's pipe at every probe that found it blocked."""
    probes = {RUNNING: 2, DATA_WAIT: 18} if readable else {UNKNOWN: 20}
    return LoopWindow(
        RANK,
        RANK,
        seconds,
        run_ns=int(0.1 * seconds * 1e9),
        wait_ns=0,
        probes=probes,
        syscall_readable=readable,
        workers=WorkerStats(4, int(0.4 * seconds * 1e9), 0, 8, 6.0),
        rate_hz=20.0,
    )


def samples(windows: list[LoopWindow | None], util: list[int | None], gpu: bool = True) -> list[Sample]:
    """One sample more than ``windows``: sample i+1 closes the interval of window i, with GPU
    0 at ``util[i]`` percent. ``gpu`` False: the rank on no GPU (a machine without NVML)."""
    _, recorded = load("clean")
    base = recorded[0]
    out = []
    for i, (window, percent) in enumerate(zip([None, *windows], [None, *util], strict=True)):
        processes = tuple(
            dataclasses.replace(p, loop=window if p.pid == RANK else None, gpu_indices=p.gpu_indices if gpu else ())
            for p in base.processes
        )
        gpus = tuple(dataclasses.replace(g, util_percent=percent) for g in base.gpus) if gpu else ()
        out.append(dataclasses.replace(base, monotonic_s=base.monotonic_s + i, processes=processes, gpus=gpus))
    return out


windows_st = st.builds(
    LoopWindow,
    pid=st.just(RANK),
    tid=st.just(RANK),
    seconds=st.floats(0.01, 10),
    run_ns=st.one_of(st.none(), st.integers(0, 10**10)),
    wait_ns=st.one_of(st.none(), st.integers(0, 10**10)),
    probes=st.dictionaries(st.sampled_from([RUNNING, UNKNOWN, DATA_WAIT, GPU_WAIT, OTHER]), st.integers(0, 400)),
    syscall_readable=st.booleans(),
    workers=st.one_of(
        st.none(),
        st.builds(
            WorkerStats,
            st.integers(0, 16),
            st.integers(0, 10**10),
            st.integers(0, 10**10),
            st.integers(0, 64),
            st.one_of(st.none(), st.floats(0, 64)),
        ),
    ),
    rate_hz=st.just(20.0),
)
