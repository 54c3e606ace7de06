"""Parsers of /proc files, on files recorded from a live process and on hostile input."""

import contextlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from affmon.collect.procfs import (
    parse_cmdline,
    parse_sched,
    parse_schedstat,
    parse_stat,
    parse_status,
)
from affmon.core.errors import ParseError

RECORDED = Path(__file__).parent.parent / "fixtures" / "proc"


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


def test_stat_recorded_with_parenthesised_name():
    stat = parse_stat(recorded("process.stat"))
    assert stat.comm == "my (odd) name)"
    assert stat.state == "S"
    assert stat.pid == 5569
    assert stat.ppid == 5528
    assert stat.start_ticks == 32727
    assert stat.processor == 1
    assert stat.flags == 4194304


def test_thread_files_recorded():
    stat = parse_stat(recorded("thread.stat"))
    schedstat = parse_schedstat(recorded("thread.schedstat"))
    sched = parse_sched(recorded("thread.sched"))
    status = parse_status(recorded("thread.status"))
    assert stat.pid == 5570
    assert schedstat is not None
    assert (schedstat.cpu_ns, schedstat.wait_ns, schedstat.timeslices) == (1450658805, 3761364, 44)
    assert (sched.voluntary_switches, sched.involuntary_switches, sched.migrations) == (0, 43, 0)
    # status and sched agree on the same task's switch counters
    assert (status.voluntary_switches, status.involuntary_switches) == (0, 43)
    assert status.cpus_allowed == frozenset({0, 1})
    assert status.mems_allowed == frozenset({0})


def test_status_recorded_process():
    status = parse_status(recorded("process.status"))
    assert status.threads == 3
    assert status.ppid == 5528
    assert status.uid == 0


def test_cmdline_recorded():
    text = parse_cmdline((RECORDED / "process.cmdline").read_bytes())
    assert text.startswith("/") and " -c " in text


@pytest.mark.parametrize(
    "comm",
    ["a b", "x) S 1 2 (y", "new\nline", "))", "(", ""],
)
def test_stat_name_with_hostile_characters(comm):
    fields = ["0"] * 52  # fields 1..52 of a 6.x kernel's stat line
    fields[2:4] = ["R", "1"]  # state, ppid
    fields[13:15] = ["7", "3"]  # utime, stime
    fields[21] = "999"  # starttime
    fields[38] = "5"  # processor
    line = f"42 ({comm}) " + " ".join(fields[2:])
    stat = parse_stat(line)
    assert (stat.comm, stat.state, stat.ppid, stat.processor, stat.start_ticks) == (comm, "R", 1, 5, 999)
    assert (stat.utime_ticks, stat.stime_ticks) == (7, 3)


@pytest.mark.parametrize(
    "line", ["", "42 no parens", "42 (x) R 1", "x (y) R 1 2 3 4 5 6 7 8 9 a b c d e f g h i j k l"]
)
def test_stat_garbage_raises_our_error(line):
    with pytest.raises(ParseError):
        parse_stat(line)


def test_stat_without_processor_field_is_unknown():
    line = "42 (x) R 1 42 42 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 999 0 0"
    assert parse_stat(line).processor is None


def test_schedstat_all_zero_means_unknown():
    assert parse_schedstat("0 0 0\n") is None


@pytest.mark.parametrize("text", ["", "1 2", "a b c"])
def test_schedstat_garbage(text):
    with pytest.raises(ParseError):
        parse_schedstat(text)


def test_sched_missing_fields_are_unknown_and_header_is_ignored():
    text = "nr_voluntary_switches (7, #threads: 1)\n----\nnr_switches : 5\nnr_involuntary_switches : 2\n"
    counters = parse_sched(text)
    assert counters.voluntary_switches is None  # only the header named it
    assert counters.involuntary_switches == 2
    assert counters.migrations is None


def test_status_missing_lines_are_unknown():
    status = parse_status("Name:\tx\nPPid:\t7\n")
    assert status.ppid == 7
    assert status.uid is None and status.cpus_allowed is None and status.voluntary_switches is None


@given(st.text(max_size=200))
def test_parsers_raise_only_our_error(text):
    for parser in (parse_stat, parse_schedstat, parse_sched, parse_status):
        with contextlib.suppress(ParseError):
            parser(text)
