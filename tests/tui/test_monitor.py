"""The TUI's pure model on the H200 recordings: views, history, jobs, the core map,
findings on rows, and the pin proposal, without a terminal."""

from __future__ import annotations

import dataclasses

import pytest

from affmon.core.model.samples import PcieLink, Sample
from affmon.core.plan.advice import propose_pin
from affmon.core.rules.base import Severity, Thresholds
from affmon.sources.stream import SourceInfo
from affmon.tui.model.monitor import Monitor
from affmon.tui.model.views import View, shown_cpu, thread_rows
from tests.helpers.recordings import last_view, load, monitor, views


def test_first_sample_gives_no_view_then_one_view_per_interval():
    m = monitor("clean")
    _, samples = load("clean")
    assert m.feed(samples[0]) is None
    got = [m.feed(s) for s in samples[1:]]
    assert [v.tick for v in got if v is not None] == [1, 2, 3, 4]
    assert m.feed(samples[-1]) is None  # not newer than the last: no interval, no view


def test_header_says_where_and_what():
    h = last_view("hogs").header
    assert (h.host, h.cpus, h.cores, h.numa_nodes, h.gpus) == ("vm", 16, 16, 1, 1)
    assert h.nvml_status == "NVML: 1 GPU, driver 580.159.04"
    assert h.position == "sample 5/5" and h.source == "replay hogs"
    assert h.watched == 21 and h.threads > 200 and h.processes > 150


def test_the_hogs_job_row_carries_its_findings_and_workers_inherit_them():
    v = last_view("hogs")
    assert v.jobs == (608,)
    root = v.process(608)
    assert root is not None and root.role == "rank" and root.gpus == (0,)
    assert {m.code for m in root.findings} == {"STARVED", "CONTENDED", "GPU_STARVED"}
    assert root.worst == Severity.BAD and not any(m.inherited for m in root.findings)
    worker = v.process(659)
    assert worker is not None and worker.role == "worker" and worker.job_pid == 608
    assert worker.findings and all(m.inherited for m in worker.findings)
    assert worker.worst is None  # nothing raised on the worker itself
    hog = v.process(601)
    assert hog is not None and hog.findings == () and hog.role == "process"
    assert hog.cpu_percent is not None and hog.cpu_percent > 90


def test_a_watched_python_process_that_is_not_training_is_no_rank():
    _, samples = load("hogs")

    def untrained(s: Sample) -> Sample:
        ps = tuple(dataclasses.replace(p, training=False, gpu_indices=()) if p.pid == 608 else p for p in s.processes)
        return dataclasses.replace(s, processes=ps, gpus=tuple(dataclasses.replace(g, processes=()) for g in s.gpus))

    m = monitor("hogs")
    got = [m.feed(untrained(s)) for s in samples]
    v = [x for x in got if x is not None][-1]
    root = v.process(608)
    assert root is not None and root.role == "process" and root.gpus == ()
    assert root.findings  # still judged by the CPU rules
    assert not {m.code for m in root.findings} & {"GPU_STARVED"}


def test_a_clean_job_has_no_findings_and_no_contended_cpu():
    v = last_view("clean")
    assert v.findings == ()
    assert all(not p.findings for p in v.processes)
    assert not any(c.contended for g in v.cores for c in g.cells)


def test_findings_need_two_intervals():
    vs = views("narrow")
    assert vs[0].findings == ()  # one interval: raised nowhere yet
    assert {f.code for f in vs[1].findings} >= {"MASK_TOO_NARROW", "STARVED"}


def test_core_map_every_cpu_once_grouped_with_who_ran_there():
    v = last_view("overlap")
    (group,) = v.cores  # one NUMA node, one L3 on the H200 VM
    assert group.numa_node == 0 and group.cache_level == 3
    assert [c.cpu for c in group.cells] == list(range(16))
    assert all(c.allowed and c.gpu_local == (0,) for c in group.cells)
    used = {c.cpu for c in group.cells if c.job_pid is not None}
    assert used and used <= set(range(8))  # masks 0-5 and 2-7
    assert {c.job_pid for c in group.cells} - {None} == {830, 832}
    assert not any(c.job_pid for c in group.cells if c.cpu >= 8)
    assert any(c.contended for c in group.cells)


def test_the_core_map_and_busy_threads_keep_the_monitors_own_thresholds():
    """A monitor given other thresholds marks contended CPUs and busy threads as its rules
    judge them: raise ``other_busy_percent`` past every tenant and no CPU with one job is
    contended; raise ``busy_demand`` past 1 and no thread is busy."""
    header, samples = load("hogs")

    def last(thresholds: Thresholds) -> View:
        m = Monitor(header.topology, SourceInfo("h", None, 1.0, "hogs"), thresholds=thresholds)
        return [v for v in (m.feed(s) for s in samples) if v is not None][-1]

    plain = last(Thresholds())
    strict = last(Thresholds(other_busy_percent=1000.0, busy_demand=2.0))
    cells = [c for g in plain.cores for c in g.cells]
    lone = [c for c in cells if c.contended and len(c.job_pids) == 1]  # a job and a tenant
    assert lone, "the hogs recording has CPUs a job shares with a tenant"
    strict_cells = {c.cpu: c for g in strict.cores for c in g.cells}
    assert not any(strict_cells[c.cpu].contended for c in lone)
    job = plain.jobs[0]
    assert any(r.busy for r in thread_rows(plain.snapshot, job, plain.thresholds))
    assert not any(r.busy for r in thread_rows(strict.snapshot, job, strict.thresholds))


def test_hogs_show_as_other_processes_on_the_jobs_cpus():
    v = last_view("hogs")
    cells = [c for g in v.cores for c in g.cells]
    assert sum(c.other_percent for c in cells) > 1000  # 16 hogs, most of a CPU each
    assert any(c.contended for c in cells)
    assert all(c.busy_percent <= 100 for c in cells)


def test_history_is_bounded_and_ordered():
    vs = views("hogs", history_len=2)
    last = vs[-1]
    util = last.gpu_history[0].util_percent
    assert len(util.values) == 2 and util.t_s[-1] == 0.0 and util.t_s[0] < 0
    assert [v.gpus[0].util_percent for v in vs[-2:]] == [int(x) for x in util.values if x is not None]
    wait = last.process_history[608].wait_ratio
    assert len(wait.values) == 2 and wait.values[-1] == pytest.approx(last.process(608).wait_ratio)
    full = views("hogs")[-1]
    assert len(full.gpu_history[0].util_percent.values) == 4


def test_a_views_history_is_what_it_was_at_its_tick_however_late_it_is_read():
    """A view's process histories are built when first read (the UI reads the selected
    process's): read after later ticks, each is still the series up to its own tick, every
    watched process's, times relative to that tick."""
    vs = views("hogs")
    assert len(vs) >= 3
    for i, v in enumerate(vs):
        assert set(v.process_history) == {p.pid for p in v.processes if p.watched}
        for pid in v.process_history:
            h = v.process_history[pid]
            ticks = [u for u in vs[: i + 1] if u.process(pid) is not None]
            assert h.wait_ratio.values == tuple(u.process(pid).wait_ratio for u in ticks)
            assert h.cpu_percent.values == tuple(u.process(pid).cpu_percent for u in ticks)
            now = v.header.wall_time_s
            assert h.cpu_percent.t_s[-1] == 0.0
            assert h.cpu_percent.t_s == pytest.approx(tuple(u.header.wall_time_s - now for u in ticks), abs=0.05)
            assert v.process_history[pid] is h  # built once
    assert 999_999 not in vs[-1].process_history and vs[-1].process_history.get(999_999) is None


def test_a_process_that_exits_goes_and_one_that_appears_comes():
    header, samples = load("clean")
    m = Monitor(header.topology, monitor("clean").info)
    gone = tuple(p for p in samples[2].processes if p.pid != 478)
    views_ = [m.feed(samples[0]), m.feed(samples[1]), m.feed(dataclasses.replace(samples[2], processes=gone))]
    assert views_[1] is not None and views_[1].process(478) is not None
    after = views_[2]
    assert after is not None and after.process(478) is None and 478 not in after.process_history
    back = m.feed(samples[3])
    assert back is not None and back.process(478) is not None
    assert back.process(478).cpu_percent is None  # new again: no earlier sample to diff against


def test_a_pcie_link_below_its_maximum_is_marked():
    header, samples = load("clean")
    m = Monitor(header.topology, monitor("clean").info)

    def slow(s):
        return dataclasses.replace(
            s, gpus=tuple(dataclasses.replace(g, pcie_link=PcieLink(3, 8, 5, 16)) for g in s.gpus)
        )

    m.feed(slow(samples[0]))
    v = m.feed(slow(samples[1]))
    assert v is not None
    g = v.gpus[0]
    assert g.gen_below_max and g.width_below_max and not last_view("clean").gpus[0].gen_below_max


def test_a_lost_gpu_has_no_utilisation_in_history():
    header, samples = load("clean")
    m = Monitor(header.topology, monitor("clean").info)
    lost = dataclasses.replace(samples[1], gpus=tuple(dataclasses.replace(g, lost=True) for g in samples[1].gpus))
    m.feed(samples[0])
    v = m.feed(lost)
    assert v is not None and v.gpus[0].lost and v.gpu_history[0].util_percent.values == (None,)


def test_thread_rows_busiest_first():
    # Busiest first as the CPU% column reads (one decimal): threads that read the same keep
    # TID order rather than trading places by a difference no one can see.
    v = last_view("narrow")
    rows = thread_rows(v.snapshot, 695)
    assert len(rows) == 9 and {r.pid for r in rows} == {695}
    keys = [(-shown_cpu(r.cpu_percent), r.tid) for r in rows]
    assert keys == sorted(keys)
    assert [r.cpu_percent for r in rows] != sorted((r.cpu_percent for r in rows), reverse=True)  # ties by TID
    assert all(r.mask == frozenset({0, 1}) for r in rows)
    assert thread_rows(v.snapshot, 424242) == ()


def test_thread_rows_say_which_threads_the_rules_judge():
    """A thread that hardly wanted a CPU is not busy, whatever its wait ratio: the table
    colours wait only for busy threads (as the STARVED rule counts only those)."""
    v = last_view("narrow")
    rows = thread_rows(v.snapshot, 695)
    seconds = v.snapshot.interval_s
    for r in rows:
        wanted = (r.cpu_percent or 0) / 100 / (1 - r.wait_ratio) if r.wait_ratio not in (None, 1.0) else None
        if wanted is not None:
            assert r.busy == (wanted >= 0.20 - 1e-9), (r, seconds)
    assert any(r.busy for r in rows) and any(not r.busy for r in rows)


def test_wait_colour_only_for_busy_threads():
    from affmon.core.rules.base import Severity
    from affmon.tui.palette import Palette
    from affmon.tui.widgets.processes import wait_style

    p = Palette("red", "yellow", "green", "cyan", "grey", "dim", "white", ("blue",))
    assert p.severity(Severity.BAD) == "red"
    assert wait_style(0.5, p) == "bold red" and wait_style(0.15, p) == "yellow" and wait_style(0.05, p) == ""
    assert wait_style(0.5, p, busy=False) == "grey" and wait_style(None, p) == "grey"


def test_findings_of_a_worker_are_its_jobs():
    v = last_view("narrow")
    assert {f.code for f in v.findings_of(725)} == {f.code for f in v.findings_of(695)}
    assert v.findings_of(424242) == ()


def test_pin_proposal_for_the_narrow_job_widens_it_and_takes_the_workers():
    v = last_view("narrow")
    for pid in (695, 725):  # from the rank or from one of its workers: the job
        pr = propose_pin(v.snapshot, pid)
        assert pr is not None and pr.pid == 695
        assert pr.current_mask == frozenset({0, 1})
        assert pr.children == (724, 725, 726, 729)
        assert len(pr.suggestion.cpus) > 2
    assert propose_pin(v.snapshot, 424242) is None


def test_pin_proposal_with_hogs_names_what_isolate_would_move():
    v = last_view("hogs")
    pr = propose_pin(v.snapshot, 608)
    assert pr is not None
    assert pr.move_off and all(o.cpus & pr.suggestion.cpus for o in pr.move_off)
    assert {pid for pid, _start in pr.isolate_candidates} <= set(range(591, 607))
    starts = {p.sample.pid: p.sample.start_ticks for p in v.snapshot.processes}
    assert all(start == starts[pid] for pid, start in pr.isolate_candidates)  # each named with its start time


def test_core_map_legend_marks_gpu_local_only_where_a_cpu_is():
    from affmon.tui.model.views import CoreCell, CoreGroup
    from affmon.tui.palette import Palette
    from affmon.tui.widgets.cores import core_map_text

    p = Palette("red", "yellow", "green", "cyan", "grey", "dim", "white", ("blue",))

    def groups(local: tuple[int, ...]) -> list[CoreGroup]:
        cells = tuple(CoreCell(c, 0.0, None, (), 0.0, 0.0, (), True, local) for c in range(2))
        return [CoreGroup(0, 3, cells)]

    assert "GPU-local" not in core_map_text(groups(()), p, {}, None, 60).plain  # no GPU: no such mark
    assert "GPU-local" in core_map_text(groups((0,)), p, {}, None, 60).plain
    assert "outside mask" in core_map_text(groups(()), p, {}, None, 60).plain


def test_pin_proposal_sets_apart_what_isolate_must_leave_alone():
    """Given the user who would pin, the proposal moves only that user's processes and
    lists the others with why (the hogs in the recording ran as root)."""
    v = last_view("hogs")
    plain = propose_pin(v.snapshot, 608)
    assert plain is not None and plain.move_off and plain.left_alone == ()
    uids = {p.sample.pid: p.sample.uid for p in v.snapshot.processes}
    assert {uids[o.pid] for o in plain.move_off} == {0}
    as_root = propose_pin(v.snapshot, 608, my_uid=0)
    assert as_root is not None and as_root.move_off == plain.move_off and as_root.left_alone == ()
    as_other = propose_pin(v.snapshot, 608, my_uid=1000)
    assert as_other is not None and as_other.move_off == () and as_other.isolate_candidates == ()
    assert [o.pid for o, _ in as_other.left_alone] == [o.pid for o in plain.move_off]
    assert {why for _, why in as_other.left_alone} == {"another user's process (root); --isolate-all moves it"}


def test_the_header_says_when_a_live_monitor_falls_behind_its_interval():
    """Asked for every 1 s, a monitor whose samples come 1.5 s apart (a loaded machine, or
    more threads than a second can read) says so instead of claiming "every 1 s"; on time,
    or in a replay, it does not."""
    import dataclasses

    from affmon.sources.stream import SourceInfo
    from affmon.tui.model.header_line import header_segments
    from affmon.tui.model.monitor import LAG_WINDOW, Monitor

    header, samples = load("clean")
    base = samples[0]

    def header_after(gap_s: float, replay: str | None = None):
        m = Monitor(header.topology, SourceInfo("h", None, 1.0, replay))
        view = None
        for k in range(LAG_WINDOW + 2):
            view = m.feed(dataclasses.replace(base, monotonic_s=base.monotonic_s + k * gap_s))
        assert view is not None
        return view.header

    late = header_after(1.5)
    assert late.lagging_interval_s == pytest.approx(1.5)
    texts = [text for _, text, _ in header_segments(late, paused=False, clock_text="00:00:00")]
    assert "every 1.5 s, not 1 s: falling behind" in texts and "every 1 s" not in texts
    assert header_after(1.05).lagging_interval_s is None  # within a fifth: on time
    assert header_after(1.5, replay="x").lagging_interval_s is None


def test_a_pause_is_not_taken_for_falling_behind():
    """The interval that spans a pause is left out of the pace: on time before and after
    a 30 s pause, the header does not say "falling behind" (it does when the pause is
    not announced, which is what a slow tick looks like)."""
    import dataclasses

    from affmon.sources.stream import SourceInfo
    from affmon.tui.model.monitor import LAG_WINDOW, Monitor

    header, samples = load("clean")
    base = samples[0]

    def after_pause(announced: bool):
        m = Monitor(header.topology, SourceInfo("h", None, 1.0))
        at = base.monotonic_s
        views = []
        for k in range(2 * LAG_WINDOW):
            if k == LAG_WINDOW:
                at += 30.0
                if announced:
                    m.resumed()
            at += 1.0
            views.append(m.feed(dataclasses.replace(base, monotonic_s=at)))
        return [v.header.lagging_interval_s for v in views[LAG_WINDOW:]]

    assert after_pause(announced=True) == [None] * LAG_WINDOW
    assert all(lag is not None and lag > 3 for lag in after_pause(announced=False))
