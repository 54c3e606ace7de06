"""The core imports nothing that touches the system or the screen (value types, arithmetic, rules)."""

import pkgutil
import subprocess
import sys

import affmon.core

FORBIDDEN = ("textual", "psutil", "pynvml", "plotext", "textual_plotext", "affmon.collect", "affmon.nvml")


def test_core_imports_no_ui_system_or_nvml_module():
    import affmon.tui.model

    modules = [m.name for m in pkgutil.walk_packages(affmon.core.__path__, "affmon.core.")]
    assert {"affmon.core.rules.evaluate", "affmon.core.plan.planner", "affmon.core.recording.format"} <= set(modules)
    # The monitor's model is pure too: built and checked from recordings without a screen.
    modules += [f"affmon.tui.model.{m.name}" for m in pkgutil.iter_modules(affmon.tui.model.__path__)]
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in modules)
        + f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r} or m.startswith({FORBIDDEN!r}))\n"
        + "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"core pulled in: {out.stdout.strip()}"


def test_the_check_itself_catches_a_forbidden_import():
    # The same probe on a module that does import psutil must report it.
    code = "import sys\nimport affmon.nvml, psutil\nprint('psutil' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_only_the_gateway_imports_pynvml():
    import pathlib

    root = pathlib.Path(affmon.core.__file__).parent.parent
    users = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if "pynvml" in p.read_text() and ("import pynvml" in p.read_text() or '"pynvml"' in p.read_text())
    )
    assert users == ["nvml.py"]
