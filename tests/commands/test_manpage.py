"""affmon(1): written from the argument parser, so it says what ``--help`` says; the copy the
package installs (``docs/affmon.1``) is that output, names every command and option, and
renders without a warning."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from affmon.cli import build_parser
from affmon.manpage import render

ROOT = Path(__file__).resolve().parent.parent.parent
PAGE = ROOT / "docs" / "affmon.1"


def test_the_installed_page_is_the_one_the_parser_writes():
    assert PAGE.read_text() == render(build_parser()), "stale: run python -m affmon.manpage > docs/affmon.1"


def test_the_package_installs_it_as_a_section_1_page():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["tool"]["setuptools"]["data-files"]["share/man/man1"] == ["docs/affmon.1"]


def test_every_command_and_option_is_in_it_with_its_help():
    page = PAGE.read_text().replace("\\-", "-")
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, command in sub.choices.items():
        assert f".SS {name}\n" in page
        for action in command._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert option in page, (name, option)
    assert "--interval SECONDS\nseconds between samples" in page  # an option and its help, together
    assert "AFFMON_READONLY" in page and "journal.jsonl" in page


def test_it_renders_without_a_warning():
    groff = shutil.which("groff")
    assert groff, "groff is missing (tests/run installs groff-base)"
    out = subprocess.run([groff, "-man", "-Tutf8", "-ww", "-z", str(PAGE)], capture_output=True, text=True)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    text = subprocess.run([groff, "-man", "-Tascii", "-P-c", "-P-b", "-P-u", str(PAGE)], capture_output=True).stdout
    assert b"affmon undo [-h] [--all] [--json] [PID]" in text


def test_every_option_that_takes_a_value_says_its_default():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    missing = []
    for name, command in [("affmon", parser), *sub.choices.items()]:
        for action in command._actions:
            takes_value = action.option_strings and action.nargs != 0
            has_default = action.default not in (None, [], argparse.SUPPRESS)
            if takes_value and has_default and "default" not in (action.help or ""):
                missing.append(f"{name} {action.option_strings[0]}")
    assert not missing, missing
