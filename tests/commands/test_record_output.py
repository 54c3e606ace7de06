"""``affmon record`` when its output fails: a full device is one line and exit 2, a reader
that goes away ends the recording quietly (as ``ps | head`` does) without waiting for
the next interval, and neither leaves a traceback."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers.recording_cli import affmon, one_line_error


def test_record_to_an_existing_device_needs_force():
    line = one_line_error(affmon("record", "/dev/full", "--duration", "0.1", "--interval", "0.1"))
    assert "/dev/full exists" in line and "--force" in line


def test_record_to_a_full_device_is_one_line():
    line = one_line_error(affmon("record", "/dev/full", "--force", "--duration", "0.1", "--interval", "0.1"))
    assert line == "affmon: cannot write /dev/full: No space left on device"


def test_record_to_standard_output_on_a_full_device_is_one_line():
    with open("/dev/full", "w") as full:
        out = subprocess.run(
            [sys.executable, "-m", "affmon", "record", "-", "--duration", "0.1", "--interval", "0.1"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert out.returncode == 2, out.stderr
    assert out.stderr == "affmon: cannot write to standard output: No space left on device\n"


def test_record_ends_quietly_and_soon_when_its_reader_goes_away():
    # A 600 s interval: the recording would write again only after ten minutes; it must
    # notice the closed pipe while it waits.
    proc = subprocess.Popen(
        [sys.executable, "-m", "affmon", "record", "-", "--duration", "1200", "--interval", "600"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        head = proc.stdout.read(200)  # as `head -c 200`
        assert head.startswith(b'{"affmon_recording": 1')
        proc.stdout.close()
        assert proc.wait(timeout=120) == 0
        assert proc.stderr.read() == b""
    finally:
        proc.kill()
        proc.wait()
