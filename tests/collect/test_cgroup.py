"""The cpuset cgroup resolver: hand-built trees for each hierarchy kind, and the cgroups
recorded in hwloc's sysfs trees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from affmon.collect.cgroup import Mount, cgroup_cpuset, parse_mounts, read_mounts
from affmon.core.errors import ParseError
from affmon.core.model.cpuset import parse_cpulist
from tests.helpers.topology_trees import extract_tree


def cpus(text: str) -> frozenset[int]:
    return parse_cpulist(text)


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")


# --------------------------------------------------------------------------------------
# /proc/mounts


def test_read_mounts_decodes_escapes(tmp_path):
    write(
        tmp_path,
        {
            "proc/mounts": "\n".join(
                [
                    "sysfs /sys sysfs rw,nosuid,nodev 0 0",
                    r"cgroup2 /run/my\040cg\011tab cgroup2 rw,nsdelegate 0 0",
                    r"/dev/sd\134a /mnt/back\134slash ext4 rw 0 0",
                ]
            )
        },
    )
    mounts = read_mounts(str(tmp_path))
    assert mounts == (
        Mount("sysfs", "/sys", "sysfs", frozenset({"rw", "nosuid", "nodev"})),
        Mount("cgroup2", "/run/my cg\ttab", "cgroup2", frozenset({"rw", "nsdelegate"})),
        Mount("/dev/sd\\a", "/mnt/back\\slash", "ext4", frozenset({"rw"})),
    )


def test_read_mounts_falls_back_to_self_and_to_nothing(tmp_path):
    assert read_mounts(str(tmp_path)) == ()
    write(tmp_path, {"proc/self/mounts": "none /dev/cpuset cpuset rw 0 0"})
    assert [m.fstype for m in read_mounts(str(tmp_path))] == ["cpuset"]


def test_parse_mounts_rejects_short_lines():
    with pytest.raises(ParseError):
        parse_mounts("cgroup2 /sys/fs/cgroup\n")


# --------------------------------------------------------------------------------------
# cgroup v2


def v2_tree(root: Path, leaf_files: dict[str, str] | None = None) -> None:
    files = {
        "proc/mounts": "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0",
        "proc/self/cgroup": "0::/job/step",
        "sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory",
        "sys/fs/cgroup/cpuset.cpus.effective": "0-15",
        "sys/fs/cgroup/cpuset.mems.effective": "0-1",
        "sys/fs/cgroup/job/cgroup.procs": "",
        "sys/fs/cgroup/job/step/cgroup.procs": "",
    }
    files.update({f"sys/fs/cgroup/job/step/{k}": v for k, v in (leaf_files or {}).items()})
    write(root, files)


def test_v2_leaf(tmp_path):
    v2_tree(tmp_path, {"cpuset.cpus.effective": "2-3,8", "cpuset.mems.effective": "1"})
    assert cgroup_cpuset(str(tmp_path)) == cpus("2-3,8")


def test_v2_leaf_inherits_from_nearest_ancestor(tmp_path):
    v2_tree(tmp_path)
    write(tmp_path, {"sys/fs/cgroup/job/cpuset.cpus.effective": "4-7"})
    # the leaf has no cpuset files (controller not enabled there): the parent's set
    assert cgroup_cpuset(str(tmp_path)) == cpus("4-7")


def test_v2_missing_leaf_is_unknown_not_the_host(tmp_path):
    v2_tree(tmp_path)
    write(tmp_path, {"proc/self/cgroup": "0::/gone"})
    assert cgroup_cpuset(str(tmp_path)) is None


def test_v2_without_cpuset_controller_is_unknown(tmp_path):
    v2_tree(tmp_path, {"cpuset.cpus.effective": "1"})
    write(tmp_path, {"sys/fs/cgroup/cgroup.controllers": "cpu io memory"})
    assert cgroup_cpuset(str(tmp_path)) is None


def test_v2_escaped_mount_point(tmp_path):
    write(
        tmp_path,
        {
            "proc/mounts": r"cgroup2 /run/my\040cgroup cgroup2 rw 0 0",
            "proc/self/cgroup": "0::/a b",
            "run/my cgroup/cgroup.controllers": "cpuset",
            "run/my cgroup/a b/cpuset.cpus.effective": "5",
        },
    )
    assert cgroup_cpuset(str(tmp_path)) == frozenset({5})


def test_v2_path_leaving_the_hierarchy_is_unknown(tmp_path):
    v2_tree(tmp_path, {"cpuset.cpus.effective": "1"})
    # a task outside our cgroup namespace shows "/.." paths; this one, joined naively to
    # /sys/fs/cgroup, would even land on an existing cgroup (/sys/fs/cgroup/job/step)
    write(tmp_path, {"proc/42/cgroup": "0::/../cgroup/job/step"})
    assert cgroup_cpuset(str(tmp_path), pid=42) is None
    write(tmp_path, {"proc/43/cgroup": "0::/job/step"})
    assert cgroup_cpuset(str(tmp_path), pid=43) == frozenset({1})


def test_hybrid_picks_the_hierarchy_with_cpuset(tmp_path):
    """systemd "hybrid": a cgroup2 mount without controllers listed before the v1 cpuset."""
    write(
        tmp_path,
        {
            "proc/mounts": "\n".join(
                [
                    "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0",
                    "cgroup /sys/fs/cgroup/cpuset cgroup rw,nosuid,cpuset 0 0",
                ]
            ),
            "proc/self/cgroup": "3:cpuset:/slurm/job1\n0::/user.slice",
            "sys/fs/cgroup/unified/cgroup.controllers": "",
            "sys/fs/cgroup/unified/user.slice/cpuset.cpus.effective": "0-63",
            "sys/fs/cgroup/cpuset/slurm/job1/cpuset.cpus": "10-11",
        },
    )
    assert cgroup_cpuset(str(tmp_path)) == cpus("10-11")


# --------------------------------------------------------------------------------------
# cgroup v1 and the cpuset filesystem


def test_v1_with_prefix(tmp_path):
    write(
        tmp_path,
        {
            "proc/mounts": "cgroup /sys/fs/cgroup/cpuset cgroup rw,nosuid,cpuset 0 0\n"
            "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0",
            "proc/1234/cgroup": "9:cpu,cpuacct:/other\n7:cpuset:/jjh\n1:name=systemd:/user.slice",
            "sys/fs/cgroup/cpuset/jjh/cpuset.cpus": "0-175",
            "sys/fs/cgroup/cpuset/jjh/cpuset.effective_cpus": "0-87",
            "sys/fs/cgroup/cpuset/jjh/cpuset.mems": "0,8",
            "sys/fs/cgroup/cpuset/other/cpuset.effective_cpus": "1",
        },
    )
    root = str(tmp_path)
    assert cgroup_cpuset(root, pid=1234) == cpus("0-87")  # effective first
    (tmp_path / "sys/fs/cgroup/cpuset/jjh/cpuset.effective_cpus").unlink()
    assert cgroup_cpuset(root, pid=1234) == cpus("0-175")


def test_v1_noprefix_with_proc_cpuset(tmp_path):
    """Torque's /dev/cpuset (cgroup v1 mounted with noprefix); no /proc/<pid>/cgroup."""
    write(
        tmp_path,
        {
            "proc/mounts": "none /dev/cpuset cgroup rw,relatime,cpuset,noprefix,release_agent=/sbin/x 0 0",
            "proc/self/cpuset": "/torque/513099",
            "dev/cpuset/torque/513099/cpus": "4-5",
            "dev/cpuset/torque/513099/mems": "1",
            "dev/cpuset/torque/513099/effective_mems": "0",
        },
    )
    assert cgroup_cpuset(str(tmp_path)) == cpus("4-5")


def test_old_cpuset_filesystem(tmp_path):
    write(
        tmp_path,
        {
            "proc/mounts": "none /dev/cpuset cpuset rw 0 0",
            "proc/self/cpuset": "/batch/42",
            "dev/cpuset/batch/42/cpus": "2,6",
            "dev/cpuset/batch/42/effective_cpus": "2",
        },
    )
    assert cgroup_cpuset(str(tmp_path)) == frozenset({2})


def test_standard_places_without_mount_table(tmp_path):
    write(
        tmp_path,
        {
            "proc/self/cgroup": "0::/",
            "sys/fs/cgroup/cpuset.cpus.effective": "0-3",
        },
    )
    assert cgroup_cpuset(str(tmp_path)) == cpus("0-3")


def test_explicit_mounts_argument(tmp_path):
    write(tmp_path, {"proc/self/cpuset": "/a", "cg/a/cpuset.cpus": "7"})
    mounts = (Mount("cgroup", "/cg", "cgroup", frozenset({"rw", "cpuset"})),)
    assert cgroup_cpuset(str(tmp_path), mounts=mounts) == frozenset({7})
    assert cgroup_cpuset(str(tmp_path)) is None  # the tree has no mount table of its own


# --------------------------------------------------------------------------------------
# Unknown and malformed


@pytest.mark.parametrize(
    "files",
    [
        {},  # nothing at all
        {"proc/mounts": "sysfs /sys sysfs rw 0 0"},  # no cgroup mount, no standard place
        # a cpuset hierarchy but no way to know the task's path
        {"proc/mounts": "cgroup /cg cgroup rw,cpuset 0 0", "proc/self/cgroup": "4:memory:/x"},
        # path known but the files are missing
        {"proc/mounts": "cgroup /cg cgroup rw,cpuset 0 0", "proc/self/cpuset": "/x", "cg/x/tasks": ""},
        # an empty /proc/<pid>/cpuset
        {"proc/mounts": "cpuset /cg cpuset rw 0 0", "proc/self/cpuset": "", "cg/cpus": "0"},
    ],
)
def test_unknown_is_none(tmp_path, files):
    write(tmp_path, files)
    assert cgroup_cpuset(str(tmp_path)) is None


def test_malformed_set_raises(tmp_path):
    v2_tree(tmp_path, {"cpuset.cpus.effective": "0-3,x"})
    with pytest.raises(ParseError, match=r"job/step/cpuset\.cpus\.effective"):
        cgroup_cpuset(str(tmp_path))


def test_bad_pid_is_refused(tmp_path):
    with pytest.raises(ValueError):
        cgroup_cpuset(str(tmp_path), pid="../1")


# --------------------------------------------------------------------------------------
# hwloc's recorded trees


@pytest.mark.parametrize(
    ("name", "expected_cpus"),
    [
        # cgroup2 at /cgroup/unified, path only in /proc/self/cpuset (Slurm step)
        ("cgroup2", "0-5"),
        # cgroup v1 noprefix at /dev/cpuset (Torque job), no effective_* files
        ("pcilocality", "0-39"),
        # cgroup v1 at /sys/fs/cgroup/cpuset, /jjh: effective_cpus 0-87 (cpus 0-175)
        ("gpunuma", "0-87"),
        # cgroup2 mounted at /sys/fs/cgroup, but the tree did not record that directory
        ("gb10", None),
        # no /proc/mounts, no /proc/self/cgroup or cpuset, no cgroup directories
        ("sparse", None),
    ],
)
def test_recorded_trees(tmp_path_factory, name, expected_cpus):
    root = str(extract_tree(tmp_path_factory, name))
    assert cgroup_cpuset(root) == (None if expected_cpus is None else cpus(expected_cpus))


def test_live_cgroup_contains_own_affinity():
    """On this machine: whatever the cgroup allows holds the CPUs we may run on."""
    allowed = cgroup_cpuset("/")
    if allowed is not None:
        assert frozenset(os.sched_getaffinity(0)) <= allowed
    assert read_mounts("/"), "a live Linux system has a mount table"
