import pytest
from hypothesis import given
from hypothesis import strategies as st

from affmon.core.errors import ParseError
from affmon.core.model.cpuset import MAX_CPU_ID, format_cpulist, format_cpumask, parse_cpulist, parse_cpumask


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("", set()),
        ("\n", set()),
        ("0", {0}),
        ("0-3", {0, 1, 2, 3}),
        ("0-7,16-23\n", set(range(8)) | set(range(16, 24))),
        ("1,3,5", {1, 3, 5}),
        ("0-3,2-5", set(range(6))),  # overlapping ranges are a union
        ("0-15:4", {0, 4, 8, 12}),
        ("3-3", {3}),
    ],
)
def test_parse_cpulist(text, cpus):
    assert parse_cpulist(text) == frozenset(cpus)


@pytest.mark.parametrize("text", ["a", "1-", "-1", "3-1", "1,,2", "0x3", "1-2-3", "0-7:0", f"{MAX_CPU_ID + 1}", "١"])
def test_parse_cpulist_rejects_garbage(text):
    with pytest.raises(ParseError):
        parse_cpulist(text)


@pytest.mark.parametrize(
    ("cpus", "text"),
    [(set(), ""), ({0}, "0"), ({0, 1}, "0-1"), ({0, 1, 2, 5, 7, 8}, "0-2,5,7-8"), ({3, 1}, "1,3")],
)
def test_format_cpulist_is_canonical(cpus, text):
    assert format_cpulist(cpus) == text


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("ff", set(range(8))),
        ("ff,ffffffff", set(range(40))),
        ("0x000000ff,0xffffffff", set(range(40))),  # hwloc's spelling
        ("0x0", set()),
        ("00000001,00000000", {32}),
        ("0x00555555", {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22}),
        ("0x00000001,,,0x00000003", {96, 0, 1}),  # hwloc leaves zero words out
    ],
)
def test_parse_cpumask(text, cpus):
    assert parse_cpumask(text) == frozenset(cpus)


@pytest.mark.parametrize("text", ["", "xyz", "0x1ffffffff", "0xf...f", "1,,2", ",", "0x"])
def test_parse_cpumask_rejects_garbage(text):
    with pytest.raises(ParseError):
        parse_cpumask(text)


def test_format_cpumask_matches_kernel_spelling():
    assert format_cpumask(range(40)) == "ff,ffffffff"
    assert format_cpumask({32}) == "1,00000000"
    assert format_cpumask(()) == "0"


cpu_sets = st.frozensets(st.integers(min_value=0, max_value=2048), max_size=200)


@given(cpu_sets)
def test_cpulist_round_trip(cpus):
    assert parse_cpulist(format_cpulist(cpus)) == cpus


@given(cpu_sets)
def test_cpumask_round_trip(cpus):
    assert parse_cpumask(format_cpumask(cpus)) == cpus


@given(st.text(max_size=30))
def test_cpulist_parses_or_raises_our_error(text):
    try:
        result = parse_cpulist(text)
    except ParseError:
        return
    assert all(0 <= c <= MAX_CPU_ID for c in result)
