"""The app driven by Pilot on the H200 recordings, with a fake pinner: selection, sort,
filter, the toggles, the re-pin flow (confirm, cancel, failure), undo, pause, 80x24,
processes that come and go, and ticks that never overlap."""

from __future__ import annotations

import dataclasses
import time

import pytest
from textual.widgets import Static

from affmon.core import fmt
from affmon.tui.app import AffmonApp
from affmon.tui.help import HelpScreen
from affmon.tui.screens import PinScreen, UndoScreen
from affmon.tui.widgets.detail import DetailText
from affmon.tui.widgets.header import HeaderBar
from affmon.tui.widgets.processes import ProcessTable
from tests.helpers.recordings import load
from tests.tui.helpers import FakePinner, ListSource, list_app, play, press_and_finish, replay_app, step

SIZE = (160, 48)


def table(app: AffmonApp) -> ProcessTable:
    return app.query_one(ProcessTable)


def shown_text(app: AffmonApp, selector: str) -> str:
    widget = app.screen.query_one(selector)
    if isinstance(widget, HeaderBar):  # a line of three pieces: the whole line
        return widget.text.plain
    assert isinstance(widget, Static)
    return str(widget.render())


async def test_starts_on_the_worst_job_and_arrows_move_the_selection():
    app = replay_app("hogs")
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        assert table(app).selected_key == "p:608" and app.selected_pid == 608
        assert "608 python3" in str(app.query_one(DetailText).render())
        assert "CONTENDED" in str(app.query_one(DetailText).render())
        await pilot.press("down")
        assert app.selected_pid != 608 and table(app).selected_key == f"p:{app.selected_pid}"
        assert f"{app.selected_pid} pt_data_worker" in str(app.query_one(DetailText).render())


async def test_selection_stays_on_its_process_across_ticks():
    app = replay_app("hogs")
    async with app.run_test(size=SIZE) as pilot:
        await step(app, pilot, 2)
        await pilot.press("down", "down")
        chosen = app.selected_pid
        await play(pilot)  # findings appear and rows reorder: the cursor follows the key
        assert app.selected_pid == chosen and table(app).selected_key == f"p:{chosen}"


async def test_mouse_click_selects_a_row():
    app = replay_app("hogs")
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        keys = table(app).shown_keys
        await pilot.click(ProcessTable, offset=(3, 4))  # header row, then rows 0..: row 3
        await pilot.pause()
        assert table(app).selected_key == keys[3] and app.selected_pid == int(keys[3].split(":")[1])


async def test_sort_cycles_and_reorders():
    app = replay_app("hogs")
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        assert table(app).shown_keys[0] == "p:608"
        await pilot.press("s")
        assert app.options.sort == "cpu" and "sort CPU %" in shown_text(app, "#status")
        first = app.view.process(int(table(app).shown_keys[0].split(":")[1]))
        assert first is not None and first.cpu_percent > 99
        from affmon.tui.model.table import SORTS

        await pilot.press(*["s"] * (len(SORTS) - 1))  # round every column, back to findings
        assert app.options.sort == "findings" and table(app).shown_keys[0] == "p:608"


async def test_filter_narrows_and_escape_clears():
    app = replay_app("hogs")
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        await pilot.press("slash", "6", "6", "0")
        assert table(app).shown_keys == ["p:608", "p:660"]
        await pilot.press("enter")
        assert table(app).shown_keys == ["p:608", "p:660"] and "filter: '660'" in shown_text(app, "#status")
        await pilot.press("escape")
        assert len(table(app).shown_keys) == 21 and app.options.filter_text == ""


async def test_all_and_training_toggle():
    app = replay_app("hogs")
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        await pilot.press("a")
        assert "p:1" in table(app).shown_keys and "all processes" in shown_text(app, "#status")
        await pilot.press("a")
        assert "p:1" not in table(app).shown_keys and len(table(app).shown_keys) == 21


async def test_thread_rows_toggle():
    app = replay_app("narrow")
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        assert not any(k.startswith("t:") for k in table(app).shown_keys)
        await pilot.press("t")
        assert "t:695:695" in table(app).shown_keys and table(app).selected_key == "p:695"
        await pilot.press("t")
        assert not any(k.startswith("t:") for k in table(app).shown_keys)


async def test_repin_confirm_calls_the_pinner_with_the_suggested_cpus():
    pinner = FakePinner()
    app = replay_app("narrow", pinner)
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        await pilot.press("r")
        assert isinstance(app.screen, PinScreen)
        proposal = app.screen.proposal
        assert proposal.pid == 695 and proposal.current_mask == frozenset({0, 1})
        text = shown_text(app, "#dialog-text")
        assert "current mask   0-1" in text and "suggested CPUs 0-15" in text and "[x] c  with children" in text
        assert pinner.calls == []  # nothing before Enter
        await press_and_finish(pilot, "enter")
        assert pinner.calls == [(695, proposal.suggestion.cpus, False, True)]
        assert "pinned to CPUs 0-15" in shown_text(app, "#dialog-text")
        await pilot.press("enter")
        assert not isinstance(app.screen, PinScreen)
        assert "pinned 695 to CPUs 0-15" in shown_text(app, "#status")


async def test_repin_toggles_isolate_and_children():
    pinner = FakePinner()
    app = replay_app("hogs", pinner)
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        await pilot.press("r")
        assert "move these off those CPUs" in shown_text(app, "#dialog-text")
        await pilot.press("i", "c")
        assert "[x] i  isolate" in shown_text(app, "#dialog-text")
        await press_and_finish(pilot, "enter")
        assert [(pid, isolate, children) for pid, _, isolate, children in pinner.calls] == [(608, True, False)]


async def test_repin_cancel_changes_nothing():
    pinner = FakePinner()
    app = replay_app("narrow", pinner)
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        await pilot.press("r")
        assert isinstance(app.screen, PinScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, PinScreen) and pinner.calls == []


async def test_repin_failure_is_shown():
    pinner = FakePinner(fail="not permitted to set the affinity of PID 695 (user root)")
    app = replay_app("narrow", pinner)
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        await press_and_finish(pilot, "r", "enter")
        text = shown_text(app, "#dialog-text")
        assert "not pinned: not permitted" in text and "put back as it was" in text
        await pilot.press("escape")
        assert "pin of 695 failed" in shown_text(app, "#status")


async def test_undo_asks_then_undoes_and_says_so():
    pinner = FakePinner()
    app = replay_app("narrow", pinner)
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        await pilot.press("u")
        assert isinstance(app.screen, UndoScreen) and pinner.undos == 0
        assert "PID 695 pinned to CPUs 0-15" in shown_text(app, "#dialog-text")
        await press_and_finish(pilot, "enter")
        assert pinner.undos == 1 and "undone" in shown_text(app, "#dialog-text")
        await pilot.press("enter")
        await pilot.press("u")  # nothing left to undo: no dialog
        assert not isinstance(app.screen, UndoScreen) and pinner.undos == 1


async def test_help_opens_and_closes():
    app = replay_app("clean")
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_pause_stops_the_ticks_and_resume_restarts_them():
    header, samples = load("clean")
    # The same five samples shifted in time, over and over: a source that never ends.
    many = [dataclasses.replace(s, monotonic_s=s.monotonic_s + 10 * k) for k in range(10) for s in samples]
    app = AffmonApp(ListSource(header.topology, many), FakePinner(), interval=0.02)
    async with app.run_test(size=SIZE) as pilot:
        while app.view is None:
            await pilot.pause(0.02)
        await pilot.press("p")
        assert app.paused and "PAUSED" in shown_text(app, "#header")
        await app.ticks_landed()  # a tick already under way may still land
        await pilot.pause()
        ticks = app.monitor.samples_seen
        await pilot.pause(0.3)  # fifteen intervals: none may tick while paused
        assert app.monitor.samples_seen == ticks
        await pilot.press("p")
        deadline = time.monotonic() + 20  # a loaded machine may be slow to tick again, never silent
        while app.monitor.samples_seen == ticks and time.monotonic() < deadline:
            await pilot.pause(0.02)
        assert app.monitor.samples_seen > ticks and "PAUSED" not in shown_text(app, "#header")


async def test_a_slow_tick_delays_the_next_and_never_overlaps():
    header, samples = load("clean")
    source = ListSource(header.topology, samples, delay_s=0.15)
    app = AffmonApp(source, FakePinner(), interval=0.0)
    async with app.run_test(size=SIZE) as pilot:
        started = time.monotonic()
        while not source.exhausted and time.monotonic() - started < 10:
            await pilot.pause(0.05)
        await app.ticks_landed()
        assert source.reads == 5 and source.most_active == 1


async def test_a_process_that_exits_disappears_and_a_new_one_appears():
    _, samples = load("clean")
    without = tuple(p for p in samples[2].processes if p.pid != 478)
    feed = [samples[0], samples[1], dataclasses.replace(samples[2], processes=without), samples[3]]

    app = list_app("clean", feed)
    async with app.run_test(size=SIZE) as pilot:
        await step(app, pilot)  # two samples: the first view
        assert "p:478" in table(app).shown_keys
        await pilot.press("down")  # select a worker that stays
        chosen = table(app).selected_key
        await step(app, pilot)
        assert "p:478" not in table(app).shown_keys and table(app).selected_key == chosen
        await step(app, pilot)
        assert "p:478" in table(app).shown_keys and table(app).selected_key == chosen


async def test_at_80x24_the_table_stays_and_the_side_panes_go():
    app = replay_app("overlap")
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        assert app.query_one("#cores-pane").display and app.query_one("#detail").display
        rows = list(table(app).shown_keys)
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert not app.query_one("#cores-pane").display and not app.query_one("#detail").display
        assert not app.query_one("#gpu-plot").display
        assert table(app).size.height >= 10 and table(app).shown_keys == rows
        header = shown_text(app, "#header")
        assert "affmon" in header and len(header) <= 80


async def test_resized_down_and_back_up_the_panes_return():
    app = replay_app("hogs")
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        rows = list(table(app).shown_keys)
        for size in ((80, 24), SIZE, (80, 24), (120, 36), SIZE):
            await pilot.resize_terminal(*size)
            await pilot.pause()
            assert table(app).shown_keys == rows
        assert app.query_one("#cores-pane").display and app.query_one("#detail").display


async def test_a_terminal_without_colour(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")  # https://no-color.org, honoured by Textual

    app = replay_app("narrow")
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        assert app.no_color
        assert "affmon" in shown_text(app, "#header")
        # severity still reads without colour: the codes are words, not only colours
        assert "NARROW" in " ".join(str(c) for c in table(app).get_row_at(0))


async def test_live_the_first_view_covers_a_real_interval():
    """Two samples back to back gave the first view rates over a tenth of a second; live,
    the first view now closes an interval of FIRST_INTERVAL_S (then --interval)."""
    from affmon.sources.stream import LiveSource
    from affmon.tui.app import FIRST_INTERVAL_S
    from tests.helpers.live import workload

    with workload("--sleepers", "1") as w:
        pid = w["pid"]
        source = LiveSource((pid,), interval_s=5.0)
        try:
            app = AffmonApp(source, FakePinner())
            async with app.run_test(size=SIZE) as pilot:
                deadline = time.monotonic() + 30
                while (app.view is None or not app.view.measured) and time.monotonic() < deadline:
                    await pilot.pause(0.05)  # the first look (one sample, no rates) comes before it
                assert app.view is not None and app.view.measured
                assert app.view.snapshot.interval_s >= FIRST_INTERVAL_S * 0.9
                assert app.view.snapshot.interval_s < 5.0  # not a whole --interval either
        finally:
            source.close()


async def test_live_the_first_view_is_let_go_once_a_measured_view_replaces_it():
    """The first view (drawn before Textual loaded) holds its snapshot: every thread's
    sample and rates. Kept by the app after it was shown, it held them for the whole run,
    a second copy of the thread state that no later view shares."""
    import gc
    import weakref

    from affmon.sources.stream import LiveSource
    from affmon.tui.first_frame import first_view
    from tests.helpers.live import workload

    with workload("--sleepers", "1") as w:
        pid = w["pid"]
        source = LiveSource((pid,), interval_s=5.0)
        try:
            first = first_view(source)
            assert first is not None and first.process(pid) is not None
            gone = weakref.ref(first)
            app = AffmonApp(source, FakePinner(), first_view=first)
            del first
            async with app.run_test(size=SIZE) as pilot:
                deadline = time.monotonic() + 30
                while (app.view is None or not app.view.measured) and time.monotonic() < deadline:
                    await pilot.pause(0.05)
                assert app.view is not None and app.view.measured
                await pilot.pause()
                gc.collect()
                assert gone() is None
        finally:
            source.close()


async def test_the_thread_table_re_sorts_in_place():
    """Threads re-sort by CPU% every tick: the table rewrites the cells that moved instead
    of clearing and re-adding every row (which re-laid out the whole screen)."""
    from textual.app import App

    from affmon.tui.model.views import ThreadRow
    from affmon.tui.palette import palette
    from affmon.tui.widgets.detail import ThreadTable

    def row(tid: int, cpu: float) -> ThreadRow:
        return ThreadRow(1, tid, f"t{tid}", "R", 0, frozenset({0}), cpu, 0.1, 1.0, 0.0)

    class One(App[None]):
        def compose(self):
            yield ThreadTable(id="t")

    app = One()
    async with app.run_test() as pilot:
        t = app.query_one(ThreadTable)
        p = palette(app)
        t.show([row(10, 90.0), row(11, 5.0), row(12, 1.0)], p)
        await pilot.pause()
        cleared = []
        t.clear = lambda *a, **k: cleared.append(1)  # type: ignore[method-assign]
        t.show([row(11, 80.0), row(10, 20.0)], p)  # re-sorted, one thread gone
        await pilot.pause()
        assert cleared == [] and t.row_count == 2
        assert [str(t.get_row_at(i)[0]) for i in range(2)] == ["11", "10"]
        t.show([row(11, 80.0), row(10, 20.0), row(13, 3.0)], p)  # one born
        await pilot.pause()
        assert [str(t.get_row_at(i)[0]) for i in range(3)] == ["11", "10", "13"]


async def test_a_readonly_monitor_shows_the_command_and_changes_nothing(tmp_path, monkeypatch):
    """``affmon --readonly``: r proposes as usual; Enter shows the command that would apply
    it, with the toggles as set, and nothing reaches the system; u and T say the same."""
    from affmon.core.errors import AffmonError
    from affmon.tui.pinner import ReadOnlyPinner

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))

    class Watched(ReadOnlyPinner):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[object] = []

        def apply(self, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
            self.calls.append(args)
            return super().apply(*args, **kwargs)  # type: ignore[arg-type]

    pinner = Watched()
    app = replay_app("hogs", pinner)
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        await pilot.press("r")
        assert isinstance(app.screen, PinScreen)
        assert "show the command (read-only)" in shown_text(app, "#dialog-keys")
        await pilot.press("i")
        await pilot.press("enter")
        await pilot.pause()
        text = shown_text(app, "#dialog-text")
        cpus = app.screen.proposal.suggestion.cpus
        assert "read-only: nothing was pinned" in text
        assert f"affmon pin 608 --cpus {fmt.cpus(cpus)} --with-children --isolate" in text
        assert pinner.calls == []
    undone = ReadOnlyPinner().undo_last()
    assert not undone.ok and "read-only" in str(undone.error) and "affmon undo" in str(undone.error)
    with pytest.raises(AffmonError, match="affmon tune 608"):
        ReadOnlyPinner().tuner(608, 1, lambda row: None)


@pytest.mark.parametrize(("value", "expected"), [("", False), ("0", False), ("1", True), ("yes", True)])
def test_affmon_readonly_in_the_environment_makes_the_monitor_read_only(monkeypatch, value, expected):
    import argparse

    from affmon.commands.tui import readonly

    monkeypatch.setenv("AFFMON_READONLY", value)
    assert readonly(argparse.Namespace(readonly=False)) is expected
    assert readonly(argparse.Namespace(readonly=True)) is True


async def test_an_actions_message_expires_and_the_finding_comes_back(monkeypatch):
    import affmon.tui.app as app_module

    monkeypatch.setattr(app_module, "NOTE_SECONDS", 0.5)

    pinner = FakePinner()
    app = replay_app("hogs", pinner)
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        before = shown_text(app, "#status")
        assert "CONTENDED" in before or "STARVED" in before, before  # the selected job's worst finding
        app._after_action("undone: masks restored")
        await pilot.pause()
        assert "undone: masks restored" in shown_text(app, "#status")
        await pilot.pause(1.0)
        after = shown_text(app, "#status")
        assert "undone" not in after and after == before


async def test_f6_lists_every_column_with_the_sorted_one_marked_and_enter_sorts_by_it():
    from textual.widgets import OptionList

    from affmon.tui.model.table import SORTS
    from affmon.tui.sort_screen import SortScreen

    app = replay_app("hogs")
    async with app.run_test(size=SIZE) as pilot:
        await play(pilot)
        await pilot.press("f6")
        assert isinstance(app.screen, SortScreen)
        listing = app.screen.query_one(OptionList)
        labels = [str(listing.get_option_at_index(i).prompt) for i in range(listing.option_count)]
        assert len(labels) == len(SORTS) >= 12
        assert labels[0].startswith("▼ findings") and all(not x.startswith("▼") for x in labels[1:])
        # down to "threads", Enter: the table sorts by it, its header marked
        for _ in range(list(SORTS).index("thr")):
            await pilot.press("down")
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, SortScreen) and app.options.sort == "thr"
        assert "sort threads" in shown_text(app, "#status")
        await pilot.press("I")
        assert app.options.reverse
        await pilot.press("f6")
        assert str(app.screen.query_one(OptionList).get_option_at_index(list(SORTS).index("thr")).prompt).startswith(
            "▲"
        )
        await pilot.press("escape")
        assert app.options.sort == "thr"


def test_every_sort_orders_the_rows_and_s_cycles_through_them_all():
    from affmon.tui.model.table import SORTS, TableOptions, next_sort, table_rows
    from tests.helpers.recordings import views

    view = views("hogs")[-1]
    seen = []
    key = "findings"
    for _ in SORTS:
        rows = table_rows(view, TableOptions(sort=key, training_only=False))
        assert rows  # every sort gives the same rows, in its order
        seen.append(key)
        key = next_sort(key)
    assert key == "findings" and sorted(seen) == sorted(SORTS)
    by_threads = [
        r.process.threads
        for r in table_rows(view, TableOptions(sort="thr", training_only=False))
        if r.depth == 0 and r.process
    ]
    assert by_threads == sorted(by_threads, reverse=True)
