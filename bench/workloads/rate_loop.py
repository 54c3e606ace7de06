"""The measured loop of the GPU scenario jobs (bench/workloads/train_job.py, bench/workloads/ddp_job.py),
without torch, so tests can run it: call ``step`` (which returns the samples it trained)
for ``seconds``, printing ``RATE [label ]t=... samples_per_s=...`` every ``report_every``
seconds after ``sync`` (the job's torch.cuda.synchronize, so a window counts finished
work only)."""

from __future__ import annotations

import time
from collections.abc import Callable


def measured_loop(
    step: Callable[[], int],
    seconds: float,
    report_every: float,
    sync: Callable[[], None],
    label: str = "",
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[int, float]:
    """(samples trained, seconds elapsed) after ``sync``."""
    prefix = f"{label} " if label else ""
    done, start = 0, clock()
    window_done, window_start = 0, start
    while clock() - start < seconds:
        n = step()
        done += n
        window_done += n
        now = clock()
        if report_every and now - window_start >= report_every:
            sync()
            now = clock()
            print(
                f"RATE {prefix}t={now - start:.1f} samples_per_s={window_done / (now - window_start):.1f}", flush=True
            )
            window_done, window_start = 0, now
    sync()
    return done, clock() - start
