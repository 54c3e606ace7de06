"""Modal screens: the re-pin confirmation (then its result) and the undo confirmation
(then its result); help is in ``affmon.tui.help``. Nothing reaches the system before Enter on one of them.
Moving the memory too is a toggle of the pin dialog, off until pressed: it is the
consent ``pin --migrate-memory`` asks for on the command line. In a replay, Enter says
that a replay pins nothing.

What they show about processes (names, the planner's sentences, pin and undo messages)
passes through ``term_safe`` and goes into Rich ``Text``, never markup."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from affmon.actions.describe import result_text, undo_text
from affmon.actions.pin import PinResult
from affmon.actions.undo import UndoResult
from affmon.core import fmt
from affmon.core.model.domains import plural
from affmon.core.plan.advice import PinProposal
from affmon.core.rules.base import Finding
from affmon.core.text import term_safe
from affmon.tui.palette import Palette
from affmon.tui.pinner import Pinner


def proposal_text(
    pr: PinProposal, *, isolate: bool, with_children: bool, p: Palette, move_memory: bool = False
) -> Text:
    s = pr.suggestion
    out = Text()
    out.append(f"Re-pin {pr.pid} {term_safe(pr.name)}", style="bold")
    if pr.children:
        n = len(pr.children)
        said = (
            f"a training rank with {n} worker{'s' if n != 1 else ''}"
            if pr.training
            else f"a watched process, not training, with {n} child process{'es' if n != 1 else ''}"
        )
        out.append(f" ({said})", style=p.muted)
    elif not pr.training:
        out.append(" (a watched process, not training)", style=p.muted)
    out.append("\n\n")
    out.append("current mask   ", style=p.muted)
    out.append(fmt.cpus(pr.current_mask) + "\n")
    out.append("suggested CPUs ", style=p.muted)
    out.append(f"{fmt.cpus(s.cpus)}", style=f"bold {p.success}")
    out.append(f"  ({len(s.cpus)} CPUs" + (f", NUMA node {s.numa_node})" if s.numa_node is not None else ")") + "\n")
    out.append("\n")
    box = "[x]" if with_children else "[ ]"
    out.append(f"{box} c  with children", style="bold" if with_children else "")
    kids = " ".join(map(str, pr.children[:8])) + (" …" if len(pr.children) > 8 else "")
    out.append(f"   also pin its workers: {kids or 'none'}\n", style=p.muted)
    box = "[x]" if isolate else "[ ]"
    out.append(f"{box} i  isolate", style="bold" if isolate else "")
    if pr.move_off:
        out.append("       move these off those CPUs (PID, user, command, CPU, to):\n", style=p.muted)
        for o in pr.move_off[:8]:
            user = term_safe((o.user or "?")[:10])
            to = fmt.cpus(pr.moved_to(o, o.mask or frozenset()) or None)
            out.append(
                f"        {o.pid:>7} {user:<10} {term_safe(o.name[:16]):<16} {o.cpu_percent:5.0f}% on "
                f"{fmt.cpus(o.cpus)} -> {to}\n"
            )
        if len(pr.move_off) > 8:
            out.append(f"        and {len(pr.move_off) - 8} more\n", style=p.muted)
    elif s.stuck:
        # Others are there, but the suggestion is every CPU they may move to: say that, not "nothing".
        stuck = ", ".join(map(str, s.stuck[:8])) + (" …" if len(s.stuck) > 8 else "")
        out.append(
            f"       nobody to move: the busy processes there ({stuck}) have nowhere else to go\n", style=p.muted
        )
    else:
        out.append("       nothing else busy runs on those CPUs\n", style=p.muted)
    box = "[x]" if move_memory else "[ ]"
    out.append(f"{box} m  move memory too", style="bold" if move_memory else "")
    where = f"node {s.numa_node}" if s.numa_node is not None else "the node of those CPUs"
    out.append(f"   then move its pages to {where} (migrate_pages; off: the pages stay)\n", style=p.muted)
    if pr.left_alone or (isolate and pr.self_pinned):
        out.append("       left alone:\n", style=p.muted)
        for o, why in pr.left_alone[:6]:
            out.append(f"        {o.pid:>7} {term_safe(o.name[:16]):<16} {term_safe(why)}\n", style=p.muted)
        if len(pr.left_alone) > 6:
            out.append(f"        and {len(pr.left_alone) - 6} more\n", style=p.muted)
        if isolate:
            # Threads of the processes moved off that chose their CPUs: isolation keeps out of that.
            for o, th in pr.self_pinned[:6]:
                out.append(
                    f"        {o.pid:>7} thread {th.tid} {term_safe(th.name[:16])}: it pinned itself to CPUs"
                    f" {fmt.cpus(th.allowed_cpus)} (its process runs on {fmt.cpus(o.mask)})\n",
                    style=p.muted,
                )
            if len(pr.self_pinned) > 6:
                out.append(
                    f"        and {len(pr.self_pinned) - 6} more threads pinned by their process\n", style=p.muted
                )
    out.append("\nwhy these CPUs\n", style="bold")
    for warning in s.warnings:
        out.append(f"  ! {term_safe(warning)}\n", style=p.warning)
    for reason in s.reasons:
        out.append(f"  - {term_safe(reason)}\n", style=p.muted)
    return out


def pin_result_text(result: PinResult, p: Palette) -> Text:
    out = Text()
    if result.ok:
        out.append(f"pinned to CPUs {fmt.cpus(result.cpus)}\n", style=f"bold {p.success}")
    else:
        out.append("not pinned: ", style=f"bold {p.error}")
        out.append(f"{term_safe(str(result.error))}\n")
    if result.memory is not None:
        out.append("memory: ", style=p.muted)
        out.append(f"{term_safe(result.memory.message)}\n", style=p.success if result.memory.ok else p.error)
    lines = [term_safe(line) for line in result_text(result)] if result.threads else []
    out.append("\n".join(lines) + ("\n" if lines else ""), style="")
    return out


REPLAY_PINS_NOTHING = "a replay pins nothing: its processes are not on this machine"


def undo_result_text(result: UndoResult, p: Palette) -> Text:
    out = Text()
    left = sum(t.status in ("not-moved", "failed") for t in result.threads)
    if result.ok and not left:
        out.append("undone: every journaled mask is back\n", style=f"bold {p.success}")
    elif result.ok:
        # Threads changed since the pin, or with a mask of their own: the lines below name them.
        out.append(f"undone, but {plural(left, 'thread')} left as found (named below)\n", style=f"bold {p.warning}")
    else:
        out.append("undo failed: ", style=f"bold {p.error}")
        out.append(f"{term_safe(str(result.error))}\n")
    out.append("\n".join(term_safe(line) for line in undo_text(result)))
    return out


class _ActionScreen(ModalScreen[str | None]):
    """Ask, then (Enter) run ``_run`` in a worker thread and show its result."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "confirm", "Apply", priority=True),
        Binding("escape", "close", "Cancel", priority=True),
    ]

    def __init__(self, palette: Palette) -> None:
        super().__init__()
        self.palette = palette
        self.state = "asking"  # asking -> running -> done

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            with VerticalScroll(id="dialog-body"):
                yield Static(self.body(), id="dialog-text")
            yield Static(self.keys(), id="dialog-keys")

    def body(self) -> Text:
        raise NotImplementedError

    def keys(self) -> Text:
        if self.state == "asking":
            return Text.assemble(("Enter", "bold"), " apply   ", ("Esc", "bold"), " cancel")
        if self.state == "running":
            return Text("working…")
        return Text.assemble(("Enter", "bold"), "/", ("Esc", "bold"), " close")

    def _refresh(self) -> None:
        self.query_one("#dialog-text", Static).update(self.body())
        self.query_one("#dialog-keys", Static).update(self.keys())

    def action_confirm(self) -> None:
        if self.state == "asking":
            self.state = "running"
            self._refresh()
            self._start()
        elif self.state == "done":
            self.dismiss(self.summary())

    def action_close(self) -> None:
        if self.state != "running":
            self.dismiss(self.summary() if self.state == "done" else None)

    def summary(self) -> str | None:
        """One line for the status bar once done."""
        return None

    def _start(self) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        self.state = "done"
        self._refresh()


class PinScreen(_ActionScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        *_ActionScreen.BINDINGS,
        Binding("i", "toggle_isolate", "Isolate"),
        Binding("c", "toggle_children", "With children"),
        Binding("m", "toggle_memory", "Move memory"),
    ]

    def __init__(self, proposal: PinProposal, pinner: Pinner, palette: Palette) -> None:
        super().__init__(palette)
        self.proposal = proposal
        self.pinner = pinner
        self.isolate = False
        self.with_children = True
        self.move_memory = False  # the consent to move pages: never on by default
        self.result: PinResult | None = None
        self.replayed = False  # Enter in a replay: nothing was asked of the system
        self.shown_command = False  # Enter in a read-only monitor: the command, nothing done

    def command(self) -> str:
        """The command that does what Enter would, as the toggles stand."""
        parts = ["affmon pin", str(self.proposal.pid), "--cpus", fmt.cpus(self.proposal.suggestion.cpus)]
        parts += ["--with-children"] if self.with_children else []
        parts += ["--isolate"] if self.isolate else []
        parts += ["--migrate-memory"] if self.move_memory else []
        return " ".join(parts)

    def body(self) -> Text:
        if self.shown_command:
            return Text.assemble(
                ("read-only: nothing was pinned.\n\n", "bold"),
                ("To apply it, run:\n  ", ""),
                (self.command() + "\n", f"bold {self.palette.success}"),
            )
        if self.replayed:
            return Text.assemble(
                (f"{REPLAY_PINS_NOTHING}.\n\n", "bold"),
                (f"It would pin {self.proposal.pid} to CPUs {fmt.cpus(self.proposal.suggestion.cpus)}; ", ""),
                ("run affmon on the machine the recording was made on to pin it.", self.palette.muted),
            )
        if self.result is not None:
            return pin_result_text(self.result, self.palette)
        return proposal_text(
            self.proposal,
            isolate=self.isolate,
            with_children=self.with_children,
            p=self.palette,
            move_memory=self.move_memory,
        )

    def keys(self) -> Text:
        if self.state == "asking" and self.pinner.replay:
            return Text.assemble(("Enter", "bold"), " (a replay pins nothing)   ", ("Esc", "bold"), " close")
        if self.state == "asking" and self.pinner.readonly:
            return Text.assemble(("Enter", "bold"), " show the command (read-only)   ", ("Esc", "bold"), " close")
        return super().keys()

    def action_toggle_memory(self) -> None:
        if self.state == "asking":
            self.move_memory = not self.move_memory
            self._refresh()

    def action_toggle_isolate(self) -> None:
        if self.state == "asking":
            self.isolate = not self.isolate
            self._refresh()

    def action_toggle_children(self) -> None:
        if self.state == "asking":
            self.with_children = not self.with_children
            self._refresh()

    def _start(self) -> None:
        if self.pinner.replay:
            self.replayed = True
            self.finish()
            return
        if self.pinner.readonly:
            self.shown_command = True
            self.finish()
            return
        self._apply(self.isolate, self.with_children, self.move_memory)

    @work(thread=True, exclusive=True, group="pin", exit_on_error=False)
    def _apply(self, isolate: bool, with_children: bool, move_memory: bool) -> None:
        try:
            result = self.pinner.apply(
                self.proposal, isolate=isolate, with_children=with_children, move_memory=move_memory
            )
        except Exception as exc:  # a fault must reach the person as a result, never a crash
            result = PinResult(False, self.proposal.suggestion.cpus, (), f"internal error: {exc}", False, None)
        self.app.call_from_thread(self._done, result)

    def _done(self, result: PinResult) -> None:
        self.result = result
        self.finish()

    def summary(self) -> str | None:
        if self.replayed:
            return f"{REPLAY_PINS_NOTHING} ({self.proposal.pid} was not pinned)"
        if self.shown_command:
            return f"read-only: to pin {self.proposal.pid}, run {self.command()}"
        r = self.result
        if r is None:
            return None
        if r.ok:
            memory = f"; memory: {term_safe(r.memory.message)}" if r.memory is not None else ""
            return f"pinned {self.proposal.pid} to CPUs {fmt.cpus(r.cpus)} (u undoes it){memory}"
        return f"pin of {self.proposal.pid} failed: {term_safe(str(r.error))}"


def no_change_text(proposal: PinProposal, findings: Sequence[Finding], p: Palette) -> Text:
    """Why ``r`` offers no pin, and what the job's findings say to change instead."""
    out = Text()
    out.append(f"No placement change can help {proposal.pid} ({term_safe(proposal.name)})\n\n", style="bold")
    out.append(term_safe(str(proposal.no_change)) + ".\n", style=p.muted)
    remedies = [f for f in findings if f.remedy]
    if remedies:
        out.append("\nwhat to change instead\n", style="bold")
        for f in remedies:
            out.append(f"  {f.code}: ", style=p.severity(f.severity))
            out.append(term_safe(str(f.remedy)) + "\n", style=p.success)
    else:
        out.append(
            f"\n`affmon diagnose --pid {proposal.pid}` names what limits it; nothing was pinned.\n", style=p.muted
        )
    return out


class NoChangeScreen(_ActionScreen):
    """``r`` on a job whose suggestion is the masks it already has: nothing to apply."""

    def __init__(self, proposal: PinProposal, findings: Sequence[Finding], palette: Palette) -> None:
        super().__init__(palette)
        self.proposal = proposal
        self.findings = tuple(findings)
        self.state = "done"

    def body(self) -> Text:
        return no_change_text(self.proposal, self.findings, self.palette)

    def summary(self) -> str | None:
        return f"no placement change can help {self.proposal.pid}: nothing was pinned"


class UndoScreen(_ActionScreen):
    def __init__(self, description: str, pinner: Pinner, palette: Palette) -> None:
        super().__init__(palette)
        self.description = description
        self.pinner = pinner
        self.result: UndoResult | None = None

    def body(self) -> Text:
        if self.result is not None:
            return undo_result_text(self.result, self.palette)
        return Text.assemble(
            ("Undo the last pin\n\n", "bold"), term_safe(self.description), "\n\nEvery journaled mask is put back."
        )

    def _start(self) -> None:
        self._undo()

    @work(thread=True, exclusive=True, group="pin", exit_on_error=False)
    def _undo(self) -> None:
        try:
            result = self.pinner.undo_last()
        except Exception as exc:
            result = UndoResult(False, (), (), f"internal error: {exc}")
        self.app.call_from_thread(self._done, result)

    def _done(self, result: UndoResult) -> None:
        self.result = result
        self.finish()

    def summary(self) -> str | None:
        r = self.result
        if r is None:
            return None
        return "undone: masks restored" if r.ok else f"undo failed: {term_safe(str(r.error))}"
