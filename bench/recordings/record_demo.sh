#!/usr/bin/env bash
# The demo recording shipped in the package (affmon --demo): a real ResNet job on the GPU
# machine starved by 16 CPU hogs, then fixed by affmon's own `pin --suggest --isolate`
# half way through. Run from the repository root on the GPU machine; writes
# ${OUT:-/tmp/out}/demo.jsonl.gz and the pin's JSON.
set -u
out=${OUT:-/tmp/out}; logs=/tmp/demo-logs; mkdir -p "$out" "$logs"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 XDG_STATE_HOME=$logs/state
py=python3
hogs=(); for _ in $(seq "$(nproc)"); do $py -c 'while True: pass' & hogs+=($!); done
$py -m bench.workloads.train_job --seconds 200 --report-every 2 >"$logs/job.log" 2>&1 &
job=$!
for _ in $(seq 120); do grep -q READY "$logs/job.log" && break; sleep 1; done
pid=$(sed -n 's/READY pid=\([0-9]*\).*/\1/p' "$logs/job.log")
$py -m affmon record "$logs/demo.jsonl" --force --duration 45 --interval 1 2>>"$logs/record.err" &
rec=$!
sleep 20
$py -m affmon pin "$pid" --suggest --with-children --isolate --json >"$out/demo_pin.json" 2>&1
wait $rec
kill $job "${hogs[@]}" 2>/dev/null
gzip -9 -c "$logs/demo.jsonl" >"$out/demo.jsonl.gz"
grep RATE "$logs/job.log" | tr '\n' ' ' >"$out/demo_rates.txt"
ls -la "$out"; cat "$out/demo_rates.txt"
