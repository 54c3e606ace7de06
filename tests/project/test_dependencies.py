"""pyproject.toml's runtime dependencies are exactly the third-party modules the affmon package
imports (wherever the import stands, ``importlib.import_module("name")`` included; imports made
only for the type checker excluded), and what the tests and bench/ import beyond them is in
their optional extras. A dependency that nothing imports is installed on every machine for
nothing; a module imported but not declared works only while another package happens to pull
it in."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent.parent
# The GPU workloads run on the GPU machine's own PyTorch install (bench/README.md), not an extra.
GPU_STACK = {"torch", "torchvision", "numpy"}
FIRST_PARTY = {"affmon", "bench", "tests", "__future__"}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _version_test(test: ast.expr) -> bool | None:
    """The value on this interpreter of a test ``sys.version_info <op> (constant tuple)``; None for any other."""
    if not (
        isinstance(test, ast.Compare)
        and ast.unparse(test.left) == "sys.version_info"
        and all(isinstance(c, ast.Constant | ast.Tuple) for c in test.comparators)
    ):
        return None
    try:
        for constant in test.comparators:
            ast.literal_eval(constant)  # constants only: nothing but sys.version_info is evaluated
    except ValueError:
        return None
    return bool(eval(compile(ast.Expression(test), "<test>", "eval"), {"sys": sys}, {}))


def imported_modules(source: str) -> set[str]:
    """Top-level names of the absolute imports in ``source`` that this interpreter makes:
    outside ``if TYPE_CHECKING:`` and the branches of ``if sys.version_info ...`` it does not take."""
    tree = ast.parse(source)
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        taken = _version_test(node.test)
        dead = node.body if _is_type_checking(node.test) or taken is False else node.orelse if taken else []
        skipped.update(id(inner) for stmt in dead for inner in ast.walk(stmt))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.add(node.args[0].value)
    return {name.split(".")[0] for name in found}


def third_party(folder: str) -> set[str]:
    modules: set[str] = set()
    for path in sorted((ROOT / folder).rglob("*.py")):
        modules |= imported_modules(path.read_text(encoding="utf-8"))
    return {m for m in modules if m not in sys.stdlib_module_names and m not in FIRST_PARTY}


def normalized(requirement: str) -> str:
    """The distribution's name in a requirement (``"nvidia-ml-py>=12.535"``), as PEP 503 compares names."""
    name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert name is not None, requirement
    return re.sub(r"[-_.]+", "-", name[1]).lower()


def distributions(modules: set[str]) -> set[str]:
    """The installed distributions that provide ``modules`` (each must be installed)."""
    providers = importlib.metadata.packages_distributions()
    missing = sorted(m for m in modules if m not in providers)
    assert not missing, f"imported but not installed: {missing}"
    return {normalized(dist) for m in modules for dist in providers[m]}


def project() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        table = tomllib.load(f)["project"]
    assert isinstance(table, dict)
    return table


def declared(requirements: object) -> set[str]:
    assert isinstance(requirements, list)
    return {normalized(r) for r in requirements}


def test_runtime_dependencies_are_exactly_what_affmon_imports() -> None:
    imported = distributions(third_party("affmon"))
    runtime = declared(project()["dependencies"])
    assert imported - runtime == set(), "imported by affmon but not in [project.dependencies]"
    assert runtime - imported == set(), "in [project.dependencies] but never imported by affmon"


def test_what_the_tests_import_is_in_the_runtime_or_the_test_extra() -> None:
    table = project()
    extras = table["optional-dependencies"]
    assert isinstance(extras, dict)
    allowed = declared(table["dependencies"]) | declared(extras["test"])
    assert distributions(third_party("tests")) - allowed == set()


def test_what_bench_imports_is_in_the_runtime_the_bench_extra_or_the_gpu_stack() -> None:
    table = project()
    extras = table["optional-dependencies"]
    assert isinstance(extras, dict)
    allowed = declared(table["dependencies"]) | declared(extras["bench"])
    assert distributions(third_party("bench") - GPU_STACK) - allowed == set()


def test_the_import_walk_sees_every_form_of_import() -> None:
    source = (
        "import os, yaml.loader\nfrom requests import get\nfrom . import sibling\n"
        "import importlib\nnvml = importlib.import_module('pynvml')\n"
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from _typeshed import Foo\n    import attr\n"
        "def f():\n    import rich.text\n"
        "import sys\nif sys.version_info >= (3, 0):\n    import tomllib\nelse:\n    import tomli\n"
        "if sys.version_info < (3, 0):\n    import toml\n"
    )
    assert imported_modules(source) == {
        "os",
        "yaml",
        "requests",
        "importlib",
        "pynvml",
        "typing",
        "rich",
        "sys",
        "tomllib",
    }
