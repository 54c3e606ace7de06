"""What placed a process: cgroup paths of real Slurm and Kubernetes nodes, the kubelet's
CPU manager state, torchrun's --numa-binding, and the environment of live processes."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from affmon.collect.context import CPU_MANAGER_STATE, ContextReader
from affmon.collect.procfs import ProcFs
from affmon.core.errors import ParseError
from affmon.core.model.context import (
    MAX_VALUE_CHARS,
    Context,
    cgroup_path,
    context_of,
    cpu_manager_exclusive,
    environ_values,
    from_cgroup,
    numa_binding,
)

CASES = [
    line.split("|", 1)
    for line in (Path(__file__).parent.parent / "fixtures" / "context" / "cgroup_paths.txt").read_text().splitlines()
    if line and not line.startswith("#")
]


@pytest.mark.parametrize(("expected", "path"), CASES)
def test_real_cgroup_paths(expected, path):
    scheduler, ident, detail, container = (field or None for field in expected.split(","))
    found = from_cgroup(path)
    assert found.scheduler == scheduler
    if scheduler == "slurm":
        assert (found.slurm_job_id, found.slurm_step) == (ident, detail)
    elif scheduler == "kubernetes":
        assert (found.pod_uid, found.qos, found.container_id) == (ident, detail, container)
    else:
        assert found == Context()


def test_a_guaranteed_pod_sits_directly_under_kubepods():
    found = from_cgroup(
        "/kubepods.slice/kubepods-pod0a1b2c3d_0000_1111_2222_333344445555.slice/cri-containerd-"
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope"
    )
    assert (found.scheduler, found.qos, found.pod_uid) == (
        "kubernetes",
        "guaranteed",
        "0a1b2c3d-0000-1111-2222-333344445555",
    )
    cgroupfs = from_cgroup("/kubepods/besteffort/pod0a1b2c3d-0000-1111-2222-333344445555/0123456789abcdef0123")
    assert (cgroupfs.qos, cgroupfs.pod_uid, cgroupfs.container_id) == (
        "besteffort",
        "0a1b2c3d-0000-1111-2222-333344445555",
        "0123456789abcdef0123",
    )


def test_cgroup_path_prefers_the_v2_line():
    assert cgroup_path("12:cpuset:/a\n0::/b/c\n") == "/b/c"
    assert cgroup_path("12:cpuset:/kubepods.slice/x\n11:memory:/y\n") == "/kubepods.slice/x"
    assert cgroup_path("") is None


STATE = (
    '{"policyName":"static","defaultCpuSet":"0-1,6-15","entries":{'
    '"0a1b2c3d-0000-1111-2222-333344445555":{"trainer":"2-5","sidecar":"16"}},"checksum":1234567890}'
)


def test_cpu_manager_state_gives_a_pods_exclusive_cpus():
    assert cpu_manager_exclusive(STATE, "0a1b2c3d-0000-1111-2222-333344445555") == frozenset({2, 3, 4, 5, 16})
    assert cpu_manager_exclusive(STATE, "ffffffff-0000-1111-2222-333344445555") is None
    assert cpu_manager_exclusive('{"policyName":"none","defaultCpuSet":"0-15","checksum":1}', "x") is None
    with pytest.raises(ParseError):
        cpu_manager_exclusive("{not json", "x")
    with pytest.raises(ParseError):
        cpu_manager_exclusive('{"policyName":"static","entries":{"u":{"c":"2-x"}}}', "u")


@pytest.mark.parametrize(
    ("argv", "mode"),
    [
        (["torchrun", "--nproc-per-node", "8", "--numa-binding", "node", "train.py"], "node"),
        (["python", "-m", "torch.distributed.run", "--numa_binding=exclusive", "train.py"], "exclusive"),
        (["torchrun", "--numa-binding=core-complex", "train.py"], "core-complex"),
        (["torchrun", "--numa-binding", "bogus", "train.py"], None),
        (["torchrun", "--numa-binding"], None),
        (["torchrun", "train.py"], None),
    ],
)
def test_numa_binding(argv, mode):
    assert numa_binding(argv) == mode


@given(st.binary(max_size=400))
def test_environ_values_never_raise_and_are_bounded(data):
    values = environ_values(data)
    assert all(len(v) <= MAX_VALUE_CHARS for v in values.values())


def test_environ_first_of_a_repeated_key_wins_and_others_are_ignored():
    data = b"LOCAL_RANK=3\0SECRET=x\0LOCAL_RANK=5\0SLURM_JOB_ID=77\0"
    assert environ_values(data) == {"LOCAL_RANK": "3", "SLURM_JOB_ID": "77"}


def test_context_of_joins_environment_and_cgroup():
    env = {"SLURM_JOB_ID": "4242", "SLURM_LOCALID": "1", "SLURM_PROCID": "9", "LOCAL_RANK": "x1", "RANK": "9"}
    found = context_of(
        env, "/system.slice/slurmstepd.scope/job_4242/step_0/user/task_1", ["torchrun", "--numa-binding", "socket"]
    )
    assert (found.scheduler, found.slurm_job_id, found.slurm_step) == ("slurm", "4242", "0")
    assert (found.slurm_local_id, found.slurm_proc_id, found.local_rank, found.rank) == (1, 9, None, 9)
    assert found.numa_binding == "socket" and found.from_environ
    assert found.summary() == "slurm 4242.0 rank 1 torchrun --numa-binding socket"
    assert context_of(None, None) == Context()


SLEEPER = "import time; print('up', flush=True); time.sleep(30)"


def test_a_live_process_environment_is_read():
    env = dict(os.environ, SLURM_JOB_ID="31337", SLURM_LOCALID="2", LOCAL_RANK="2", WORLD_SIZE="4")
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"  # exec'd: its own environment
        found = ContextReader(ProcFs("/")).read(proc.pid)
        assert found.from_environ
        assert (found.scheduler, found.slurm_job_id, found.local_rank, found.world_size) == ("slurm", "31337", 2, 4)
    finally:
        proc.kill()
        proc.wait()


def test_another_users_process_gives_the_cgroup_context_only(tmp_path):
    """Run as nobody: root's process environment is not readable; the context says so."""
    if os.geteuid() != 0:
        pytest.fail("this test runs as root (CI does)")
    env = dict(os.environ, SLURM_JOB_ID="31337")
    target = subprocess.Popen([sys.executable, "-c", SLEEPER], env=env, stdout=subprocess.PIPE, text=True)
    assert target.stdout is not None and target.stdout.readline().strip() == "up"
    repo = str(Path(__file__).resolve().parent.parent.parent)
    code = (
        f"import os, sys; sys.path.insert(0, {repo!r})\n"
        "from affmon.collect.context import ContextReader; from affmon.collect.procfs import ProcFs\n"
        "os.setgid(65534); os.setuid(65534)  # after the imports: root's interpreter is not readable by nobody\n"
        f"c = ContextReader(ProcFs('/')).read({target.pid}); print(c.from_environ, c.slurm_job_id)\n"
    )
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert out.stdout.split() == ["False", "None"], out.stderr
    finally:
        target.kill()
        target.wait()


def test_a_recorded_tree_with_a_pod_and_the_cpu_manager_state(tmp_path):
    (tmp_path / "proc" / "77").mkdir(parents=True)
    (tmp_path / "proc" / "77" / "cgroup").write_text(
        "0::/kubepods.slice/kubepods-pod0a1b2c3d_0000_1111_2222_333344445555.slice/cri-containerd-"
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope\n"
    )
    state = tmp_path / CPU_MANAGER_STATE.lstrip("/")
    state.parent.mkdir(parents=True)
    state.write_text(STATE)
    found = ContextReader(ProcFs(str(tmp_path))).read(77)
    assert not found.from_environ
    assert found.scheduler == "kubernetes" and found.exclusive_cpus == frozenset({2, 3, 4, 5, 16})
    assert found.summary() == "k8s pod 0a1b2c3d"
