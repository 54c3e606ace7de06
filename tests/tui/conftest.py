import time

import pytest


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    """The header shows the recorded time in local time: make it the same everywhere."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
