"""What the NUMA lab (``bench/numa/vm.py``) needs from the host: Debian's packages, the
guest kernel and the initramfs it boots, found or made once and cached.

* Packages: ``qemu-system-x86`` (the emulator), ``linux-image-amd64`` (the generic
  kernel: the ``-cloud-amd64`` one has no 9p, so it cannot mount the host's files),
  ``busybox-static`` (the initramfs's only program), ``numactl`` and ``hwloc`` (run in the
  guest from the host's files) and ``tmux`` (the monitor in the guest). Missing ones are
  installed with ``apt-get`` as root (``LAB_PACKAGES`` is the line); anyone else is told the
  line to run.
* The kernel: the newest ``/boot/vmlinuz-*`` that has ``9p.ko`` among its modules (plain,
  as Debian 12 ships them, or ``.xz``, unpacked into the initramfs).
* The initramfs: an uncompressed cpio archive (``newc``) of busybox, the modules that
  mount the host's root over virtio-9p, and ``/init`` (``GUEST_INIT``), written to
  ``.cache/numa-lab/`` under a name that hashes what went into it, so a second call
  finds it (and a kernel upgrade makes a new one).
"""

from __future__ import annotations

import hashlib
import lzma
import os
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
CACHE = REPO / ".cache" / "numa-lab"

# Debian 12 names; every one is a plain ``apt-get install`` away.
LAB_PACKAGES = ("qemu-system-x86", "linux-image-amd64", "busybox-static", "numactl", "hwloc", "tmux")
# (program or file that proves it installed, package)
_PROOFS = (
    ("qemu-system-x86_64", "qemu-system-x86"),
    ("numactl", "numactl"),
    ("migratepages", "numactl"),
    ("lstopo-no-graphics", "hwloc"),
    ("tmux", "tmux"),
)
BUSYBOX = Path("/bin/busybox")
# What mounts the host's root: 9p over virtio-pci. Their dependencies come from modules.dep.
GUEST_MODULES = ("virtio_pci", "9pnet_virtio", "9p")


class LabError(RuntimeError):
    """The lab cannot run here; the message says what is missing and the line that fixes it."""


@dataclass(frozen=True, slots=True)
class Kernel:
    version: str
    image: Path
    modules: Path  # /lib/modules/<version>


def missing_packages() -> list[str]:
    """Packages of ``LAB_PACKAGES`` whose proof is absent (no apt query: a look at the files)."""
    missing = [pkg for prog, pkg in _PROOFS if shutil.which(prog) is None]
    if not _is_static_elf(BUSYBOX):
        missing.append("busybox-static")
    try:
        find_kernel()
    except LabError:
        missing.append("linux-image-amd64")
    return sorted(set(missing), key=LAB_PACKAGES.index)


def ensure_packages(quiet: bool = True) -> list[str]:
    """Install what is missing (root only) and return what was installed; an empty list
    (and no apt call at all) when everything is in place."""
    missing = missing_packages()
    if not missing:
        return []
    line = "apt-get install -y --no-install-recommends " + " ".join(missing)
    if os.geteuid() != 0:
        raise LabError(f"the NUMA lab needs {', '.join(missing)}: run as root: {line}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing]
    out = subprocess.DEVNULL if quiet else None
    if subprocess.run(install, env=env, stdout=out, stderr=out, check=False).returncode != 0:
        # No package lists yet (a fresh machine): read them once, then try again.
        update = subprocess.run(["apt-get", "update", "-qq"], env=env, stdout=out, stderr=out, check=False)
        if update.returncode != 0 or subprocess.run(install, env=env, stdout=out, stderr=out).returncode != 0:
            raise LabError(f"could not install {', '.join(missing)}: {line} failed")
    still = missing_packages()
    if still:
        raise LabError(f"installed {', '.join(missing)}, yet {', '.join(still)} still missing")
    return missing


def find_kernel(boot: Path = Path("/boot"), lib: Path = Path("/lib/modules")) -> Kernel:
    """The newest kernel image with 9p among its modules (the ``-cloud`` flavour has none)."""
    found = []
    for image in boot.glob("vmlinuz-*"):
        version = image.name.removeprefix("vmlinuz-")
        modules = lib / version
        has_9p = any((modules / f"kernel/fs/9p/9p.ko{ext}").is_file() for ext in ("", ".xz"))
        if has_9p and (modules / "modules.dep").is_file():
            found.append(Kernel(version, image, modules))
    if not found:
        raise LabError("no kernel with 9p under /boot (Debian: apt-get install linux-image-amd64)")
    return max(found, key=lambda k: _version_key(k.version))


def _version_key(version: str) -> tuple[int, ...]:
    digits = "".join(c if c.isdigit() else " " for c in version.split("-amd64")[0])
    return tuple(int(d) for d in digits.split())


def _is_static_elf(path: Path) -> bool:
    """True for a 64-bit ELF with no program interpreter (PT_INTERP): it runs with no libc
    in the initramfs."""
    try:
        data = path.read_bytes()
    except OSError:
        return False
    if data[:5] != b"\x7fELF\x02":
        return False
    (phoff,) = struct.unpack_from("<Q", data, 0x20)  # e_phoff
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)  # e_phentsize, e_phnum
    for i in range(phnum):
        (kind,) = struct.unpack_from("<I", data, phoff + i * phentsize)
        if kind == 3:  # PT_INTERP
            return False
    return True


def module_order(kernel: Kernel, wanted: tuple[str, ...] = GUEST_MODULES) -> list[str]:
    """Paths (relative to the modules directory) of ``wanted`` and their dependencies,
    each after what it depends on: the order to insmod them."""
    deps: dict[str, list[str]] = {}
    for line in (kernel.modules / "modules.dep").read_text().splitlines():
        path, _, rest = line.partition(":")
        deps[path] = rest.split()
    by_name = {Path(p).name.split(".ko")[0].replace("-", "_"): p for p in deps}
    order: list[str] = []

    def visit(path: str) -> None:
        if path in order:
            return
        for dep in reversed(deps.get(path, [])):  # modules.dep lists the deepest last
            visit(dep)
        order.append(path)

    for name in wanted:
        if name not in by_name:
            raise LabError(f"kernel {kernel.version} has no module {name}")
        visit(by_name[name])
    return order


# /init of the initramfs (busybox sh). It mounts the host's root read-only over 9p, a
# writable share for the command and its output at /tmp/lab, tmpfs where programs write,
# then runs /tmp/lab/cmd.sh chrooted in the host's root and powers off. The kernel command
# line gives LAB_REPO (the checkout, bound back if it lives under the host's /tmp).
GUEST_INIT = r"""#!/bin/busybox sh
B=/bin/busybox
$B mkdir -p /proc /sys /dev /new /host
$B mount -t proc proc /proc
$B mount -t sysfs sysfs /sys
$B mount -t devtmpfs dev /dev
for m in $($B cat /modules.order); do $B insmod /modules/$m || echo "lab: insmod $m failed"; done
P9="trans=virtio,version=9p2000.L,msize=512000"
$B mount -t 9p -o $P9,ro,cache=loose hostroot /new || { echo "lab: cannot mount the host's root"; $B poweroff -f; }
$B mount --bind /new /host
for d in proc sys dev; do $B mount --move /$d /new/$d; done
$B mkdir -p /new/dev/pts /new/dev/shm
$B mount -t devpts -o newinstance,ptmxmode=0666 devpts /new/dev/pts
$B mount -t tmpfs -o mode=1777 tmpfs /new/dev/shm
for d in tmp run var/tmp; do $B mount -t tmpfs -o mode=1777 tmpfs /new/$d; done
$B mkdir -p /new/tmp/lab /new/tmp/home /new/tmp/state
$B mount -t 9p -o $P9 lab /new/tmp/lab || { echo "lab: cannot mount the lab share"; $B poweroff -f; }
repo=${LAB_REPO:-/}  # the kernel hands init the command line's unknown NAME=VALUE words
case "$repo" in /tmp/*|/run/*|/var/tmp/*) $B mkdir -p /new$repo && $B mount --bind /host$repo /new$repo;; esac
$B chroot /new /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/tmp/home XDG_STATE_HOME=/tmp/state TERM=xterm-256color LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 \
  LAB_REPO=$repo /bin/sh -c 'cd "$LAB_REPO" && exec /bin/sh /tmp/lab/cmd.sh' >/new/tmp/lab/stdout 2>/new/tmp/lab/stderr
echo $? >/new/tmp/lab/rc
$B sync
$B poweroff -f
"""


def initramfs(kernel: Kernel, cache: Path = CACHE) -> Path:
    """The initramfs for ``kernel``, built once into ``cache``."""
    modules = module_order(kernel)
    busybox = BUSYBOX.read_bytes()
    digest = hashlib.sha256()
    for part in (GUEST_INIT.encode(), busybox, kernel.version.encode(), *(m.encode() for m in modules)):
        digest.update(hashlib.sha256(part).digest())
    path = cache / f"initramfs-{kernel.version}-{digest.hexdigest()[:12]}.cpio"
    if path.is_file():
        return path
    cache.mkdir(parents=True, exist_ok=True)  # .cache/ is in .gitignore
    files: list[tuple[str, int, bytes]] = [
        ("bin", 0o40755, b""),
        ("bin/busybox", 0o100755, busybox),
        ("init", 0o100755, GUEST_INIT.encode()),
        ("modules", 0o40755, b""),
        ("modules.order", 0o100644, "\n".join(_module_name(m) for m in modules).encode() + b"\n"),
    ]
    files += [(f"modules/{_module_name(m)}", 0o100644, _module_bytes(kernel.modules / m)) for m in modules]
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(cpio_newc(files))
    tmp.replace(path)
    for stale in cache.glob("initramfs-*.cpio"):
        if stale != path:
            stale.unlink(missing_ok=True)  # an older kernel's or init's (QEMU reads it at start)
    return path


def _module_name(path: str) -> str:
    """``kernel/fs/9p/9p.ko.xz`` -> ``9p.ko``: busybox's insmod takes uncompressed modules."""
    return Path(path).name.removesuffix(".xz")


def _module_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    return lzma.decompress(data) if path.suffix == ".xz" else data


def cpio_newc(files: list[tuple[str, int, bytes]]) -> bytes:
    """A cpio archive in the ``newc`` format the kernel unpacks: (name, mode, data) each."""
    out = bytearray()

    def entry(ino: int, name: str, mode: int, data: bytes) -> None:
        raw = name.encode() + b"\0"
        fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(raw), 0)
        out.extend(b"070701" + b"".join(b"%08X" % f for f in fields) + raw)
        out.extend(b"\0" * (-len(out) % 4))
        out.extend(data)
        out.extend(b"\0" * (-len(out) % 4))

    for ino, (name, mode, data) in enumerate(files, start=1):
        entry(ino, name, mode, data)
    entry(0, "TRAILER!!!", 0, b"")
    return bytes(out)


__all__ = [
    "CACHE",
    "LAB_PACKAGES",
    "Kernel",
    "LabError",
    "cpio_newc",
    "ensure_packages",
    "find_kernel",
    "initramfs",
    "missing_packages",
    "module_order",
]
