"""The command line as a user meets it: output shapes, and one-line errors with exit 2."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from affmon.core.model.cpuset import parse_cpulist
from tests.helpers.live import usable_cpus, workload
from tests.helpers.topology_trees import extract_tree

HWLOC_XML = Path(__file__).parent.parent / "fixtures" / "hwloc_xml"


def affmon(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "affmon", *args], capture_output=True, text=True, timeout=timeout)


TOPOLOGY_KEYS = [
    "source",
    "online_cpus",
    "allowed_cpus",
    "numa_nodes",
    "packages",
    "cores",
    "l3_groups",
    "gpus",
    "node_distances",
    "gpus_known",
]


def test_topology_json_shape_from_a_recorded_tree(tmp_path_factory):
    root = extract_tree(tmp_path_factory, "cgroup2")
    out = affmon("topology", "--root", str(root), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert list(data) == TOPOLOGY_KEYS
    assert data["source"] == "sysfs"
    assert data["allowed_cpus"] == "0-5"  # the Slurm job's cgroup v2 cpuset
    assert [n["id"] for n in data["numa_nodes"]] == sorted(n["id"] for n in data["numa_nodes"])
    assert all(set(n) == {"id", "cpus", "memory_bytes"} for n in data["numa_nodes"])
    assert all(set(c) == {"package", "cpus"} for c in data["cores"])
    firsts = [min(parse_cpulist(c["cpus"])) for c in data["cores"]]
    assert firsts == sorted(firsts)


def test_topology_json_from_hwloc_xml_with_gpus():
    out = affmon("topology", "--hwloc-xml", str(HWLOC_XML / "hwloc-xml__nvidiaDGX2.xml"), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["source"] == "hwloc-xml"
    gpus = data["gpus"]
    assert len(gpus) == 16
    assert [g["pci_bus_id"] for g in gpus] == sorted(g["pci_bus_id"] for g in gpus)
    assert all(set(g) == {"pci_bus_id", "vendor", "numa_node", "local_cpus"} for g in gpus)
    assert {g["numa_node"] for g in gpus} == {0, 1}


def test_topology_text_names_unknown_gpu_locality(tmp_path):
    # A tiny tree whose GPU has numa_node -1: the summary must say "unknown", not node 0.
    cpu = tmp_path / "sys/devices/system/cpu"
    (cpu / "cpu0").mkdir(parents=True)
    (cpu / "online").write_text("0\n")
    gpu = tmp_path / "sys/bus/pci/devices/0000:3b:00.0"
    gpu.mkdir(parents=True)
    for name, value in {"class": "0x030200", "vendor": "0x10de", "device": "0x2335", "numa_node": "-1"}.items():
        (gpu / name).write_text(value + "\n")
    out = affmon("topology", "--root", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "0000:3b:00.0 nvidia: NUMA node unknown" in out.stdout
    data = json.loads(affmon("topology", "--root", str(tmp_path), "--json").stdout)
    assert data["gpus"] == [{"pci_bus_id": "0000:3b:00.0", "vendor": "nvidia", "numa_node": None, "local_cpus": None}]


def test_snapshot_json_of_a_pinned_process():
    cpu = usable_cpus()[0]
    with workload("--cpus", str(cpu), "--busy", "2", "--sleepers", "1") as w:
        out = affmon("snapshot", "--pid", str(w["pid"]), "--interval", "0.5", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert list(data["topology"]) == TOPOLOGY_KEYS
    assert data["sampling"]["processes"] == 1 and data["sampling"]["threads"] == 4
    assert len(data["sampling"]["seconds"]) == 2 and all(s > 0 for s in data["sampling"]["seconds"])
    (p,) = data["processes"]
    assert p["pid"] == w["pid"] and p["allowed_cpus"] == str(cpu)
    assert p["ran_on_cpus"] == str(cpu) and p["wait_ratio"] > 0.2  # two busy threads, one CPU
    busy = [t for t in p["threads"] if t["tid"] in w["busy"]]
    assert len(busy) == 2
    sleepers = [t for t in p["threads"] if t["tid"] not in w["busy"]]
    for t in busy:
        assert t["psr"] == cpu and t["allowed_cpus"] == str(cpu)
        # what they got of a CPU others load too: more than any sleeping thread of theirs
        assert t["cpu_percent"] > max(s["cpu_percent"] for s in sleepers) and t["migrations_per_s"] == 0.0
    # GPUs: none here, and NVML's absence is said in one line
    assert data["gpus"] == [] and "CPU-only" in data["nvml"]


def test_snapshot_text_on_a_recorded_tree_has_no_processes(tmp_path_factory):
    root = extract_tree(tmp_path_factory, "offlines")
    out = affmon("snapshot", "--root", str(root), "--interval", "0.1")
    assert out.returncode == 0, out.stderr
    assert "sampled 0 threads of 0 processes" in out.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["snapshot", "--pid", "999999999"], "no such process: 999999999"),
        (["snapshot", "--pid", "abc"], "not a process id"),
        (["--pid", "5", "snapshot"], "put it after the command: affmon snapshot --pid PID"),
        (["snapshot", "--interval", "0"], "--interval"),
        (["topology", "--root", "/nonexistent/tree"], "not a directory"),
        (["topology", "--root", "/etc"], "not a Linux sysfs tree"),
        (["topology", "--hwloc-xml", "/nonexistent.xml"], "cannot read hwloc XML"),
        (["topology", "--hwloc-xml", "/etc/hostname"], "malformed XML"),
        (["topology", "--root", "/", "--hwloc-xml", "x.xml"], "not allowed with argument"),
        (["--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["bogus-command"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    out = affmon(*args)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("affmon: ") and message in lines[0]
    assert "Traceback" not in out.stderr


def test_hwloc_v1_xml_is_refused_in_one_line(tmp_path):
    v1 = tmp_path / "v1.xml"
    v1.write_text('<?xml version="1.0"?><topology><object type="Machine" os_index="0"/></topology>')
    out = affmon("topology", "--hwloc-xml", str(v1))
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1
    assert "hwloc XML v1" in out.stderr


# -- the monitor (no subcommand) -------------------------------------------------------

HOGS = Path(__file__).parent.parent / "fixtures" / "recordings" / "hogs.jsonl.gz"


def corrupt_recordings(tmp_path: Path) -> dict[str, Path]:
    import gzip

    plain = gzip.decompress(HOGS.read_bytes()).decode()
    files = {
        "empty": tmp_path / "empty.jsonl",
        "text": tmp_path / "notes.txt",
        "badgz": tmp_path / "broken.jsonl.gz",
        "badline": tmp_path / "badline.jsonl",
    }
    files["empty"].write_text("")
    files["text"].write_text("hello\n")
    files["badgz"].write_bytes(b"\x1f\x8b" + b"not gzip at all")
    header, first, *_ = plain.splitlines()
    files["badline"].write_text(f"{header}\n{{broken\n{first}\n")
    return files


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--replay", "/nonexistent/run.jsonl"], "no such file"),
        (["--replay", "/etc"], "is a directory"),
        (["--replay", "{empty}"], "empty file"),
        (["--replay", "{text}"], "bad header line"),
        (["--replay", "{badgz}"], "cannot read it"),
        (["--replay", "{badline}"], "line 2: bad sample"),
        (["--replay", str(HOGS), "--speed", "0"], "--speed"),
        (["--replay", str(HOGS), "--pid", "1"], "do not go together"),
        (["--pid", "999999999"], "no such process: 999999999"),
        (["--interval", "-1"], "--interval"),
        ([], "needs a terminal"),
        (["--replay", str(HOGS)], "needs a terminal"),
    ],
)
def test_monitor_errors_are_one_line_and_exit_2(tmp_path, args, message):
    files = corrupt_recordings(tmp_path)
    out = affmon(*[a.format(**files) for a in args])
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("affmon: ") and message in lines[0], out.stderr


def test_every_subcommand_still_parses_as_before():
    from affmon.cli import build_parser

    args = build_parser().parse_args(["snapshot", "--pid", "5", "--interval", "2"])
    assert (args.command, args.pid, args.interval, args.tui_pid) == ("snapshot", [5], 2.0, [])
    args = build_parser().parse_args(["--pid", "7", "--pid", "8", "--interval", "0.5"])
    assert (args.command, args.tui_pid, args.tui_interval, args.replay) == (None, [7, 8], 0.5, None)


def test_the_command_line_is_parsed_without_loading_the_exporter_or_the_rules():
    """Building the parser (every command, the monitor first) loads no command's machinery:
    the exporter's modules pulled in the findings under them, 0.1 s of the monitor's start."""
    code = (
        "import sys, affmon.cli; affmon.cli.build_parser();"
        "print(sorted(m for m in sys.modules if m.startswith(('affmon.export.', 'affmon.core.rules.', 'textual'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
