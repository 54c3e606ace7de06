#!/usr/bin/env bash
# Shows on a real GPU: the NVML gateway, the topology and snapshots of
# a real training job (clean, with a too-narrow mask, with other tenants' CPU hogs), plus
# the per-thread sampling cost. Run from the repository root on the GPU machine; writes
# logs to ${OUT:-/tmp/out} and bundles them into spine.tar.gz there.
set -u
out=${OUT:-/tmp/out}; logs=$out/logs; mkdir -p "$logs"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
py=python3
{
  echo "== machine"; uname -r; nproc; $py --version; nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv
  echo "== nvidia-smi topo -m"; nvidia-smi topo -m
  echo "== affmon topology"; $py -m affmon topology
  echo "== affmon topology --json"; $py -m affmon topology --json
} >"$logs/topology.txt" 2>&1

hogs=()
for mode in clean narrow hogs; do
  pre=""
  [ $mode = narrow ] && pre="taskset -c 0-1"
  if [ $mode = hogs ]; then
    for _ in $(seq 16); do $py -c 'while True: pass' & hogs+=($!); done
  fi
  $pre $py -m bench.workloads.train_job --seconds 20 >"$logs/job_$mode.log" 2>&1 &
  job=$!
  for _ in $(seq 120); do grep -q READY "$logs/job_$mode.log" && break; sleep 1; done
  sleep 2
  $py -m affmon snapshot --json --interval 1 >"$logs/snapshot_$mode.json" 2>&1
  $py -m affmon snapshot --interval 1 >"$logs/snapshot_$mode.txt" 2>&1
  wait $job
  [ ${#hogs[@]} -gt 0 ] && kill "${hogs[@]}" 2>/dev/null
done

$py -m pytest -q -s -p no:cacheprovider tests/nvml/test_nvml_live.py tests/nvml/test_nvml.py >"$logs/nvml_tests.txt" 2>&1
$py - >"$logs/nvml_cost.txt" 2>&1 <<'PY'
import time
from affmon.nvml import NvmlGateway
g = NvmlGateway(); print(g.open(), g.status)
for _ in range(3): g.sample()
t = time.perf_counter(); n = 20
for _ in range(n): s = g.sample()
print(f"gateway.sample(): {(time.perf_counter() - t) / n * 1e3:.2f} ms wall per call for {len(s)} GPU(s) (20 ms PCIe window included)")
t = time.process_time()
for _ in range(n): g.sample()
print(f"gateway.sample(): {(time.process_time() - t) / n * 1e3:.2f} ms CPU per call")
print(s)
PY
$py -m bench.cost.sample_cost >"$logs/sample_cost.txt" 2>&1
tar czf "$out/spine.tar.gz" -C "$out" logs && rm -r "$logs"
echo done
