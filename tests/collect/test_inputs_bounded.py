"""Inputs from other users are bounded where they are read: a cgroup named by the user
who was delegated it, the kubelet's CPU manager state in a tree handed to ``--root``, and
the environment ``affmon exec --from-env`` is started in. A value out of bounds is
unknown (or, for exec, one warning line and the command run unpinned), never a
traceback and never a recording that cannot be read back. Also: ``exec`` hands the
command the signal dispositions a shell would (CPython ignores SIGPIPE and SIGXFSZ)."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from affmon.collect.context import CPU_MANAGER_STATE, ContextReader
from affmon.collect.procfs import ProcFs
from affmon.collect.sysfs_topology import read_topology
from affmon.core.errors import ParseError
from affmon.core.model.context import (
    MAX_SMALL_INT,
    MAX_VALUE_CHARS,
    Context,
    context_of,
    cpu_manager_exclusive,
    from_cgroup,
)
from affmon.core.model.topology import Topology
from affmon.core.plan.visible import job_gpus, select_gpus
from affmon.core.recording.extras import context_from_json
from affmon.export import catalogue as m
from affmon.sources.stream import ReplaySource
from tests.helpers.dgx_a100 import BUS_IDS, dgx_a100_tree
from tests.helpers.export import process, run, sample, series, thread
from tests.helpers.live import usable_cpus
from tests.helpers.pin_cli import affmon, tiny_gpu_tree

HOGS = Path(__file__).parent.parent / "fixtures" / "recordings" / "hogs.jsonl.gz"
JOB_200_DIGITS = "/user.slice/user-1000.slice/user@1000.service/slurm/job_" + "7" * 200 + "/step_0/task_0"
POD = (
    "0::/kubepods.slice/kubepods-pod0a1b2c3d_0000_1111_2222_333344445555.slice/cri-containerd-"
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope\n"
)


# -- a delegated cgroup named slurm/job_<200 digits> -------------------------------------


def test_a_job_id_of_200_digits_in_a_cgroup_path_is_unknown():
    found = from_cgroup(JOB_200_DIGITS)
    assert (found.scheduler, found.slurm_job_id, found.slurm_step) == ("slurm", None, "0")
    long_step = from_cgroup("/slurm/job_42/step_" + "x" * 100)
    assert (long_step.slurm_job_id, long_step.slurm_step) == ("42", None)
    # Digits of another script are not Slurm's: \d matched them
    assert from_cgroup("/slurm/uid_0/job_\u0664\u0662/step_0").slurm_job_id is None


def test_the_live_reader_gives_the_delegated_cgroup_an_unknown_job(tmp_path):
    (tmp_path / "proc" / "77").mkdir(parents=True)
    (tmp_path / "proc" / "77" / "cgroup").write_text(f"0::{JOB_200_DIGITS}\n")
    found = ContextReader(ProcFs(str(tmp_path))).read(77)
    assert (found.scheduler, found.slurm_job_id) == ("slurm", None)


context_text = st.text(st.characters(codec="utf-8"), max_size=300)


@given(
    st.dictionaries(
        st.sampled_from(["SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_LOCALID", "SLURM_PROCID", "LOCAL_RANK", "RANK"]),
        context_text | st.text("0123456789\u0662\u00b2", max_size=300),
    ),
    st.sampled_from(["/slurm/uid_0/job_", "/system.slice/slurmstepd.scope/job_"]),
    st.text("0123456789", min_size=1, max_size=300),
    context_text,
)
def test_every_context_value_is_bounded_whatever_the_environment_and_the_path(env, prefix, job, step):
    found = context_of(env, f"{prefix}{job}/step_{step}")
    for value in (found.slurm_job_id, found.slurm_step, found.pod_uid, found.container_id):
        assert value is None or len(value) <= MAX_VALUE_CHARS
    if found.slurm_job_id is not None:  # the exporter's slurm_job label is "job.step"
        assert len(f"{found.slurm_job_id}.{found.slurm_step or ''}") <= MAX_VALUE_CHARS
        assert found.slurm_job_id.isascii() and found.slurm_job_id.isdigit()
    for number in (found.slurm_local_id, found.slurm_proc_id, found.local_rank, found.rank):
        assert number is None or 0 <= number <= MAX_SMALL_INT


def test_the_exported_context_labels_of_a_delegated_cgroup_are_at_most_64_characters(tmp_path):
    env = {"SLURM_JOB_ID": "9" * 64, "SLURM_STEP_ID": "s" * 64, "LOCAL_RANK": "1"}
    for context in (context_of(None, JOB_200_DIGITS), context_of(env, JOB_200_DIGITS)):
        with_context = replace(process(4242, thread(4242, 10)), context=context)
        state = run(sample(1.0, with_context), sample(2.0, with_context))
        (labels,) = series(state, m.PROCESS_CONTEXT_INFO.name)
        assert all(len(str(v)) <= MAX_VALUE_CHARS for v in labels if v is not None), labels


def hogs_with_context(context: dict[str, object]) -> list[str]:
    """hogs.jsonl.gz with ``context`` on the first process of every sample."""
    header, *samples = gzip.decompress(HOGS.read_bytes()).decode().splitlines()
    out = [header]
    for line in samples:
        doc = json.loads(line)
        doc["sample"]["processes"][0]["context"] = context
        out.append(json.dumps(doc))
    return out


def test_a_recording_root_made_beside_the_delegated_cgroup_replays(tmp_path):
    """Made by the affmon before bounds: the 201-character job id it wrote is read as
    unknown; the rest of the context, and the recording, stand."""
    made_before = {
        **Context(scheduler="slurm", slurm_step="0", local_rank=3).to_json(),
        "slurm_job_id": "7" * 201,
    }
    path = tmp_path / "root.jsonl"
    path.write_text("\n".join(hogs_with_context(made_before)) + "\n")
    source = ReplaySource(str(path))
    played = list(iter(source.next_sample, None))
    assert len(played) == 5
    context = played[-1].processes[0].context
    assert context is not None
    assert (context.scheduler, context.slurm_job_id, context.slurm_step, context.local_rank) == ("slurm", None, "0", 3)
    out = affmon("audit", "--replay", str(path))
    assert out.returncode in (0, 1) and "not a value affmon writes" not in out.stderr, out.stderr


def test_context_values_out_of_bounds_read_as_unknown_and_wrong_types_are_refused():
    hostile = {
        "scheduler": "pbs",
        "slurm_job_id": "12a",
        "slurm_step": "s" * 21,
        "slurm_local_id": -1,
        "slurm_proc_id": MAX_SMALL_INT + 1,
        "pod_uid": "p" * 65,
        "qos": "platinum",
        "container_id": "c" * 65,
        "exclusive_cpus": [0, 1 << 20],
        "local_rank": 10**30,
        "rank": -5,
        "world_size": 10**7,
        "numa_binding": "everywhere",
        "from_environ": True,
    }
    assert context_from_json(hostile) == Context(from_environ=True)
    kept = {"slurm_job_id": "4242", "slurm_step": "batch", "local_rank": MAX_SMALL_INT, "exclusive_cpus": [2, 3]}
    got = context_from_json(kept)
    assert (got.slurm_job_id, got.slurm_step, got.local_rank, got.exclusive_cpus) == (
        "4242",
        "batch",
        MAX_SMALL_INT,
        frozenset({2, 3}),
    )
    for malformed in ({"slurm_job_id": 4242}, {"local_rank": "3"}, {"exclusive_cpus": "0-3"}):
        with pytest.raises(ParseError):
            context_from_json(malformed)


# -- the kubelet's cpu_manager_state nested 100,000 deep ----------------------------------

DEEP = "[" * 100_000 + "]" * 100_000
UID = "0a1b2c3d-0000-1111-2222-333344445555"


def test_cpu_manager_state_nested_100000_deep_is_a_parse_error():
    with pytest.raises(ParseError, match="nested too deep"):
        cpu_manager_exclusive(DEEP, UID)
    with pytest.raises(ParseError, match="more than 1,048,576"):
        cpu_manager_exclusive(" " * (1 << 20) + "{}", UID)
    found = context_of(None, POD.split("::", 1)[1].strip(), None, DEEP)
    assert (found.scheduler, found.pod_uid, found.exclusive_cpus) == ("kubernetes", UID, None)


def pod_tree(root: Path) -> int:
    """A recorded tree of this machine's CPUs with one process (a copy of a sleeper's
    ``/proc`` files) in a Guaranteed pod, and the kubelet's state nested 100,000 deep."""
    tiny_gpu_tree(root, usable_cpus())
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
        text=True,
    )
    pid = 4242
    try:
        assert sleeper.stdout is not None and sleeper.stdout.readline().strip() == "up"
        real = sleeper.pid
        dest = root / f"proc/{pid}"
        (dest / "task").mkdir(parents=True)
        for name in ("stat", "status", "cmdline"):
            data = Path(f"/proc/{real}/{name}").read_bytes()
            (dest / name).write_bytes(data.replace(f"{real} (".encode(), f"{pid} (".encode(), 1))
        (dest / "cgroup").write_text(POD)
        for task in Path(f"/proc/{real}/task").iterdir():
            tid = pid if int(task.name) == real else int(task.name)
            (dest / f"task/{tid}").mkdir()
            for name in ("stat", "status", "schedstat", "sched"):
                data = (task / name).read_bytes()
                (dest / f"task/{tid}/{name}").write_bytes(
                    data.replace(f"{task.name} (".encode(), f"{tid} (".encode(), 1)
                )
    finally:
        sleeper.kill()
        sleeper.wait()
    state = root / CPU_MANAGER_STATE.lstrip("/")
    state.parent.mkdir(parents=True)
    state.write_text(DEEP)
    return pid


def test_snapshot_of_a_tree_whose_cpu_manager_state_is_nested_deep(tmp_path):
    pid = pod_tree(tmp_path)
    out = affmon("snapshot", "--root", str(tmp_path), "--all", "--json", "--interval", "0.01")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    (p,) = [p for p in json.loads(out.stdout)["processes"] if p["pid"] == pid]
    assert p["context"]["pod_uid"] == UID and p["context"]["exclusive_cpus"] is None


# -- exec --from-env: LOCAL_RANK and CUDA_VISIBLE_DEVICES ----------------------------------


@pytest.fixture(scope="module")
def dgx_like(tmp_path_factory: pytest.TempPathFactory) -> tuple[Topology, list[str]]:
    return read_topology(str(dgx_a100_tree(tmp_path_factory.mktemp("dgx")))), BUS_IDS


def test_an_index_of_another_script_stops_the_list_as_cuda_does(dgx_like):
    topology, bus_ids = dgx_like
    job = job_gpus(topology, "\u0661", None)  # ARABIC-INDIC DIGIT ONE: int() reads it as 1
    assert job.devices == () and job.bus_ids == ()
    assert "ignored: it is neither an index" in job.warnings[0]
    job = job_gpus(topology, "0,\u0661,1", None)
    assert job.devices == (bus_ids[0],) and "and the 1 after it ignored" in job.warnings[0]


def test_an_index_of_120000_digits_is_past_every_gpu_and_said_short(dgx_like):
    topology, bus_ids = dgx_like
    huge = "1" * 120_000
    job = job_gpus(topology, f"0,{huge}", None)
    assert job.devices == (bus_ids[0],)
    assert len(job.warnings) == 1 and len(job.warnings[0]) < 300 and len(job.source) < 500
    assert job_gpus(topology, "0" * 50 + "1", None).devices == (bus_ids[1],)  # zeros in front: still 1
    with pytest.raises(ParseError, match="no GPU 1111") as refused:
        select_gpus(topology, huge, None)
    assert len(str(refused.value)) < 200
    with pytest.raises(ParseError, match="neither a GPU index"):
        select_gpus(topology, "\u00b2", None)


STATUS_PROBE = "import os, sys; print(sorted(os.sched_getaffinity(0))); sys.exit(3)"


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "1" * 120_000}, "gives 0 GPUs"),
        ({"LOCAL_RANK": "\u00b2", "CUDA_VISIBLE_DEVICES": "0"}, "LOCAL_RANK (set by torchrun) to be a number"),
        ({"LOCAL_RANK": "9" * 120_000, "CUDA_VISIBLE_DEVICES": "0"}, "LOCAL_RANK (set by torchrun) to be a number"),
        ({"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "\u0660"}, "gives 0 GPUs"),  # ARABIC-INDIC DIGIT ZERO
    ],
    ids=["visible-120000-digits", "local-rank-superscript", "local-rank-120000-digits", "visible-arabic-zero"],
)
def test_exec_from_env_with_a_value_it_cannot_use_runs_the_command_unpinned(tmp_path, env, said):
    tiny_gpu_tree(tmp_path, usable_cpus())
    out = affmon("exec", "--root", str(tmp_path), "--from-env", "--", sys.executable, "-c", STATUS_PROBE, env=env)
    assert out.returncode == 3, out.stderr
    assert out.stdout.strip() == str(sorted(os.sched_getaffinity(0)))  # unpinned: this process's own mask
    (line,) = out.stderr.splitlines()
    assert said in line and "unpinned" in line and len(line) < 600


# -- exec: the signal dispositions of the command ------------------------------------------

SIGNALS = {"SIGPIPE": 13, "SIGXFSZ": 25}


def ignored(status: str) -> set[str]:
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), 16)
    return {name for name, number in SIGNALS.items() if mask & (1 << (number - 1))}


@pytest.mark.parametrize(
    ("args", "pinned"), [(["--gpu", "0"], True), (["--gpu", "5"], False)], ids=["pinned", "unpinned"]
)
def test_exec_hands_the_command_sigpipe_and_sigxfsz_at_their_defaults(tmp_path, args, pinned):
    """Whether the plan applies or not: the command reads its own /proc/self/status."""
    tiny_gpu_tree(tmp_path, usable_cpus())
    out = affmon("exec", "--root", str(tmp_path), *args, "--", "cat", "/proc/self/status")
    assert out.returncode == 0, out.stderr
    assert ignored(out.stdout) == set()
    assert ("unpinned" in out.stderr) is not pinned


def test_exec_of_a_pipeline_ends_as_under_taskset(tmp_path):
    """``yes | head -1``: yes dies of SIGPIPE quietly, as it does when a shell starts it."""
    tiny_gpu_tree(tmp_path, usable_cpus())
    out = affmon("exec", "--root", str(tmp_path), "--gpu", "0", "--", "sh", "-c", "yes | head -1")
    assert (out.returncode, out.stdout, out.stderr) == (0, "y\n", "")


def test_a_failed_exec_puts_the_dispositions_back(monkeypatch):
    """affmon goes on to say why the command did not start: its own writes to a closed
    pipe stay errors it handles, not a death by signal."""
    from affmon.commands import plan

    watched = (signal.SIGPIPE, signal.SIGXFSZ)
    before = {sig: signal.getsignal(sig) for sig in watched}
    assert set(before.values()) == {signal.SIG_IGN}  # as CPython set them at start-up
    during = {}

    def fail(file: str, args: list[str]) -> None:
        during.update({sig: signal.getsignal(sig) for sig in watched})
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(os, "execvp", fail)
    with pytest.raises(FileNotFoundError):
        plan._exec(["/nonexistent/cmd"])
    assert during == dict.fromkeys(watched, signal.SIG_DFL)
    assert {sig: signal.getsignal(sig) for sig in watched} == before
