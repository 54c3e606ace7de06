"""`affmon plan`, `pin`, `undo` and `exec` as a user runs them: real processes, a journal in
a temporary state directory, one-line errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from affmon.core.model.cpuset import parse_cpulist
from tests.helpers.live import usable_cpus, workload
from tests.helpers.pin_cli import affmon, tiny_gpu_tree
from tests.helpers.proc import thread_masks

HWLOC_XML = Path(__file__).parent.parent / "fixtures" / "hwloc_xml"


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


def test_plan_json_for_an_eight_gpu_two_socket_machine():
    out = affmon("plan", "--hwloc-xml", str(HWLOC_XML / "mpibind-xml__g4dnmetal.xml"), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    plans = data["plans"]
    assert len(plans) == 8
    assert {p["numa_node"] for p in plans} == {0, 1}
    seen: set[int] = set()
    for p in plans:
        cpus = parse_cpulist(p["cpus"])
        assert len(cpus) == 12 and not cpus & seen  # 6 whole cores each, disjoint
        seen |= cpus
        assert p["launch"]["taskset"] == f"taskset -c {p['cpus']}"
        assert p["launch"]["numactl"] == f"numactl --physcpubind={p['cpus']} --membind={p['numa_node']}"
        assert p["reasons"]


def test_plan_text_says_unknown_locality_not_node_0(tmp_path):
    cpu = tmp_path / "sys/devices/system/cpu"
    for n in range(4):
        (cpu / f"cpu{n}").mkdir(parents=True)
    (cpu / "online").write_text("0-3\n")
    for node, cpus in ((0, "0-1"), (1, "2-3")):
        d = tmp_path / f"sys/devices/system/node/node{node}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
    gpu = tmp_path / "sys/bus/pci/devices/0000:3b:00.0"
    gpu.mkdir(parents=True)
    for name, value in {"class": "0x030200", "vendor": "0x10de", "numa_node": "-1", "local_cpulist": "0-3"}.items():
        (gpu / name).write_text(value + "\n")
    out = affmon("plan", "--root", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "unknown" in out.stdout and "instead of guessing node 0" in out.stdout


def test_pin_then_undo_restores_every_thread_exactly(state):
    cpus = usable_cpus()
    if len(cpus) < 2:
        pytest.fail("needs two CPUs (CI has two)")
    with workload("--sleepers", "3", "--sleeper-cpus", str(cpus[0])) as w:
        before = thread_masks(w["pid"])
        out = affmon("pin", str(w["pid"]), "--cpus", str(cpus[1]), "--json")
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout)
        assert result["ok"] and result["journal_id"]
        assert {t["status"] for t in result["threads"]} == {"set"}
        assert set(thread_masks(w["pid"]).values()) == {frozenset({cpus[1]})}
        assert (state / "affmon" / "journal.jsonl").exists()
        out = affmon("undo", str(w["pid"]))
        assert out.returncode == 0, out.stderr
        assert thread_masks(w["pid"]) == before


def test_dry_run_changes_nothing(state):
    with workload("--sleepers", "2") as w:
        before = thread_masks(w["pid"])
        out = affmon("pin", str(w["pid"]), "--cpus", str(usable_cpus()[0]), "--dry-run")
        assert out.returncode == 0, out.stderr
        assert "would set" in out.stdout
        assert thread_masks(w["pid"]) == before
    assert not (state / "affmon" / "journal.jsonl").exists()


@pytest.mark.parametrize(
    ("cpus", "message"),
    [("abc", "is not a CPU list"), ("9999", "CPU 9999 is offline or does not exist"), ("", "is empty")],
)
def test_bad_cpu_lists_are_one_line_errors(state, cpus, message):
    with workload("--sleepers", "1") as w:
        before = thread_masks(w["pid"])
        out = affmon("pin", str(w["pid"]), "--cpus", cpus)
        assert thread_masks(w["pid"]) == before
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1
    assert message in out.stderr and "Traceback" not in out.stderr


def test_pin_of_a_process_that_exited(state):
    with workload("--sleepers", "1") as w:
        pid = w["pid"]
    out = affmon("pin", str(pid), "--cpus", "0")
    assert out.returncode != 0 and "no such process" in out.stderr
    assert len(out.stderr.splitlines()) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a pin as another user")
def test_another_users_process_without_cap_sys_nice(state):
    home = Path(tempfile.mkdtemp(prefix="affmon-nobody-"))  # pytest's tmp_path is root's alone
    os.chown(home, 65534, 65534)  # nobody's own: affmon trusts no journal another user could replace
    home.chmod(0o700)
    try:
        run_pin_as_nobody(home)
    finally:
        shutil.rmtree(home)


def run_pin_as_nobody(home: Path) -> None:
    with workload("--sleepers", "1") as w:
        before = thread_masks(w["pid"])
        code = "import sys; from affmon.cli import main; sys.exit(main(sys.argv[1:]))"
        out = subprocess.run(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                sys.executable,
                "-c",
                code,
                "pin",
                str(w["pid"]),
                "--cpus",
                str(usable_cpus()[0]),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "XDG_STATE_HOME": str(home / "state"), "HOME": str(home)},
            cwd=Path(__file__).parent.parent.parent,
        )
        assert thread_masks(w["pid"]) == before
    assert out.returncode == 1, out.stderr
    assert "CAP_SYS_NICE" in out.stderr and len(out.stderr.splitlines()) == 1


def test_exec_pins_itself_to_the_plan_then_runs_the_command(tmp_path):
    cpus = usable_cpus()
    tiny_gpu_tree(tmp_path, cpus)
    probe = "import os; print(sorted(os.sched_getaffinity(0)))"
    out = affmon("exec", "--root", str(tmp_path), "--gpu", "0", "--", sys.executable, "-c", probe)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str([cpus[-1]])  # the GPU's node, inherited across exec
    env = {"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "0"}
    out = affmon("exec", "--root", str(tmp_path), "--from-env", "--", sys.executable, "-c", probe, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str([cpus[-1]])


CANNOT_PLAN = [
    (["--gpu", "5"], {}, "no GPU 5"),
    (["--from-env"], {"LOCAL_RANK": ""}, "needs LOCAL_RANK"),
    (["--from-env"], {"LOCAL_RANK": "3", "CUDA_VISIBLE_DEVICES": "0"}, "gives 1 GPUs"),
    (["--from-env"], {"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "GPU-8932f937-d72c-4106"}, "UUID"),
    (["--from-env"], {"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "MIG-8932f937-d72c-4106"}, "MIG"),
    (["--from-env"], {"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "garbage"}, "gives 0 GPUs"),
    (["--from-env"], {"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": ""}, "gives 0 GPUs"),
]
STATUS_PROBE = "import os, sys; print(sorted(os.sched_getaffinity(0))); sys.exit(3)"


@pytest.mark.parametrize(("args", "env", "message"), CANNOT_PLAN)
def test_exec_that_cannot_plan_still_runs_the_command_unpinned(tmp_path, args, env, message):
    """A launcher wrapper must never keep a job from starting: one warning line, then the
    command runs with the mask it inherited, and its exit status is kept."""
    tiny_gpu_tree(tmp_path, usable_cpus())
    out = affmon("exec", "--root", str(tmp_path), *args, "--", sys.executable, "-c", STATUS_PROBE, env=env)
    assert out.returncode == 3, out.stderr
    assert out.stdout.strip() == str(sorted(os.sched_getaffinity(0)))  # unpinned: this process's own mask
    assert len(out.stderr.splitlines()) == 1 and message in out.stderr and "unpinned" in out.stderr


@pytest.mark.parametrize(("args", "env", "message"), CANNOT_PLAN)
def test_exec_strict_fails_instead_and_runs_nothing(tmp_path, args, env, message):
    tiny_gpu_tree(tmp_path, usable_cpus())
    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'w').close()"
    out = affmon("exec", "--strict", "--root", str(tmp_path), *args, "--", sys.executable, "-c", code, env=env)
    assert out.returncode == 2 and message in out.stderr and len(out.stderr.splitlines()) == 1
    assert not marker.exists()


def test_exec_without_a_command_is_a_usage_error(tmp_path):
    tiny_gpu_tree(tmp_path, usable_cpus())
    out = affmon("exec", "--root", str(tmp_path), "--gpu", "0")
    assert out.returncode == 2 and "needs a command" in out.stderr and len(out.stderr.splitlines()) == 1


def test_exec_dry_run_shows_why_it_would_run_unpinned(tmp_path):
    tiny_gpu_tree(tmp_path, usable_cpus())
    env = {"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "garbage,0"}
    out = affmon("exec", "--root", str(tmp_path), "--from-env", "--dry-run", "--", "true", env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("! CUDA_VISIBLE_DEVICES entry 'garbage' and the 1 after it ignored")
    assert lines[1].startswith("cannot plan: ") and lines[1].endswith("Would run unpinned: true")


def test_exec_of_a_missing_command(tmp_path):
    tiny_gpu_tree(tmp_path, usable_cpus())
    out = affmon("exec", "--root", str(tmp_path), "--gpu", "0", "--", "/nonexistent/cmd")
    assert out.returncode == 127 and "cannot run /nonexistent/cmd" in out.stderr


def test_undo_with_nothing_journaled(state):
    out = affmon("undo", "--all")  # safe to run again: nothing to undo is no failure
    assert out.returncode == 0 and out.stdout == ""
    assert out.stderr.startswith("affmon: nothing to undo: no journal at ") and out.stderr.count("\n") == 1
    out = affmon("undo", "12345")  # but that PID's pin was not undone
    assert out.returncode == 1 and out.stdout == "" and "nothing to undo" in out.stderr


def test_a_dry_run_says_what_the_real_pin_would_say_of_an_earlier_pin(state):
    with workload("--cpus", ",".join(map(str, usable_cpus()))) as w:
        first = affmon("pin", str(w["pid"]), "--cpus", str(usable_cpus()[0]))
        assert first.returncode == 0, first.stderr
        journal = state / "affmon" / "journal.jsonl"
        before = journal.read_bytes()
        dry = affmon("pin", str(w["pid"]), "--cpus", str(usable_cpus()[-1]), "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert f"PID {w['pid']} was already pinned by affmon to CPUs {usable_cpus()[0]}" in dry.stdout
        assert journal.read_bytes() == before  # read, never written
        assert affmon("undo", str(w["pid"])).returncode == 0


def wide_gpu_tree(root: Path, cpus: list[int]) -> None:
    """One NUMA node holding every usable CPU, and a GPU local to all of them."""
    cpu = root / "sys/devices/system/cpu"
    for n in cpus:
        (cpu / f"cpu{n}").mkdir(parents=True)
    (cpu / "online").write_text(",".join(map(str, cpus)) + "\n")
    node = root / "sys/devices/system/node/node0"
    node.mkdir(parents=True)
    (node / "cpulist").write_text(",".join(map(str, cpus)) + "\n")
    gpu = root / "sys/bus/pci/devices/0000:3b:00.0"
    gpu.mkdir(parents=True)
    values = {"class": "0x030200", "vendor": "0x10de", "numa_node": "0", "local_cpulist": ",".join(map(str, cpus))}
    for name, value in values.items():
        (gpu / name).write_text(value + "\n")


BUDGET_PROBE = "import os; print(os.environ.get('OMP_NUM_THREADS'), os.environ.get('MKL_NUM_THREADS'))"


def test_exec_gives_the_command_the_rank_thread_budget(tmp_path, monkeypatch):
    """The rank's CPUs less one per DataLoader worker for its intra-op pools; a value the
    person set stays theirs; none where the plan could not be applied."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    cpus = usable_cpus()
    wide_gpu_tree(tmp_path, cpus)
    run = ("exec", "--root", str(tmp_path), "--gpu", "0")
    out = affmon(*run, "--", sys.executable, "-c", BUDGET_PROBE)
    assert out.returncode == 0 and out.stdout.split() == [str(len(cpus))] * 2, out
    out = affmon(*run, "--workers", "1", "--", sys.executable, "-c", BUDGET_PROBE)
    assert out.stdout.split() == [str(max(1, len(cpus) - 1))] * 2, out
    out = affmon(*run, "--", sys.executable, "-c", BUDGET_PROBE, env={"OMP_NUM_THREADS": "7"})
    assert out.stdout.split() == ["7", str(len(cpus))], out
    out = affmon(*run, "--no-thread-budget", "--", sys.executable, "-c", BUDGET_PROBE)
    assert out.stdout.split() == ["None", "None"], out
    out = affmon(*run, "--dry-run", "--workers", "1", "--", "python", "train.py")
    assert f"set OMP_NUM_THREADS={max(1, len(cpus) - 1)} MKL_NUM_THREADS={max(1, len(cpus) - 1)}" in out.stdout
    # A plan of CPUs this machine lacks: the pin fails, the command runs unpinned and unbudgeted.
    absent = max(cpus) + 1
    other = tmp_path / "other"
    wide_gpu_tree(other, [absent])
    out = affmon("exec", "--root", str(other), "--gpu", "0", "--", sys.executable, "-c", BUDGET_PROBE)
    assert out.returncode == 0 and out.stdout.split() == ["None", "None"], out
    assert "cannot pin to CPUs" in out.stderr


def test_exec_says_when_the_cpuset_keeps_only_part_of_the_plan(tmp_path):
    """Another machine's plan whose CPUs this machine has only in part: the kernel pins to
    the intersection, and exec says so instead of passing it for the plan."""
    cpus = usable_cpus()
    absent = max(cpus) + 1
    wide_gpu_tree(tmp_path, [cpus[0], absent])
    out = affmon("exec", "--root", str(tmp_path), "--gpu", "0", "--", sys.executable, "-c", BUDGET_PROBE)
    assert out.returncode == 0, out.stderr
    assert f"pinned to CPUs {cpus[0]}, the part of the plan's" in out.stderr and len(out.stderr.splitlines()) == 1
    assert out.stdout.split() == ["1", "1"]  # the budget of the CPU it got


def test_the_undo_a_pin_suggests_runs_as_printed(state):
    """The pin's last line names a command; run as printed, it undoes that pin."""
    import re
    import shlex

    cpus = usable_cpus()
    with workload("--cpus", ",".join(map(str, cpus)), "--sleepers", "1") as w:
        before = thread_masks(w["pid"])
        out = affmon("pin", str(w["pid"]), "--cpus", str(cpus[0]))
        assert out.returncode == 0, out.stderr
        hint = re.search(r"`(affmon undo[^`]*)`", out.stdout)
        assert hint is not None, out.stdout
        args = shlex.split(hint.group(1))[1:]
        undone = affmon(*args)
        assert undone.returncode == 0, undone.stderr
        assert thread_masks(w["pid"]) == before
        again = affmon(*args)  # nothing left: an outcome, not an error
        assert again.returncode == 0 and "nothing to undo" in again.stderr
