"""The overrides of Textual's privates (``affmon.tui.textual_fast``): the Textual they were
written against, the one switch, and the monitor on stock Textual outside that range or
with the switch off."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from textual.drivers.linux_driver import LinuxDriver

from affmon.tui import textual_fast
from affmon.tui.textual_fast import ALL, DRIVER, SWITCH, TABLE, LeanTable, QuietLinuxDriver
from tests.tui.helpers import list_app, step

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_the_installed_textual_is_one_the_overrides_were_written_against():
    assert textual_fast.in_range(textual_fast.textual_version())
    assert textual_fast.overrides(environ={}) == ALL


def test_pyproject_asks_for_the_range_the_overrides_were_written_against():
    requirements = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (textual,) = [r for r in requirements if re.match(r"textual\s*[<>=!~]", r)]
    found = re.fullmatch(r"textual\s*>=\s*([\d.]+)\s*,\s*<\s*([\d.]+)", textual)
    assert found is not None, textual
    low, high = (textual_fast.parse_version(v) for v in found.groups())
    assert low + (0,) * (3 - len(low)) == textual_fast.TEXTUAL_FROM
    assert high + (0,) * (3 - len(high)) == textual_fast.TEXTUAL_BELOW


def test_versions_are_read_by_their_numbers():
    assert textual_fast.parse_version("8.2.8") == (8, 2, 8)
    assert textual_fast.parse_version("8.3.0a1") == (8, 3, 0)
    assert textual_fast.parse_version("8.2.8+local") == (8, 2, 8)
    assert textual_fast.parse_version("8.2.dev1") == (8, 2)


@pytest.mark.parametrize(
    ("version", "on"),
    [
        ((7, 4, 0), False),  # its DataTable draws a row's end without the place a click reads
        (textual_fast.TEXTUAL_FROM, True),
        ((8, 2, 8), True),
        (textual_fast.TEXTUAL_BELOW, False),
        ((9, 0, 0), False),
    ],
)
def test_outside_the_range_every_override_is_off_whatever_is_asked(version, on):
    expected = ALL if on else frozenset()
    assert textual_fast.overrides(environ={}, textual=version) == expected
    assert textual_fast.overrides(ALL, textual=version) == expected
    assert textual_fast.overrides(environ={SWITCH: "1"}, textual=version) == frozenset()


@pytest.mark.parametrize(
    ("value", "on"),
    [
        ("", ALL),
        ("0", ALL),
        ("1", frozenset()),
        ("yes", frozenset()),  # not a list of names: stock Textual
        ("table", {DRIVER}),
        (" driver ", {TABLE}),
        ("driver,table", frozenset()),
        ("table,bogus", frozenset()),
        ("compositor", frozenset()),  # an override there is no more
    ],
)
def test_the_switch(value, on):
    assert textual_fast.overrides(environ={SWITCH: value}) == on


def test_the_app_reads_the_switch_from_the_environment(monkeypatch):
    monkeypatch.setenv(SWITCH, "driver")
    assert list_app("clean").textual_overrides == {TABLE}
    assert list_app("clean", textual_overrides=[DRIVER]).textual_overrides == {DRIVER}  # asked: as asked
    monkeypatch.setenv(SWITCH, "1")
    assert list_app("clean").textual_overrides == frozenset()


def stock(app) -> bool:
    """Whether every part of ``app`` an override would replace is Textual's own."""
    return (
        app.get_driver_class() is LinuxDriver
        and not isinstance(app.panes.table, LeanTable)
        and not isinstance(app.panes.threads, LeanTable)
    )


def test_the_app_on_stock_textual_outside_the_range(monkeypatch):
    monkeypatch.delenv(SWITCH, raising=False)
    app = list_app("clean")
    assert app.textual_overrides == ALL
    assert app.get_driver_class() is QuietLinuxDriver
    assert isinstance(app.panes.table, LeanTable) and isinstance(app.panes.threads, LeanTable)
    monkeypatch.setattr(textual_fast, "textual_version", lambda: textual_fast.TEXTUAL_BELOW)
    for app in (list_app("clean"), list_app("clean", textual_overrides=ALL)):
        assert app.textual_overrides == frozenset() and stock(app)


async def test_the_app_on_stock_textual_with_the_switch_off(monkeypatch):
    monkeypatch.setenv(SWITCH, "1")
    app = list_app("hogs")
    assert stock(app)

    async with app.run_test(size=(140, 40)) as pilot:
        await step(app, pilot, 3)
        assert app.view is not None and app.view.measured
        assert app.panes.table.row_count > 0 and app.panes.table.selected_key is not None
