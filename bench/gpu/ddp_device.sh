#!/usr/bin/env bash
# The multi-GPU proof on a machine with NVIDIA GPUs, from the repository root: the machine's description,
# hwloc's reading of it (Debian's hwloc carried as .deb files in .hw/ where the machine has
# none: `apt-get download hwloc-nox libhwloc15 libhwloc-plugins libpciaccess0` here), a
# gathered sysfs tree (hwloc-gather-topology, for tests/fixtures), then
# bench/gpu/ddp_scenarios.py with the arguments given. Everything is bundled into $OUT/ddp.tgz,
# also when the scenarios run past LIMIT seconds.
#
#     bash bench/gpu/ddp_device.sh --gpus 2 --window 12
set -u
out=${OUT:-/tmp/out}
d=/tmp/ddp
mkdir -p "$d" "$out"
export PYTHONUNBUFFERED=1
if ! command -v lstopo-no-graphics >/dev/null && ls .hw/*.deb >/dev/null 2>&1; then
  h=/tmp/hw
  mkdir -p $h
  for f in .hw/*.deb; do dpkg -x "$f" $h; done
  sed -i "s|^prefix=\"/usr\"|prefix=\"$h/usr\"|" $h/usr/bin/hwloc-gather-topology
  export PATH=$h/usr/bin:$PATH LD_LIBRARY_PATH=$h/usr/lib/x86_64-linux-gnu HWLOC_PLUGINS_PATH=$h/usr/lib/x86_64-linux-gnu/hwloc
fi
{
  date -u; uname -r; nproc
  nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "GPUs", torch.cuda.device_count())'
  torchrun --help | grep -A3 -- --numa-binding
} >"$d/machine.txt" 2>&1
if [ "${GATHER:-1}" = 1 ] && command -v hwloc-gather-topology >/dev/null; then
  hwloc-gather-topology "$d/gathered" >"$d/gather.log" 2>&1
fi
timeout "${LIMIT:-540}" python3 -m bench.gpu.ddp_scenarios --out "$d" "$@" 2>&1 | tee "$d/run.log"
tar czf "$out/ddp.tgz" -C /tmp ddp
