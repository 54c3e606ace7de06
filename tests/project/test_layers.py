"""The layering, as a contract the suite checks on every import statement in affmon
(module level and inside functions), lowest layer first:

1. ``affmon.core``: value types, arithmetic, rules, the one tick. Imports nothing else of
   affmon (and no textual, psutil, pynvml or plotext: ``test_core_purity``). Inside it, by
   concept, lowest first (``CORE_ORDER``): ``errors`` and ``text``; ``model`` (what a machine
   and its processes are); ``recording`` (the file format, of the model only); ``rules`` (what
   is wrong); ``plan`` (what to do about it); ``fmt`` (numbers as the front ends spell them).
2. ``affmon.collect`` and ``affmon.nvml``: what reads the system; import only the core.
3. ``affmon.actions``: the only code that changes the system; the core and the readers.
4. ``affmon.sources``: where samples come from and go; the layers below.
5. The front ends, ``affmon.tui`` (the monitor), ``affmon.export`` (the exporter),
   ``affmon.fleet`` (the fleet view over Prometheus) and ``affmon.commands`` (the command
   line): the layers below, never one another, but for the fleet view, which draws a node
   with the monitor's widgets and may import ``affmon.tui``. The commands that start a
   front end, ``affmon.commands.tui``, ``affmon.commands.export`` and
   ``affmon.commands.fleet``, may import theirs.
6. ``affmon.cli`` and ``affmon.__main__``: the entry points.

A front end gets the pins in force handed in (the journal's reader): a source never reads
the journal itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent.parent / "affmon"

LAYERS: list[tuple[str, set[str]]] = [
    ("affmon.core", {"affmon.core"}),
    ("affmon.collect", {"affmon.core", "affmon.collect"}),
    ("affmon.nvml", {"affmon.core", "affmon.nvml"}),
    ("affmon.actions", {"affmon.core", "affmon.collect", "affmon.actions"}),
    ("affmon.sources", {"affmon.core", "affmon.collect", "affmon.nvml", "affmon.sources"}),
    # The in-script placement API: a library a training script imports, below every front end.
    (
        "affmon.place",
        {"affmon.core", "affmon.collect", "affmon.nvml", "affmon.actions", "affmon.sources", "affmon.place"},
    ),
]
BELOW_FRONT_ENDS = {"affmon.core", "affmon.collect", "affmon.nvml", "affmon.actions", "affmon.sources", "affmon.place"}
FRONT_ENDS = {"affmon.tui", "affmon.export", "affmon.fleet", "affmon.commands"}
LAUNCHERS = {
    "affmon.commands.tui": "affmon.tui",
    "affmon.commands.export": "affmon.export",
    "affmon.commands.fleet": "affmon.fleet",
}
BUILT_ON = {"affmon.fleet": {"affmon.tui"}}  # a front end drawn with another's widgets


# Inside the core: what each part may import of the core, and where to go instead.
CORE_ORDER: dict[str, tuple[set[str], str]] = {
    "affmon.core.errors": (set(), "the core's one error type imports nothing"),
    "affmon.core.text": (set(), "terminal-safe text imports nothing of affmon"),
    "affmon.core.model": (
        {"affmon.core.errors", "affmon.core.text"},
        "the model knows no rule, plan, file format or number format: move what it needs into the model",
    ),
    "affmon.core.recording": (
        {"affmon.core.errors", "affmon.core.text", "affmon.core.model"},
        "the file format writes and reads the model only: a finding or a plan is computed again from it",
    ),
    "affmon.core.rules": (
        {"affmon.core.errors", "affmon.core.text", "affmon.core.model"},
        "a rule judges the model; what the planner and a rule both need belongs in the model",
    ),
    "affmon.core.plan": (
        {"affmon.core.errors", "affmon.core.text", "affmon.core.model", "affmon.core.rules"},
        "the planner may read the rules' findings; the file format and number formats are not its business",
    ),
    "affmon.core.fmt": (
        {"affmon.core.text", "affmon.core.model"},
        "number formats spell model values; a rule's or a plan's text is written where it is made",
    ),
}


def core_part(name: str) -> str | None:
    return next((part for part in CORE_ORDER if name == part or name.startswith(part + ".")), None)


def core_refusal(module: str, target: str) -> str | None:
    """Why ``module`` (of the core) may not import ``target`` (of the core); None when it may."""
    part, other = core_part(module), core_part(target)
    if part is None or other is None or other == part:
        return None if part is not None and other is not None else f"{target} is in no part of the core"
    may, instead = CORE_ORDER[part]
    return None if other in may else f"{part} may not import {other}: {instead}"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every affmon module ``path`` imports, wherever the import statement stands."""
    found = set()
    package = module_name(path).rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            found.update(f"{base}.{alias.name}" for alias in node.names)
            found.add(base)
    return {name for name in found if name == "affmon" or name.startswith("affmon.")}


def layer_of(name: str) -> str:
    below = ("affmon.core", "affmon.collect", "affmon.nvml", "affmon.actions", "affmon.sources", "affmon.place")
    for prefix in (*below, *FRONT_ENDS):
        if name == prefix or name.startswith(prefix + "."):
            return prefix
    return name


def allowed(module: str, target: str) -> bool:
    target_layer = layer_of(target)
    if target == "affmon" or target in ("affmon.__version__",):
        return True
    for layer, may in LAYERS:
        if module == layer or module.startswith(layer + "."):
            return target_layer in may
    for launcher, front in LAUNCHERS.items():
        if module == launcher and target_layer == front:
            return True
    for front in FRONT_ENDS:
        if module == front or module.startswith(front + "."):
            return target_layer in BELOW_FRONT_ENDS or target_layer == front or target_layer in BUILT_ON.get(front, ())
    return True  # the entry points


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_every_import_keeps_to_the_layers(path: Path) -> None:
    module = module_name(path)
    wrong = sorted(target for target in imports(path) if not allowed(module, target))
    assert wrong == [], f"{module} imports {wrong}"


CORE_MODULES = [p for p in MODULES if module_name(p).startswith("affmon.core.")]


@pytest.mark.parametrize("path", CORE_MODULES, ids=lambda p: module_name(p))
def test_every_core_import_keeps_to_the_core_order(path: Path) -> None:
    module = module_name(path)
    refused = sorted(
        why
        for target in imports(path)
        if target.startswith("affmon.core.") and (why := core_refusal(module, target)) is not None
    )
    assert refused == [], f"{module}: {refused}"


def test_the_core_order_can_fail() -> None:
    """A rule importing the planner, the model importing a rule, the file format importing
    the rules: each refused, with where to go instead; the other way round allowed."""
    assert "planner" in (core_refusal("affmon.core.rules.cpu", "affmon.core.plan.planner") or "")
    assert core_refusal("affmon.core.model.jobs", "affmon.core.rules.base") is not None
    assert core_refusal("affmon.core.recording.format", "affmon.core.rules.base") is not None
    assert core_refusal("affmon.core.model.domains", "affmon.core.fmt") is not None
    assert core_refusal("affmon.core.plan.advice", "affmon.core.rules.evaluate") is None
    assert core_refusal("affmon.core.rules.cpu", "affmon.core.model.jobs") is None
    assert core_refusal("affmon.core.loose", "affmon.core.model.jobs") is not None  # a module in no part
    assert len(CORE_MODULES) > 30 and all(core_part(module_name(p)) for p in CORE_MODULES if p.stem != "__init__")


def test_the_contract_can_fail() -> None:
    """The checker itself: a core module importing a reader, and the monitor importing the
    command line, are refused; the launchers' imports are not."""
    assert not allowed("affmon.core.rules.cpu", "affmon.collect.procfs")
    assert not allowed("affmon.tui.screens", "affmon.commands.pinning")
    assert not allowed("affmon.export.state", "affmon.tui.app")
    assert not allowed("affmon.sources.stream", "affmon.actions.journal")
    assert allowed("affmon.commands.tui", "affmon.tui.app")
    assert allowed("affmon.tui.pinner", "affmon.actions.pin")
    assert not allowed("affmon.place.planning", "affmon.commands.plan")
    assert allowed("affmon.commands.plan", "affmon.place.planning")
    assert allowed("affmon.fleet.app", "affmon.tui.widgets.processes")
    assert not allowed("affmon.tui.app", "affmon.fleet.model")
    assert not allowed("affmon.fleet.model", "affmon.commands.argtypes")
    assert allowed("affmon.commands.fleet", "affmon.fleet.source")
    assert sum(1 for p in MODULES if imports(p)) > 50  # the parser sees the imports there are
