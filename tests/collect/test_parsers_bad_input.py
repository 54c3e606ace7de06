"""Property-based tests of every parser of outside text (bad input).

Each parser either gives the right answer (checked against a model of the input, or by
a round trip through the matching writer) or raises ``ParseError``, the project's own
error that the CLI prints as one line. No other exception, no made-up value (a negative
counter, a NaN time, a string where a number belongs), and no input may make a parser
spend seconds (the CPU-set parsers are fed sets that are huge in the way a hostile file
can make them). The example-based tests beside these (``test_cpuset.py``,
``test_procfs_parse.py``, ``test_cgroup.py``, ``test_topology_hwloc_xml.py``,
``test_recording.py``) are not repeated here.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from affmon.collect.cgroup import Mount, cgroup_cpuset, parse_mounts
from affmon.collect.hwloc_xml import read_hwloc_xml
from affmon.collect.procfs import parse_sched, parse_schedstat, parse_stat, parse_status
from affmon.core.errors import ParseError
from affmon.core.model.cpuset import MAX_CPU_ID, format_cpulist, format_cpumask, parse_cpulist, parse_cpumask
from affmon.core.model.samples import GpuProcess, GpuSample, PcieLink, ProcessSample, Sample, ThreadSample
from affmon.core.model.topology import CacheGroup, Core, Gpu, NumaNode, Package, Topology
from affmon.core.recording.format import header_line, read_recording, sample_line
from tests.helpers.hwloc_xml import MINIMAL_V2, document, gpu_under_bridge, machine, obj, pu

FAST = settings(max_examples=200, deadline=None)
SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
U64 = st.integers(min_value=0, max_value=2**64 - 1)


def one_line(exc: BaseException) -> str:
    message = str(exc)
    assert message and "\n" not in message, repr(message)
    return message


# ---------------------------------------------------------------------------------
# CPU lists and masks


cpu_ids = st.integers(min_value=0, max_value=MAX_CPU_ID + 5000)
ranges = st.tuples(cpu_ids, st.integers(min_value=0, max_value=300), st.integers(min_value=1, max_value=9))


@FAST
@given(st.lists(ranges, max_size=12), st.sampled_from(["", " ", "\t"]), st.booleans())
def test_cpulist_matches_a_model_of_its_items(items, pad, newline):
    """Single ids, ``a-b`` and ``a-b:s`` items, overlapping or not, ids up to past the
    limit: the union of the items, or a ParseError when an id is past MAX_CPU_ID."""
    parts = []
    expected: set[int] = set()
    for first, length, stride in items:
        last = first + length
        if length == 0:
            parts.append(f"{first}")
        elif stride == 1:
            parts.append(f"{first}-{last}")
        else:
            parts.append(f"{first}-{last}:{stride}")
        expected.update(range(first, last + 1, stride if length else 1))
    text = pad + f"{pad},{pad}".join(parts) + ("\n" if newline else "")
    too_big = any(first + length > MAX_CPU_ID or first > MAX_CPU_ID for first, length, _ in items)
    if too_big:
        with pytest.raises(ParseError) as info:
            parse_cpulist(text)
        one_line(info.value)
    else:
        assert parse_cpulist(text) == frozenset(expected)


@FAST
@given(st.text(alphabet="0123456789-,:x \t\n", max_size=40))
def test_cpulist_near_miss_garbage(text):
    """Text made of a cpulist's own characters: a set of ids in range, or our error."""
    try:
        result = parse_cpulist(text)
    except ParseError as exc:
        one_line(exc)
        return
    assert all(0 <= cpu <= MAX_CPU_ID for cpu in result)
    assert parse_cpulist(format_cpulist(result)) == result


def test_cpulist_of_many_huge_overlapping_ranges_is_quick():
    """Ten thousand copies of the widest range: the set stays small, and so must the work
    (it took 18 s before the parser bounded the ids it enumerates)."""
    text = ",".join([f"0-{MAX_CPU_ID}"] * 10_000)
    started = time.perf_counter()
    try:
        result = parse_cpulist(text)
    except ParseError as exc:
        assert "too many" in one_line(exc)
    else:
        assert result == frozenset(range(MAX_CPU_ID + 1))
    assert time.perf_counter() - started < 2.0


def test_cpulist_at_the_limit():
    assert parse_cpulist(str(MAX_CPU_ID)) == {MAX_CPU_ID}
    assert parse_cpulist(format_cpulist({0, MAX_CPU_ID})) == {0, MAX_CPU_ID}
    for text in (str(MAX_CPU_ID + 1), f"0-{MAX_CPU_ID + 1}", "9" * 5000, f"{MAX_CPU_ID}-{10**30}"):
        with pytest.raises(ParseError):
            parse_cpulist(text)


def hwloc_mask(cpus: frozenset[int]) -> str:
    """hwloc's spelling: ``0x`` words, all-zero words between others left out."""
    value = sum(1 << c for c in cpus)
    words = []
    while True:
        words.append(value & 0xFFFFFFFF)
        value >>= 32
        if not value:
            break
    words.reverse()
    return ",".join(f"0x{w:08x}" if w or i == 0 or i == len(words) - 1 else "" for i, w in enumerate(words))


cpu_sets = st.frozensets(st.integers(min_value=0, max_value=MAX_CPU_ID), max_size=60)


@FAST
@given(cpu_sets)
def test_hwloc_mask_spelling_round_trip(cpus):
    assert parse_cpumask(hwloc_mask(cpus)) == cpus


@FAST
@given(cpu_sets)
def test_every_spelling_of_the_same_set_agrees(cpus):
    assert parse_cpumask(format_cpumask(cpus)) == parse_cpulist(format_cpulist(cpus)) == cpus


def test_mask_at_the_limit():
    assert parse_cpumask(format_cpumask({MAX_CPU_ID})) == {MAX_CPU_ID}
    with pytest.raises(ParseError):
        parse_cpumask(format_cpumask({MAX_CPU_ID + 1}))


@FAST
@given(st.text(alphabet="0123456789abcdefABCDEFxX,. \n", max_size=60))
def test_mask_near_miss_garbage(text):
    try:
        result = parse_cpumask(text)
    except ParseError as exc:
        one_line(exc)
        return
    assert all(0 <= cpu <= MAX_CPU_ID for cpu in result)
    assert parse_cpumask(format_cpumask(result)) == result


@pytest.mark.parametrize("words", [100_000, 1_000_000])
def test_mask_with_a_million_elided_words_is_refused_quickly(words):
    """hwloc leaves zero words out (``0x1,,,``): a file of commas made the parser shift an
    ever larger number once per comma, quadratic time (minutes for a 1 MB file)."""
    started = time.perf_counter()
    with pytest.raises(ParseError) as info:
        parse_cpumask("0x1" + "," * words)
    assert "too large" in one_line(info.value)
    assert time.perf_counter() - started < 1.0


# ---------------------------------------------------------------------------------
# /proc/PID/stat, status, schedstat, sched


@st.composite
def stat_lines(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A stat line as 3.x-6.x kernels print it, with any name (spaces, parentheses,
    newlines, non-ASCII) and 22 to 60 fields; returns the line and what it holds."""
    comm = draw(st.text(max_size=20))
    values = {
        "pid": draw(st.integers(min_value=1, max_value=2**22)),
        "state": draw(st.sampled_from("RSDZTtXxKWPI")),
        "ppid": draw(st.integers(min_value=0, max_value=2**22)),
        "flags": draw(st.integers(min_value=0, max_value=2**32 - 1)),
        "utime_ticks": draw(U64),
        "stime_ticks": draw(U64),
        "start_ticks": draw(U64),
        "processor": draw(st.integers(min_value=0, max_value=MAX_CPU_ID)),
        "session": draw(st.integers(min_value=0, max_value=2**22)),
    }
    count = draw(st.integers(min_value=22, max_value=60))
    fields_ = ["0"] * (count + 1)  # 1-based: fields_[n] is field n
    fields_[3], fields_[4], fields_[9] = values["state"], str(values["ppid"]), str(values["flags"])
    fields_[6] = str(values["session"])
    fields_[14], fields_[15], fields_[22] = (
        str(values["utime_ticks"]),
        str(values["stime_ticks"]),
        str(values["start_ticks"]),
    )
    fields_[18], fields_[19] = "-100", "-20"  # priority and nice may be negative: not read
    vsize = draw(U64)
    if count >= 23:
        fields_[23] = str(vsize)
    values["vsize_bytes"] = vsize if count >= 23 else None
    if count >= 39:
        fields_[39] = str(values["processor"])
    else:
        values["processor"] = None
    line = f"{values['pid']} ({comm}) " + " ".join(fields_[3:]) + "\n"
    return line, {"comm": comm, **values}


@FAST
@given(stat_lines())
def test_stat_line_round_trip(case):
    line, expected = case
    stat = parse_stat(line)
    assert {f.name: getattr(stat, f.name) for f in fields(stat)} == expected


@FAST
@given(stat_lines(), st.data())
def test_damaged_stat_line_parses_to_kernel_values_or_raises(case, data):
    """A field replaced by junk, or the line cut short: our error, or values the kernel
    could have printed (none of the fields read is ever negative)."""
    line, _ = case
    head, close, tail = line.rpartition(")")
    words = tail.split()
    if data.draw(st.booleans(), label="cut"):
        words = words[: data.draw(st.integers(min_value=0, max_value=len(words)), label="keep")]
    else:
        index = data.draw(st.integers(min_value=0, max_value=len(words) - 1), label="index")
        words[index] = data.draw(
            st.sampled_from(["-1", "+5", "1_000", "３", "0x10", "", "1.5", "9" * 5000, "nan"]), label="junk"
        )
    damaged = head + close + " " + " ".join(words)
    try:
        stat = parse_stat(damaged)
    except ParseError as exc:
        one_line(exc)
        return
    for name in ("pid", "ppid", "flags", "utime_ticks", "stime_ticks", "start_ticks"):
        value = getattr(stat, name)
        assert isinstance(value, int) and value >= 0, (name, value)
    assert stat.processor is None or stat.processor >= 0


STATUS_KEYS = {
    "Uid": "uid",
    "PPid": "ppid",
    "Threads": "threads",
    "voluntary_ctxt_switches": "voluntary_switches",
    "nonvoluntary_ctxt_switches": "involuntary_switches",
}


@st.composite
def status_texts(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """Some of the lines affmon reads, in any order, among lines it does not know."""
    lines = []
    expected: dict[str, Any] = dict.fromkeys([*STATUS_KEYS.values(), "cpus_allowed", "mems_allowed"])
    for key, name in STATUS_KEYS.items():
        if draw(st.booleans()):
            value = draw(U64)
            expected[name] = value
            rest = "\t0\t0\t0" if key == "Uid" else ""
            lines.append(f"{key}:\t{value}{rest}")
    for key, name in (("Cpus_allowed_list", "cpus_allowed"), ("Mems_allowed_list", "mems_allowed")):
        if draw(st.booleans()):
            cpus = draw(cpu_sets)
            expected[name] = cpus
            lines.append(f"{key}:\t{format_cpulist(cpus)}")
    extra_key = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_ABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=1, max_size=12)
    for key in draw(st.lists(extra_key.filter(lambda k: k not in STATUS_KEYS and "allowed" not in k), max_size=6)):
        lines.append(
            f"{key}:\t{draw(st.text(alphabet=st.characters(blacklist_characters=chr(10) + chr(13)), max_size=20))}"
        )
    # The name is the process's to choose: characters Python takes for line breaks must
    # not let it forge the lines after it.
    forged = "\x1cUid:\t4242\x85PPid:\t7\u2028Threads:\t9\x1eCpus_allowed_list:\t0-3\x0bMems_allowed_list:\t5"
    lines.append(draw(st.sampled_from(["", "no colon here", "Name:\tpython3: worker (x)", f"Name:\tx{forged}"])))
    return "\n".join(draw(st.permutations(lines))) + "\n", expected


@FAST
@given(status_texts())
def test_status_known_lines_read_and_the_rest_unknown(case):
    text, expected = case
    status = parse_status(text)
    assert {f.name: getattr(status, f.name) for f in fields(status)} == expected


@FAST
@given(st.sampled_from([*STATUS_KEYS, "Cpus_allowed_list"]), st.text(max_size=12))
def test_status_junk_value_parses_or_raises(key, junk):
    try:
        status = parse_status(f"Name:\tx\n{key}:\t{junk}\n")
    except ParseError as exc:
        one_line(exc)
        return
    for f in fields(status):
        value = getattr(status, f.name)
        assert value is None or isinstance(value, frozenset) or (isinstance(value, int) and value >= 0)


@FAST
@given(st.lists(U64, min_size=3, max_size=6))
def test_schedstat_extra_fields_are_ignored(numbers):
    parsed = parse_schedstat(" ".join(map(str, numbers)) + "\n")
    if numbers[:3] == [0, 0, 0]:
        assert parsed is None  # sched_info off: unknown
    else:
        assert parsed is not None and (parsed.cpu_ns, parsed.wait_ns, parsed.timeslices) == tuple(numbers[:3])


@FAST
@given(st.lists(st.sampled_from(["1", "0", "-1", "+2", "３", "x", "1.5", "", "9" * 5000]), max_size=4))
def test_schedstat_missing_or_junk_fields(words):
    try:
        parsed = parse_schedstat(" ".join(words))
    except ParseError as exc:
        one_line(exc)
        return
    assert parsed is None or min(parsed.cpu_ns, parsed.wait_ns, parsed.timeslices) >= 0


SCHED_KEYS = {
    "nr_voluntary_switches": "voluntary_switches",
    "nr_involuntary_switches": "involuntary_switches",
    "se.nr_migrations": "migrations",
}


@st.composite
def sched_texts(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """The header (a name that may itself look like a counter line), the dashes, then
    some counters among lines affmon ignores (floats, other keys)."""
    name = draw(st.sampled_from(["python3", "nr_voluntary_switches : 99", "a : b (c)"]))
    lines = [f"{name} (1234, #threads: 3)", "-" * 60]
    expected: dict[str, Any] = dict.fromkeys(SCHED_KEYS.values())
    for key, field_name in SCHED_KEYS.items():
        if draw(st.booleans()):
            value = draw(U64)
            expected[field_name] = value
            lines.append(f"{key:<45}: {value:>20}")
    lines += draw(
        st.lists(st.sampled_from(["se.exec_start : 123.456", "nr_switches : 12", "policy : 0", "junk", ""]), max_size=5)
    )
    body = lines[2:]
    return "\n".join(lines[:2] + draw(st.permutations(body))) + "\n", expected


@FAST
@given(sched_texts())
def test_sched_counters_read_and_the_rest_unknown(case):
    text, expected = case
    counters = parse_sched(text)
    assert {f.name: getattr(counters, f.name) for f in fields(counters)} == expected


@FAST
@given(st.sampled_from(list(SCHED_KEYS)), st.sampled_from(["-5", "+5", "３", "5 6", "", "x", "1e5", "9" * 5000]))
def test_sched_junk_counter_parses_or_raises(key, junk):
    try:
        counters = parse_sched(f"x (1, #threads: 1)\n---\n{key} : {junk}\n")
    except ParseError as exc:
        one_line(exc)
        return
    for f in fields(counters):
        value = getattr(counters, f.name)
        assert value is None or value >= 0


# ---------------------------------------------------------------------------------
# Mount tables and cgroup trees


def kernel_escape(text: str) -> str:
    """What the kernel's ``mangle()`` does to a field of /proc/mounts."""
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in text)


field_text = st.text(
    alphabet=st.characters(min_codepoint=9, max_codepoint=0x2FF, blacklist_characters="\r,"), min_size=1, max_size=16
)


@FAST
@given(
    st.lists(
        st.tuples(
            field_text,
            field_text,
            st.text(alphabet="abcdefgh2", min_size=1, max_size=8),
            st.frozensets(field_text, min_size=1, max_size=4),
        ),
        max_size=6,
    )
)
def test_mount_table_round_trip(rows):
    text = "".join(
        f"{kernel_escape(d)} {kernel_escape(m)} {t} {','.join(kernel_escape(o) for o in sorted(opts))} 0 0\n"
        for d, m, t, opts in rows
    )
    assert parse_mounts(text) == tuple(Mount(d, m, t, opts) for d, m, t, opts in rows)


@FAST
@given(st.text(max_size=120))
def test_mount_table_garbage(text):
    try:
        mounts = parse_mounts(text)
    except ParseError as exc:
        one_line(exc)
        return
    assert all(isinstance(m, Mount) and m.fstype for m in mounts)


KINDS = {
    # kind -> (mount line, file name for cpus, line in /proc/PID/cgroup before the path)
    "v2": ("cgroup2 {mp} cgroup2 rw,nsdelegate 0 0", "cpuset.cpus.effective", "0::"),
    "v1": ("cgroup {mp} cgroup rw,cpuset 0 0", "cpuset.effective_cpus", "4:cpuset:"),
    "v1-noprefix": ("cgroup {mp} cgroup rw,cpuset,noprefix 0 0", "effective_cpus", "4:cpu,cpuset:"),
    "cpusetfs": ("none {mp} cpuset rw 0 0", "effective_cpus", None),
}
names = st.text(alphabet="abcxyz-._ 0", min_size=1, max_size=6).filter(lambda n: n not in (".", ".."))


@st.composite
def cgroup_trees(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(sorted(KINDS)))
    depth = draw(st.integers(min_value=0, max_value=3))
    return {
        "kind": kind,
        "mountpoint": draw(st.sampled_from(["/sys/fs/cgroup", "/sys/fs/cgroup/cpuset", "/dev/cp set", "/m"])),
        "parts": draw(st.lists(names, min_size=depth, max_size=depth)),
        # per level from the mount point down: the set written there, or None for no file
        "sets": draw(st.lists(st.none() | cpu_sets, min_size=depth + 1, max_size=depth + 1)),
        "leaf_exists": draw(st.booleans()),
        "via_cpuset_file": draw(st.booleans()),  # the path from /proc/PID/cpuset instead
        "noise_mounts": draw(
            st.lists(st.sampled_from(["proc /proc proc rw 0 0", "cgroup /x cgroup rw,memory 0 0"]), max_size=3)
        ),
        "v2_controllers": draw(st.sampled_from(["cpuset cpu", "cpu io", ""])),
    }


def build_cgroup_tree(root: Path, t: dict[str, Any]) -> frozenset[int] | None:
    """Write the tree; return what ``cgroup_cpuset`` must answer (the module's rules)."""
    mount_line, name, prefix = KINDS[t["kind"]]
    mp = t["mountpoint"]
    mounts = [*t["noise_mounts"], mount_line.format(mp=kernel_escape(mp))]
    proc = root / "proc/1"
    proc.mkdir(parents=True)
    (root / "proc/mounts").write_text("\n".join(mounts) + "\n")
    path = "/" + "/".join(t["parts"])
    if t["via_cpuset_file"] or prefix is None:
        (proc / "cgroup").write_text("1:name=systemd:/\n")
        (proc / "cpuset").write_text(path + "\n")
    else:
        (proc / "cgroup").write_text(f"1:name=systemd:/\n{prefix}{path}\n")
    base = root / mp.lstrip("/")
    base.mkdir(parents=True, exist_ok=True)
    if t["kind"] == "v2":
        (base / "cgroup.controllers").write_text(t["v2_controllers"] + "\n")
    directories = [base]
    for part in t["parts"]:
        directories.append(directories[-1] / part)
    for level, directory in enumerate(directories):
        is_leaf = level == len(directories) - 1
        if is_leaf and not t["leaf_exists"] and level > 0:
            break
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "cgroup.procs").write_text("")
        if t["sets"][level] is not None:
            (directory / name).write_text(format_cpulist(t["sets"][level]) + "\n")
    leaf_ok = t["leaf_exists"] or not t["parts"]
    if t["kind"] == "v2":
        if "cpuset" not in t["v2_controllers"].split() or not leaf_ok:
            return None
        return next((s for s in reversed(t["sets"]) if s is not None), None)
    return t["sets"][-1] if leaf_ok else None  # v1: the leaf's own file, no walk


@SLOW
@given(cgroup_trees())
def test_cgroup_cpuset_on_generated_trees(tree):
    with tempfile.TemporaryDirectory() as tmp:
        expected = build_cgroup_tree(Path(tmp), tree)
        assert cgroup_cpuset(tmp, 1) == expected


@pytest.mark.parametrize(
    ("cgroup", "mounts"),
    [
        ("0::/a\0b\n", "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n"),  # NUL in the path
        ("0::/job\n", "cgroup2 /sys/fs/cg\\000x cgroup2 rw 0 0\n"),  # NUL in the mount point
        ("0::/" + "n" * 5000 + "\n", "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n"),  # ENAMETOOLONG
        ("0::/" + "/".join(["d" * 200] * 30) + "\n", "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n"),
        ("0::/loop\n", "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n"),  # a symlink loop
        ("0::/../../etc\n", "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n"),
    ],
    ids=["nul-path", "nul-mount", "long-name", "long-path", "loop", "dotdot"],
)
def test_cgroup_paths_no_file_can_have_are_unknown(tmp_path, cgroup, mounts):
    (tmp_path / "proc/1").mkdir(parents=True)
    (tmp_path / "proc/mounts").write_text(mounts)
    (tmp_path / "proc/1/cgroup").write_text(cgroup)
    cg = tmp_path / "sys/fs/cgroup"
    cg.mkdir(parents=True)
    (cg / "cgroup.controllers").write_text("cpuset\n")
    (cg / "cpuset.cpus.effective").write_text("0-3\n")
    os.symlink("loop", cg / "loop")
    assert cgroup_cpuset(str(tmp_path), 1) is None


# ---------------------------------------------------------------------------------
# hwloc XML


@st.composite
def hwloc_documents(draw: st.DrawFn) -> tuple[str, frozenset[int]]:
    """A valid hwloc 2 document: packages of cores of PUs under L3 caches, one NUMA node
    per package, maybe a GPU. Returns the text and its online CPUs."""
    packages = draw(st.integers(min_value=1, max_value=3))
    cores = draw(st.integers(min_value=1, max_value=3))
    smt = draw(st.integers(min_value=1, max_value=2))
    children = []
    cpu = 0
    for p in range(packages):
        first = cpu
        core_objs = []
        for c in range(cores):
            pus = [pu(cpu + i) for i in range(smt)]
            core_objs.append(obj("Core", *pus, cpu_list=f"{cpu}-{cpu + smt - 1}", node_list=str(p), os_index=str(c)))
            cpu += smt
        cpus = f"{first}-{cpu - 1}"
        l3 = obj("L3Cache", *core_objs, cpu_list=cpus, node_list=str(p), depth="3", cache_type="0")
        node = obj("NUMANode", cpu_list=cpus, node_list=str(p), os_index=str(p), local_memory="1024")
        extra = [gpu_under_bridge(f"0000:0{p}:00.0")] if draw(st.booleans()) else []
        children.append(obj("Package", node, l3, *extra, cpu_list=cpus, node_list=str(p), os_index=str(p)))
    text = document(machine(*children, cpu_list=f"0-{cpu - 1}", node_list=f"0-{packages - 1}"))
    return text, frozenset(range(cpu))


def read_or_refuse(path: Path) -> Topology | None:
    try:
        return read_hwloc_xml(str(path))
    except ParseError as exc:
        assert type(exc) is ParseError
        assert str(path) in one_line(exc)
        return None


@SLOW
@given(hwloc_documents())
def test_generated_hwloc_documents_read(doc):
    text, online = doc
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "t.xml")
        path.write_text(text)
        topo = read_hwloc_xml(str(path))
    assert topo.online_cpus == topo.allowed_cpus == online
    assert sum(len(c.cpus) for c in topo.cores) == len(online)


@SLOW
@given(hwloc_documents(), st.data())
def test_hwloc_documents_truncated_anywhere(doc, data):
    text, _ = doc
    cut = data.draw(st.integers(min_value=0, max_value=len(text) - 1), label="cut")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "t.xml")
        path.write_text(text[:cut])
        assert read_or_refuse(path) is None or cut >= text.rindex("</topology>") + len("</topology>")


@SLOW
@given(hwloc_documents(), st.data())
def test_hwloc_documents_missing_any_attribute(doc, data):
    """Remove one attribute anywhere: read (it was optional) or our error naming the file."""
    text, online = doc
    attrs = list(re.finditer(r' (\w+)="[^"]*"', text))
    victim = data.draw(st.sampled_from(attrs), label="attribute")
    damaged = text[: victim.start()] + text[victim.end() :]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "t.xml")
        path.write_text(damaged)
        topo = read_or_refuse(path)
    if topo is not None:
        assert topo.online_cpus <= online


@pytest.mark.parametrize("kind", ["L" + "9" * 5000 + "Cache", "L３Cache", "L-1Cache", "LCache"])
def test_odd_cache_type_names_are_walked_through(tmp_path, kind):
    text = MINIMAL_V2.replace('<object type="Core"', f'<object type="{kind}" depth="3"><object type="Core"', 1)
    assert '</object>\n      <object type="Bridge"' in text
    text = text.replace('</object>\n      <object type="Bridge"', '</object></object>\n      <object type="Bridge"', 1)
    path = tmp_path / "t.xml"
    path.write_text(text)
    topo = read_or_refuse(path)
    assert topo is not None and topo.online_cpus == {0, 1}


@FAST
@given(st.text(alphabet="0123456789.x-v ", max_size=12) | st.just("9" * 5000) | st.just("2." + "9" * 5000))
def test_any_version_attribute_reads_or_is_refused(version):
    text = MINIMAL_V2.replace('version="2.0"', f'version="{version}"', 1)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "t.xml")
        path.write_text(text)
        topo = read_or_refuse(path)
    major = version.strip().split(".")[0]
    if topo is not None:
        assert int(major) in (2, 3)


# ---------------------------------------------------------------------------------
# Recordings


opt = st.none
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
small_text = st.text(max_size=12)

threads = st.builds(
    ThreadSample,
    tid=st.integers(min_value=1, max_value=2**22),
    start_ticks=U64,
    name=small_text,
    state=st.sampled_from("RSDIZ"),
    psr=opt() | st.integers(min_value=0, max_value=MAX_CPU_ID),
    flags=opt() | st.integers(min_value=0, max_value=2**32 - 1),
    cpu_ns=opt() | U64,
    wait_ns=opt() | U64,
    timeslices=opt() | U64,
    voluntary_switches=opt() | U64,
    involuntary_switches=opt() | U64,
    migrations=opt() | U64,
    allowed_cpus=opt() | cpu_sets,
)
processes = st.builds(
    ProcessSample,
    pid=st.integers(min_value=1, max_value=2**22),
    start_ticks=U64,
    ppid=opt() | st.integers(min_value=0, max_value=2**22),
    name=small_text,
    uid=opt() | st.integers(min_value=0, max_value=2**32 - 1),
    user=opt() | small_text,
    cmdline=opt() | small_text,
    mems_allowed=opt() | cpu_sets,
    cgroup_cpus=opt() | cpu_sets,
    threads=st.lists(threads, max_size=3).map(tuple),
    gpu_indices=st.lists(st.integers(min_value=0, max_value=64), max_size=2).map(tuple),
    gpu_memory_bytes=opt() | U64,
    watched=st.booleans(),
    training=st.booleans(),
    kernel=st.booleans(),
)
opt_int = opt() | U64
gpus = st.builds(
    GpuSample,
    index=st.integers(min_value=0, max_value=64),
    name=opt() | small_text,
    pci_bus_id=opt() | small_text,
    uuid=opt() | small_text,
    util_percent=opt() | st.integers(min_value=0, max_value=100),
    mem_util_percent=opt() | st.integers(min_value=0, max_value=100),
    mem_used_bytes=opt_int,
    mem_total_bytes=opt_int,
    pcie_tx_bytes_total=opt_int,
    pcie_rx_bytes_total=opt_int,
    pcie_tx_window_bytes_per_s=opt() | finite,
    pcie_rx_window_bytes_per_s=opt() | finite,
    pcie_link=st.builds(
        PcieLink,
        opt() | st.integers(1, 6),
        opt() | st.integers(1, 32),
        opt() | st.integers(1, 6),
        opt() | st.integers(1, 32),
    ),
    power_w=opt() | finite,
    sm_clock_mhz=opt() | st.integers(min_value=0, max_value=5000),
    mem_clock_mhz=opt() | st.integers(min_value=0, max_value=5000),
    processes=st.lists(st.builds(GpuProcess, st.integers(min_value=1, max_value=2**22), opt_int), max_size=2).map(
        tuple
    ),
    lost=st.booleans(),
)
samples = st.builds(
    Sample,
    monotonic_s=finite,
    wall_time_s=finite,
    duration_s=finite,
    processes=st.lists(processes, max_size=3).map(tuple),
    gpus=st.lists(gpus, max_size=2).map(tuple),
)
topologies = st.builds(
    lambda cpus, nodes, gpu_list: Topology.build(
        source="sysfs",
        online_cpus=cpus,
        allowed_cpus=cpus,
        numa_nodes=[NumaNode(i, frozenset(s)) for i, s in enumerate(nodes)],
        packages=[Package(0, cpus)],
        cores=[Core(0, frozenset({c})) for c in cpus],
        l3_groups=[CacheGroup(3, cpus)] if cpus else [],
        gpus=gpu_list,
    ),
    cpu_sets,
    st.lists(cpu_sets, max_size=3),
    st.lists(
        st.builds(
            Gpu,
            st.text(alphabet="0123456789abcdef:.", min_size=1, max_size=12),
            st.sampled_from(["nvidia", "amd"]),
            opt() | st.integers(0, 8),
            opt() | cpu_sets,
        ),
        max_size=2,
        unique_by=lambda g: g.pci_bus_id,
    ),
)


@SLOW
@given(topologies, opt() | small_text, opt() | finite, st.lists(samples, max_size=3))
def test_recording_round_trip(topology, host, interval, sample_list):
    header_text = header_line(topology, host, None, interval)
    header, read = read_recording([header_text, *(sample_line(s) for s in sample_list)], "gen")
    assert (header.topology, header.host, header.interval_s) == (topology, host, interval)
    assert list(read) == sample_list


def check_types(value: Any) -> None:
    """Every field of a read sample has the type its dataclass declares (None only where
    the annotation allows it; floats finite)."""
    for f in fields(value):
        item = getattr(value, f.name)
        kind = f.type if isinstance(f.type, str) else str(f.type)
        if item is None:
            assert "None" in kind, (type(value).__name__, f.name)
        elif kind.startswith("tuple"):
            for member in item:
                if kind == "tuple[int, ...]":
                    assert type(member) is int, (f.name, member)
                else:
                    check_types(member)
        elif kind in ("PcieLink",):
            check_types(item)
        elif "CpuSet" in kind:
            assert isinstance(item, frozenset) and all(type(c) is int for c in item)
        elif kind.startswith("bool"):
            assert type(item) is bool, (f.name, item)
        elif kind.startswith("int"):
            assert type(item) is int, (f.name, item)
        elif kind.startswith("float"):
            assert type(item) in (int, float) and math.isfinite(item), (f.name, item)
        elif kind.startswith("str"):
            assert type(item) is str, (f.name, item)


json_junk = st.sampled_from(
    [None, True, -1, 2**70, 1.5, float("inf"), float("nan"), "", "x", "0-3", [], [1, 2], {}, {"a": 1}]
)


def canonical(value: Any) -> Any:
    """JSON with every number as a float (an int where a float belongs is fine) and
    booleans told apart from numbers (``True == 1`` in Python)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, dict):
        return {key: canonical(item) for key, item in value.items()}
    if isinstance(value, list):
        return [canonical(item) for item in value]
    return value


def leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths to every node of a JSON value (so any subtree can be replaced)."""
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += leaves(item, (*path, index))
    return found


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = replaced(value[path[0]], path[1:], new)
    return copy


@SLOW
@given(topologies, samples, st.data())
def test_recording_with_any_value_replaced(topology, sample, data):
    """One value anywhere in a header or a sample line swapped for another JSON value of
    any type (NaN and Infinity too, which Python's JSON reads): a recording whose values
    all have their declared types, or one ParseError line naming the file."""
    lines = [header_line(topology, "h", None, 1.0), sample_line(sample)]
    which = data.draw(st.sampled_from([0, 1]), label="line")
    doc = json.loads(lines[which])
    path = data.draw(st.sampled_from(leaves(doc)), label="path")
    lines[which] = json.dumps(replaced(doc, path, data.draw(json_junk, label="junk")))
    try:
        header, read = read_recording(lines, "junk.jsonl")
        got = list(read)
    except ParseError as exc:
        assert one_line(exc).startswith("junk.jsonl")
        return
    if which == 1:  # what was read is what the line says, not a conversion of it
        assert canonical(json.loads(sample_line(got[0]))) == canonical(json.loads(lines[1]))
    for s in got:
        check_types(s)
        for p in s.processes:
            check_types(p)
            for t in p.threads:
                check_types(t)
        for g in s.gpus:
            check_types(g)
    assert all(isinstance(x, int) for n in header.topology.numa_nodes for x in (n.id, *n.cpus))
    assert all(g.numa_node is None or type(g.numa_node) is int for g in header.topology.gpus)
    assert header.interval_s is None or (type(header.interval_s) in (int, float) and math.isfinite(header.interval_s))


@pytest.mark.parametrize(
    "line",
    [
        "[" * 100_000 + "]" * 100_000,
        '{"sample": ' + "[" * 100_000 + "]" * 100_000 + "}",
        '{"sample": {"monotonic_s": NaN}}',
        "\x00\xff garbage",
    ],
    ids=["deep-list", "deep-sample", "nan", "binary"],
)
def test_recording_hostile_lines_are_one_line_errors(line):
    sample = Sample(1.0, 2.0, 0.1, (), ())
    header = header_line(
        Topology.build(
            source="sysfs",
            online_cpus=[0],
            allowed_cpus=[0],
            numa_nodes=[],
            packages=[],
            cores=[],
            l3_groups=[],
            gpus=[],
        ),
        None,
        None,
        1.0,
    )
    for lines in ([line], [header, sample_line(sample), line]):
        try:
            _, read = read_recording(lines, "bad.jsonl")
            list(read)
        except ParseError as exc:
            assert one_line(exc).startswith("bad.jsonl")
        else:
            pytest.fail("read a hostile line")


def test_recording_reader_keeps_declared_types_on_a_real_file():
    """The real fixtures still read, unchanged, through the stricter reader."""
    import gzip

    for path in sorted(Path(__file__).parent.parent.joinpath("fixtures", "recordings").glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            lines = f.read().splitlines()
        header, read = read_recording(lines, path.name)
        got = list(read)
        assert [sample_line(s) for s in got] == lines[1:]
        assert header_line(header.topology, header.host, header.nvml, header.interval_s) == lines[0]
        for s in got:
            for p in s.processes:
                check_types(p)
