"""``T``: tune the selected process's job from the monitor, as ``affmon tune PID`` does.

The dialog first samples the job (two intervals; nothing changes) and lists the candidate
placements with how long trying them takes: the starting placement measured twice (a
window each), then each candidate pinned, left to settle and measured (candidates x
(settle + window)), the best two once more when they are close. Enter starts; the table
fills in as the ``Tuner`` measures, on a worker thread that talks to the screen only
through messages. Esc or q stops at once: the tuner puts back the trial in force, and the
dialog says when the masks from before tune are back. At the end the chosen row is
marked and stays pinned: an ordinary journal entry, which ``u`` undoes like any pin.

In a replay there is no process to tune: the dialog says so and does nothing. Row
descriptions and the tuner's sentences pass through ``term_safe`` into Rich ``Text``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Static

from affmon.actions.tune import Row, TuneResult
from affmon.core import fmt
from affmon.core.model.jobs import find_jobs
from affmon.core.model.rates import Snapshot
from affmon.core.plan.tuning import ScoreKind
from affmon.core.text import cut, term_safe
from affmon.tui.palette import Palette
from affmon.tui.pinner import TUNE_NEEDS_LIVE, Pinner, TuneSession

State = Literal["replay", "gone", "preparing", "asking", "running", "stopping", "done"]
PLACEMENT_WIDTH = 44


class RowChanged(Message):
    def __init__(self, row: Row) -> None:
        super().__init__()
        self.row = row


class Prepared(Message):
    def __init__(self, rows: tuple[Row, ...], score_kind: ScoreKind) -> None:
        super().__init__()
        self.rows = rows
        self.score_kind = score_kind


class Finished(Message):
    """The run ended: its result, or why there is none (``error``)."""

    def __init__(self, result: TuneResult | None, error: str | None = None) -> None:
        super().__init__()
        self.result = result
        self.error = error


def job_root(snapshot: Snapshot, pid: int) -> tuple[int, int, str] | None:
    """(PID, start time, name) of the root of the job ``pid`` belongs to (``pid`` itself
    when it is in none); None when it is not in the snapshot."""
    root = next((job.pid for job in find_jobs(snapshot) if pid in job.pids), pid)
    process = snapshot.process(root)
    if process is None:
        return None
    return process.sample.pid, process.sample.start_ticks, process.sample.name


def score_sentence(kind: ScoreKind) -> str:
    if kind == "gpu":
        return (
            "score: GPU utilisation, the mean of NVML's samples of the job's GPUs over each window (higher is better)"
        )
    return (
        "score: CPU-only (no GPU of the job seen by NVML): the CPU time its threads get per second, in CPUs "
        "(higher is better)"
    )


def duration_s(rows: tuple[Row, ...], settle_s: float, window_s: float) -> tuple[int, float]:
    """The candidates to try and the seconds it takes: two passes over the candidates,
    each a settle and a window, alternated with the starting placement three times (a
    window each, no settling)."""
    candidates = sum(1 for r in rows if r.number > 0 and r.status == "waiting")
    return candidates, 3 * window_s + 2 * candidates * (settle_s + window_s)


def _score(row: Row, kind: ScoreKind) -> str:
    if row.score is None:
        return "-"
    return f"{row.score:.1f}%" if kind == "gpu" else f"{row.score:.2f} CPUs"


def _names(snapshot: Snapshot) -> dict[int, str]:
    """Each process's user and command, as the dialog names the ones a row moves."""
    return {p.sample.pid: f"{p.sample.user or '?'} {p.sample.name}" for p in snapshot.processes}


def moved_text(rows: tuple[Row, ...], names: dict[int, str], p: Palette) -> Text:
    """Who the rows move off the job's CPUs, and whose they are, before Enter."""
    moved = sorted({pid for r in rows if r.status == "waiting" for pid, _ in r.isolate})
    out = Text()
    if not moved:
        return out
    out.append("rows marked 'moves' move these off the job's CPUs (PID, user, command):\n", style=p.muted)
    for pid in moved[:8]:
        out.append(f"  {pid:>7} {term_safe(names.get(pid, '?'))}\n", style=p.muted)
    if len(moved) > 8:
        out.append(f"  and {len(moved) - 8} more\n", style=p.muted)
    return out


def rows_text(rows: tuple[Row, ...], kind: ScoreKind, chosen: int | None, p: Palette) -> Text:
    """The candidate table: row, placement, CPUs, isolate?, score, state."""
    out = Text()
    head = f"{'#':>2}  {'placement':<{PLACEMENT_WIDTH}} {'CPUs':<12} {'isolate':<8} {'score':>10}  state\n"
    out.append(head, style="bold")
    for r in rows:
        description = cut(term_safe(r.description), PLACEMENT_WIDTH)
        isolate = f"moves {len(r.isolate)}" if r.isolate else "no"
        mark = r.number == chosen
        line = f"{r.number:>2}  {description:<{PLACEMENT_WIDTH}} {fmt.cpus(r.cpus, 12):<12} {isolate:<8} "
        out.append(line, style=f"bold {p.success}" if mark else "")
        out.append(f"{_score(r, kind):>10}  ", style=f"bold {p.success}" if mark else "")
        style = {"running": "bold", "failed": p.error, "refused": p.muted, "skipped": p.muted}.get(r.status, "")
        out.append(r.status, style=style)
        if r.note:
            out.append(f" ({term_safe(r.note)})", style=p.muted)
        if mark:
            out.append("  ◀ chosen", style=f"bold {p.success}")
        out.append("\n")
    return out


class TuneScreen(ModalScreen[str | None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "confirm", "Start", priority=True),
        Binding("escape", "stop", "Stop", priority=True),
        Binding("q", "stop", "Stop", priority=True),
        Binding("i", "toggle_isolate", "Isolate", priority=True),
    ]

    def __init__(self, snapshot: Snapshot, pid: int, pinner: Pinner, palette: Palette) -> None:
        super().__init__()
        self.pinner = pinner
        self.palette = palette
        self.target = job_root(snapshot, pid)
        self.state: State = "replay" if pinner.replay else "preparing" if self.target is not None else "gone"
        self.rows: tuple[Row, ...] = ()
        self.score_kind: ScoreKind = "cpu"
        self.session: TuneSession | None = None
        self.result: TuneResult | None = None
        self.error: str | None = None
        self.isolate = True  # the rows that move others off do so; i turns it off before the start
        self.moved_names: dict[int, str] = _names(snapshot)
        self._dialog_gone = False  # the dialog went away: a session prepared after it is closed at once

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            with VerticalScroll(id="dialog-body"):
                yield Static(self.body(), id="dialog-text")
            yield Static(self.keys(), id="dialog-keys")

    def on_mount(self) -> None:
        if self.state == "preparing":
            self._prepare()

    def on_unmount(self) -> None:
        was_gone, self._dialog_gone = self._dialog_gone, True
        session = self.session
        if session is None or was_gone:
            return
        if self.state in ("preparing", "running", "stopping"):
            session.abort()  # the app closes mid-run: the worker puts the masks back and closes it
        elif self.state == "asking":
            session.close()

    # -- what it shows --------------------------------------------------------------

    def _title(self) -> Text:
        out = Text()
        if self.target is None:
            return out
        pid, _, name = self.target
        out.append(f"Tune {pid} {term_safe(name)}", style="bold")
        out.append("  (its job: the process and its workers)\n\n", style=self.palette.muted)
        return out

    def body(self) -> Text:
        p = self.palette
        if self.state == "replay":
            return Text.assemble((f"{TUNE_NEEDS_LIVE}.\n\n", "bold"), ("Run affmon live to tune a job.", p.muted))
        if self.state == "gone":
            return Text("the selected process is gone: nothing to tune", style="bold")
        out = self._title()
        if self.state == "preparing":
            out.append("sampling the job over two intervals to list the candidates; nothing changes yet…\n")
            return out
        if self.error is not None and not self.rows:
            out.append("tune could not start: ", style=f"bold {p.error}")
            out.append(term_safe(self.error) + "\n")
            return out
        out.append(score_sentence(self.score_kind) + "\n\n", style=p.muted)
        chosen = self.result.chosen if self.result is not None else None
        out.append_text(rows_text(self.rows, self.score_kind, chosen, p))
        out.append("\n")
        if self.state == "asking":
            out.append_text(moved_text(self.rows, self.moved_names, p))
        if self.state == "asking" and self.session is not None:
            n, seconds = duration_s(self.rows, self.session.settle_s, self.session.window_s)
            out.append("Enter starts: ", style="bold")
            out.append(
                f"it changes the job's CPU masks for about {seconds:.0f} s: {n} candidates measured twice each "
                f"({self.session.settle_s:g} s settle + {self.session.window_s:g} s window), alternated with the "
                "starting placement, whose windows and theirs give the noise a winner must beat. "
                "Esc or q stops at any time and puts the masks back.\n"
            )
        elif self.state == "running":
            out.append("measuring… Esc or q stops and puts the masks back\n", style=p.muted)
        elif self.state == "stopping":
            out.append("stopping: putting back the masks from before tune started…\n", style=f"bold {p.warning}")
        elif self.state == "done":
            out.append_text(self._outcome())
        return out

    def _outcome(self) -> Text:
        p = self.palette
        r = self.result
        out = Text()
        if r is None:
            out.append("tune failed: ", style=f"bold {p.error}")
            out.append(f"{term_safe(str(self.error))}; u or `affmon undo` puts back any pin left\n")
            return out
        if r.aborted:
            out.append(term_safe(r.why) + "\n", style=f"bold {p.success}")
        elif r.error is not None:
            out.append(term_safe(r.why) + "\n", style=f"bold {p.error}")
        else:
            out.append(f"chosen: row {r.chosen}: {term_safe(r.why)}\n", style="bold")
            if r.pinned is not None:
                out.append(f"pinned to CPUs {fmt.cpus(r.pinned.cpus)}; u undoes it like any pin\n", style=p.success)
            else:
                out.append("nothing was changed\n", style=p.muted)
        return out

    def keys(self) -> Text:
        if self.state == "asking":
            box = "[x]" if self.isolate else "[ ]"
            return Text.assemble(
                ("Enter", "bold"), " start   ", (f"{box} i", "bold"), " isolate   ", ("Esc", "bold"), " cancel"
            )
        if self.state in ("running", "preparing"):
            return Text.assemble(("Esc", "bold"), "/", ("q", "bold"), " stop")
        if self.state == "stopping":
            return Text("putting the masks back…")
        return Text.assemble(("Enter", "bold"), "/", ("Esc", "bold"), " close")

    def _refresh(self) -> None:
        self.query_one("#dialog-text", Static).update(self.body())
        self.query_one("#dialog-keys", Static).update(self.keys())

    # -- keys -----------------------------------------------------------------------

    def action_toggle_isolate(self) -> None:
        """Before the start: whether the rows that move others off the job's CPUs do so."""
        if self.state == "asking" and self.session is not None:
            self.isolate = not self.isolate
            self.rows = self.session.set_isolation(self.isolate)
            self._refresh()

    def action_confirm(self) -> None:
        if self.state == "asking" and self.session is not None:
            self.state = "running"
            self._refresh()
            self._run(self.session)
        elif self.state in ("done", "replay", "gone"):
            self._close(self.summary())

    def action_stop(self) -> None:
        """Running: abort at once (the worker puts the masks back, then says so).
        Before the start: close, nothing changed. Stopping: wait for the masks."""
        session = self.session
        if self.state == "running" and session is not None:
            session.abort()
            self.state = "stopping"
            self._refresh()
        elif self.state == "preparing":
            self._dialog_gone = True  # first: the worker closes a session it makes from now on
            if self.session is not None:
                self.session.abort()  # its sampling stops; the worker closes it
            self.dismiss(None)
        elif self.state == "asking":
            if session is not None:
                session.close()
            self._close(None)
        elif self.state in ("done", "replay", "gone"):
            self._close(self.summary())

    def _close(self, summary: str | None) -> None:
        self._dialog_gone = True
        self.dismiss(summary)

    def summary(self) -> str | None:
        r = self.result
        if self.target is None or (r is None and self.error is None):
            return None
        pid = self.target[0]
        if r is None:
            return f"tune of {pid} failed: {term_safe(str(self.error))}"
        if r.aborted:
            return f"tune of {pid} stopped: the masks from before tune are back"
        if r.error is not None:
            return f"tune of {pid} stopped: {term_safe(r.error)}"
        if r.pinned is not None:
            return f"tune of {pid}: kept row {r.chosen}, CPUs {fmt.cpus(r.pinned.cpus)} (u undoes it)"
        return f"tune of {pid}: the starting placement stays; nothing was changed"

    # -- the worker -----------------------------------------------------------------

    def _changed(self, row: Row) -> None:
        """The tuner's ``on_change``, on its worker thread: a message to the screen."""
        self.post_message(RowChanged(row))

    @work(thread=True, exclusive=True, group="tune", exit_on_error=False)
    def _prepare(self) -> None:
        assert self.target is not None
        pid, start, _ = self.target
        try:
            session = self.pinner.tuner(pid, start, self._changed)
        except Exception as exc:  # a fault reaches the person as a line, never a crash
            self.post_message(Finished(None, str(exc)))
            return
        self.session = session
        if self._dialog_gone:
            session.close()
            return
        try:
            rows = session.prepare()
        except Exception as exc:
            session.close()
            self.post_message(Finished(None, str(exc)))
            return
        if self._dialog_gone:  # closed while it sampled
            session.close()
            return
        self.post_message(Prepared(rows, session.score_kind))

    @work(thread=True, exclusive=True, group="tune", exit_on_error=False)
    def _run(self, session: TuneSession) -> None:
        try:
            while session.step():
                pass
            self.post_message(Finished(session.result()))
        except Exception as exc:
            session.abort()
            self.post_message(Finished(None, f"internal error: {exc}"))
        finally:
            session.close()

    @on(Prepared)
    def _prepared(self, message: Prepared) -> None:
        if self.state != "preparing":
            return
        self.rows, self.score_kind = message.rows, message.score_kind
        self.state = "asking"
        self._refresh()

    @on(RowChanged)
    def _row_changed(self, message: RowChanged) -> None:
        row = message.row
        rows = list(self.rows)
        if row.number < len(rows):
            rows[row.number] = row
            self.rows = tuple(rows)
            self._refresh()

    @on(Finished)
    def _finished(self, message: Finished) -> None:
        self.result, self.error = message.result, message.error
        if message.result is not None:
            self.rows = message.result.rows
        self.state = "done"
        self._refresh()
