"""The loop probe beside the per-tick sampler: which loops to probe, and their windows
handed to each sample.

``LoopProbes.attach`` takes each sample as the sampler made it and returns it with every
probed process's ``ProcessSample.loop`` set to the window since the previous sample, then
starts probing the loops of processes that became ranks (``loop_targets``) and drops those
that exited. A loop first seen in a sample is probed from then on: its first window comes
with the next sample. Identity is the PID with the main thread's start time: a reused PID
is a new process and starts a new sampler.

``close`` stops the watcher's thread and joins it; the thread is a daemon, so a caller that
never closes still exits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from affmon.collect.loop import DEFAULT_RATE_HZ, LoopSampler, LoopWatcher
from affmon.core.model.samples import Sample
from affmon.core.rules.loop_report import MAX_LOOPS, loop_targets


class LoopProbes:
    """Probes the loop thread of each rank and each of ``pids`` under ``root``."""

    def __init__(
        self,
        pids: tuple[int, ...] = (),
        root: str = "/",
        rate_hz: float = DEFAULT_RATE_HZ,
        most: int = MAX_LOOPS,
        make_sampler: Callable[[int, str], LoopSampler] | None = None,
    ) -> None:
        self.pids = pids
        self.root = root
        self.most = most
        self._make = make_sampler or (lambda pid, root: LoopSampler(pid, root=root))
        self._samplers: dict[int, LoopSampler] = {}
        self.watcher = LoopWatcher([], rate_hz=rate_hz)
        self._closed = False

    def attach(self, sample: Sample) -> Sample:
        """``sample`` with the loop windows of the interval it closes; the probes then follow
        the processes it holds."""
        if self._closed:
            return sample
        windows = {w.pid: w for w in self.watcher.windows()}
        starts = {p.pid: p.start_ticks for p in sample.processes}
        kept = {}
        for pid, sampler in self._samplers.items():
            if pid in windows and starts.get(pid) == sampler.start_ticks:
                kept[pid] = sampler
        targets = loop_targets(sample, self.pids, self.most)
        samplers = {pid: kept[pid] if pid in kept else self._make(pid, self.root) for pid in targets}
        dropped = [s for s in self._samplers.values() if all(s is not t for t in samplers.values())]
        self._samplers = samplers
        self.watcher.set_samplers(samplers.values())
        for sampler in dropped:  # the watcher probes none of them once set_samplers returned
            sampler.close()
        if samplers:
            self.watcher.start()
        if not kept:
            return sample
        return replace(
            sample,
            processes=tuple(replace(p, loop=windows[p.pid]) if p.pid in kept else p for p in sample.processes),
        )

    def close(self) -> None:
        self._closed = True
        self.watcher.stop()
        for sampler in self._samplers.values():
            sampler.close()
