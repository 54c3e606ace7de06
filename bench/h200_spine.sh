#!/usr/bin/env bash
# What issue 2 asks to see on a real GPU: the NVML gateway, topology and a snapshot of a
# real training job, plus the per-thread sampling cost on a 16-core machine.
# Run from the repository root on the GPU machine; writes its logs to ${OUT:-/tmp/out}.
set -u
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
py=python3
{
  echo "== machine"; uname -r; nproc; $py --version; nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv
  echo "== nvidia-smi topo -m"; nvidia-smi topo -m
  echo "== affmon topology"; $py -m affmon topology
  echo "== affmon topology --json"; $py -m affmon topology --json
} >"$out/topology.txt" 2>&1

# a clean job, then the same job with a too-narrow mask, each snapshotted mid-run
for mode in clean narrow; do
  pre=""; [ $mode = narrow ] && pre="taskset -c 0-1"
  $pre $py bench/train_job.py --seconds 25 >"$out/job_$mode.log" 2>&1 &
  job=$!
  for _ in $(seq 120); do grep -q READY "$out/job_$mode.log" && break; sleep 1; done
  sleep 3
  $py -m affmon snapshot --json --interval 1 >"$out/snapshot_$mode.json" 2>"$out/snapshot_$mode.err"
  $py -m affmon snapshot --interval 1 --no-threads >"$out/snapshot_$mode.txt" 2>&1
  wait $job
done

$py -m pytest -q -s -p no:cacheprovider tests/test_nvml_live.py tests/test_nvml.py >"$out/nvml_tests.txt" 2>&1
$py - >"$out/nvml_cost.txt" 2>&1 <<'PY'
import time
from affmon.nvml import NvmlGateway
g = NvmlGateway(); print(g.open(), g.status)
for _ in range(3): g.sample()
t = time.perf_counter(); n = 50
for _ in range(n): s = g.sample()
print(f"gateway.sample(): {(time.perf_counter() - t) / n * 1e3:.2f} ms per call for {len(s)} GPU(s)")
print(s)
PY
$py bench/sample_cost.py >"$out/sample_cost.txt" 2>&1
echo done
