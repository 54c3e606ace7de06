"""The NUMA lab: boot a QEMU guest with several NUMA nodes, run one command in it with this
checkout's affmon, and give back its output and exit status::

    python -m bench.numa.vm --shape two-nodes -- affmon topology
    python -m bench.numa.vm --shape memory-only -- numactl -H
    python -m bench.numa.vm --shape all -- lstopo-no-graphics --no-io

The guest runs the host's own Debian kernel (``linux-image-amd64``) under QEMU's TCG.
``--accel kvm`` tries KVM instead; on the 2-core CI-like machines the lab was written on
(themselves guests of a paravirtualised hypervisor, no ``vmx``/``svm`` flag) a KVM guest
printed nothing and was killed at its limit (docs/numa-lab.md). Its nodes are real to its
kernel: ``/sys/devices/system/node``, ``numa_maps``, ``migrate_pages``, ``mbind``, the
scheduler's placement, a node with memory and no CPUs. Shapes (``SHAPES``):

* ``two-nodes``: 2 nodes of 2 CPUs (one socket each), 768 MiB each;
* ``four-nodes``: 4 nodes of 1 CPU (one socket each), 384 MiB each;
* ``memory-only``: 2 nodes of 2 CPUs, and node 2 with 512 MiB and no CPU.

How: the host's root is shared read-only over virtio-9p and the command runs chrooted in
it, so every program of the host (python, this checkout and its ``.venv``, numactl,
lstopo, tmux) runs in the guest from the same paths; ``/tmp``, ``/run``, ``/dev/shm`` are
the guest's tmpfs, ``HOME`` and ``XDG_STATE_HOME`` (affmon's journal) are under ``/tmp``. A
second, writable share is the guest's ``/tmp/lab``: the command's script goes in, its
output, exit status and any file it writes to ``$LAB_OUT`` come out. The command runs as
root in the checkout with ``.venv/bin`` first on ``PATH`` (``affmon`` is this checkout).

Every QEMU runs under a wall-clock limit (``--timeout``) and is killed by its PID when it
passes it: a guest that hangs must not hold the caller. The first call installs the
Debian packages it needs with apt-get (root) and builds the initramfs into
``.cache/numa-lab/`` (``bench/numa/lab_host.py``); later calls find both in place.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.numa.lab_host import REPO, LabError, ensure_packages, find_kernel, initramfs


@dataclass(frozen=True, slots=True)
class Shape:
    """A guest's NUMA layout: CPUs of each node with CPUs (one socket per node, so
    packages follow nodes), then nodes with memory and no CPU."""

    name: str
    cpus_per_node: tuple[int, ...]
    node_mib: int
    memory_only_mib: tuple[int, ...] = ()

    @property
    def cpus(self) -> int:
        return sum(self.cpus_per_node)

    @property
    def memory_mib(self) -> int:
        return self.node_mib * len(self.cpus_per_node) + sum(self.memory_only_mib)

    def qemu_args(self) -> list[str]:
        sockets = len(self.cpus_per_node)
        cores = self.cpus_per_node[0]
        if any(n != cores for n in self.cpus_per_node):
            raise ValueError(f"{self.name}: every node with CPUs needs the same count")
        args = ["-m", f"{self.memory_mib}M", "-smp", f"{self.cpus},sockets={sockets},cores={cores},threads=1"]
        first = 0
        sizes = [self.node_mib] * sockets + list(self.memory_only_mib)
        for node, size in enumerate(sizes):
            args += ["-object", f"memory-backend-ram,id=m{node},size={size}M"]
            spec = f"node,nodeid={node},memdev=m{node}"
            if node < sockets:
                spec += f",cpus={first}-{first + cores - 1}"
                first += cores
            args += ["-numa", spec]
        return args


SHAPES = {
    s.name: s
    for s in (
        Shape("two-nodes", (2, 2), 768),
        Shape("four-nodes", (1, 1, 1, 1), 384),
        Shape("memory-only", (2, 2), 768, (512,)),
    )
}


@dataclass(frozen=True, slots=True)
class GuestRun:
    """What one boot gave: the command's exit status (None when it never finished: the
    guest hung or was killed at the limit), its output, the files it left in ``$LAB_OUT``,
    the guest's console, and host wall-clock seconds from QEMU's start to the command's
    start (``boot_s``), of the command (``command_s``), and in all (``wall_s``)."""

    shape: str
    returncode: int | None
    stdout: str
    stderr: str
    console: str
    boot_s: float | None
    command_s: float | None
    wall_s: float
    timed_out: bool
    files: Mapping[str, bytes] = field(default_factory=dict)


# The guest's /init runs this wrapper: it says when the command starts, then runs it.
_WRAPPER = """\
: >/tmp/lab/started
export LAB_OUT=/tmp/lab/out PATH="$LAB_REPO/.venv/bin:$PATH"
{env}
{command}
"""


# QEMU's accelerators: TCG (every guest CPU emulated: slow, works anywhere) and KVM.
ACCELS = {"tcg": ("-accel", "tcg,thread=multi", "-cpu", "max"), "kvm": ("-accel", "kvm", "-cpu", "host")}


def qemu_command(shape: Shape, kernel: Path, initrd: Path, share: Path, accel: str = "tcg") -> list[str]:
    append = f"console=ttyS0 quiet loglevel=3 panic=-1 rdinit=/init LAB_REPO={REPO}"
    return [
        "qemu-system-x86_64",
        *ACCELS[accel],
        *shape.qemu_args(),
        *("-kernel", str(kernel), "-initrd", str(initrd), "-append", append),
        *("-nodefaults", "-no-user-config", "-display", "none", "-serial", "stdio", "-no-reboot"),
        "-virtfs",
        "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
        "-virtfs",
        f"local,path={share},mount_tag=lab,security_model=none,multidevs=remap",
    ]


def run(
    shape: Shape | str,
    command: str | Sequence[str],
    *,
    timeout_s: float = 600.0,
    env: Mapping[str, str] | None = None,
    install: bool = True,
    accel: str = "tcg",
) -> GuestRun:
    """Boot ``shape``, run ``command`` (a shell line, or an argv) in the guest, power off.
    Never waits past ``timeout_s``: QEMU is killed by its PID then."""
    if isinstance(shape, str):
        shape = SHAPES[shape]
    if install:
        ensure_packages()
    kernel = find_kernel()
    initrd = initramfs(kernel)
    line = command if isinstance(command, str) else shlex.join(command)
    exports = "\n".join(f"export {k}={shlex.quote(v)}" for k, v in (env or {}).items())
    share = Path(tempfile.mkdtemp(prefix="numa-lab-"))
    try:
        (share / "out").mkdir()
        (share / "cmd.sh").write_text(_WRAPPER.format(env=exports, command=line))
        return _boot(shape, qemu_command(shape, kernel.image, initrd, share, accel), share, timeout_s)
    finally:
        shutil.rmtree(share, ignore_errors=True)


def _boot(shape: Shape, argv: list[str], share: Path, timeout_s: float) -> GuestRun:
    console = share / "console.log"
    started_at = time.monotonic()
    boot_s = command_s = None
    timed_out = False
    with console.open("wb") as log:
        qemu = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        try:
            while qemu.poll() is None:
                now = time.monotonic()
                if now - started_at > timeout_s:
                    timed_out = True
                    qemu.kill()  # by its PID: this Popen's own process
                    break
                if boot_s is None and (share / "started").exists():
                    boot_s = now - started_at
                if command_s is None and boot_s is not None and (share / "rc").exists():
                    command_s = now - started_at - boot_s
                time.sleep(0.05)
        finally:
            if qemu.poll() is None:
                qemu.kill()
            qemu.wait()
    wall_s = time.monotonic() - started_at
    if boot_s is None and (share / "started").exists():
        boot_s = wall_s
    rc_text = _read(share / "rc").strip()
    returncode = int(rc_text) if rc_text.lstrip("-").isdigit() else None
    if returncode is not None and command_s is None and boot_s is not None:
        command_s = wall_s - boot_s
    files = {p.name: p.read_bytes() for p in sorted((share / "out").iterdir()) if p.is_file()}
    return GuestRun(
        shape=shape.name,
        returncode=returncode,
        stdout=_read(share / "stdout"),
        stderr=_read(share / "stderr"),
        console=_read(console),
        boot_s=boot_s,
        command_s=command_s,
        wall_s=wall_s,
        timed_out=timed_out,
        files=files,
    )


def _read(path: Path) -> str:
    try:
        return path.read_bytes().decode(errors="replace")
    except OSError:
        return ""


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="two-nodes", choices=[*SHAPES, "all"])
    ap.add_argument("--accel", default="tcg", choices=ACCELS, help="kvm: see the module's docstring")
    ap.add_argument("--timeout", type=float, default=600.0, help="wall-clock limit per boot, seconds")
    ap.add_argument("--out", type=Path, help="copy the files the command left in $LAB_OUT here")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ... (a shell line when one word)")
    a = ap.parse_args(argv)
    command = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not command:
        ap.error("needs a command after --")
    line = command[0] if len(command) == 1 else shlex.join(command)
    status = 0
    try:
        for name in SHAPES if a.shape == "all" else [a.shape]:
            result = run(name, line, timeout_s=a.timeout, accel=a.accel)
            sys.stdout.write(result.stdout)
            sys.stderr.write(result.stderr)
            if a.out is not None:
                a.out.mkdir(parents=True, exist_ok=True)
                for file_name, data in result.files.items():
                    (a.out / file_name).write_bytes(data)
            said = f"lab: {name}: boot {_seconds(result.boot_s)}, command {_seconds(result.command_s)}"
            said += f", in all {result.wall_s:.1f} s, exit {result.returncode}"
            if result.timed_out:
                said += f" (killed at the {a.timeout:.0f} s limit)"
            print(said, file=sys.stderr)
            if result.returncode is None:
                sys.stderr.write(result.console[-3000:])
            status = status or (125 if result.returncode is None else result.returncode)
    except LabError as exc:
        print(f"lab: {exc}", file=sys.stderr)
        return 125
    return status


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
