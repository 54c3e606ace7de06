"""What one sample shows before any interval has closed, and the header every view has.

The monitor's first frame is drawn from ``first_look`` before Textual loads, so this
module loads only what that view is made of (the samples' rates, the jobs, the rows): not
the rules, the tracker or the history that ``affmon.tui.model.monitor`` keeps, which load
after the frame. ``Monitor.first_look`` is this same function.
"""

from __future__ import annotations

from types import MappingProxyType

from affmon.core.model.jobs import find_jobs
from affmon.core.model.rates import Snapshot, gpu_rates, process_rates
from affmon.core.model.samples import Sample
from affmon.core.model.topology import Topology
from affmon.sources.stream import SourceInfo
from affmon.tui.model.process_detail import detailed
from affmon.tui.model.views import HeaderView, View, core_groups, gpu_row, process_rows


def header_view(
    topology: Topology,
    info: SourceInfo,
    sample: Sample,
    *,
    watched: int,
    finished: bool,
    samples_seen: int,
    lagging_interval_s: float | None,
) -> HeaderView:
    """The header over ``sample``: the machine, the source and what the sample held."""
    position = None
    if info.total_samples is not None:
        position = f"sample {samples_seen}/{info.total_samples}"
    return HeaderView(
        host=info.host,
        cpus=len(topology.online_cpus),
        cores=len(topology.cores),
        numa_nodes=len(topology.cpu_numa_nodes),
        gpus=len(sample.gpus) or len(topology.gpus),
        interval_s=info.interval_s,
        nvml_status=info.nvml_status,
        source=info.source,
        live=info.live,
        position=position,
        finished=finished,
        wall_time_s=sample.wall_time_s,
        threads=sample.thread_count,
        processes=len(sample.processes),
        watched=watched,
        sample_cost_s=sample.duration_s,
        notice=info.notice,
        lagging_interval_s=lagging_interval_s,
    )


def first_look(
    topology: Topology,
    info: SourceInfo,
    sample: Sample,
    *,
    tick: int = 0,
    samples_seen: int = 0,
    lagging_interval_s: float | None = None,
) -> View:
    """What one sample shows before any interval has closed: the processes, their masks,
    threads and users, the GPUs' own readings; every rate unknown (None, shown as "-"), no
    findings, no history, ``measured`` False. Live, it fills the screen while the first
    interval runs instead of a blank one. ``tick``, ``samples_seen`` and
    ``lagging_interval_s`` are a monitor's own, where it has them (its header's)."""
    snapshot = Snapshot(
        topology=topology,
        previous=sample,
        current=sample,
        interval_s=0.0,
        processes=tuple(process_rates(p, None, 0.0, topology) for p in sample.processes),
        gpus=tuple(gpu_rates(g, None, 0.0, topology) for g in sample.gpus),
    )
    jobs = find_jobs(snapshot)
    samples = {p.pid: p for p in sample.processes}
    processes = tuple(detailed(r, None, samples.get(r.pid)) for r in process_rows(snapshot, jobs, ()))
    header = header_view(
        topology,
        info,
        sample,
        watched=sum(1 for p in processes if p.watched),
        finished=False,
        samples_seen=samples_seen,
        lagging_interval_s=lagging_interval_s,
    )
    return View(
        tick=tick,
        header=header,
        gpus=tuple(gpu_row(g) for g in snapshot.gpus),
        processes=processes,
        findings=(),
        jobs=tuple(j.pid for j in jobs),
        training_jobs=frozenset(j.pid for j in jobs if j.training),
        cores=core_groups(snapshot, jobs),
        gpu_history=MappingProxyType({}),
        process_history=MappingProxyType({}),
        snapshot=snapshot,
        measured=False,
    )
