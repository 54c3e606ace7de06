#!/usr/bin/env bash
# Record each CPU-placement scenario of a real training job with `affmon record`, on a GPU
# machine: the recordings are the test data of affmon's diagnosis rules
# (tests/fixtures/recordings). Run from the repository root:
#   bash bench/recordings/record_scenarios.sh [SCENARIO ...]   (default: all seven)
# Recordings go to ${OUT:-/tmp/out}, the jobs' logs to /tmp/scenario-logs.
set -u
out=${OUT:-/tmp/out}; logs=/tmp/scenario-logs; mkdir -p "$out" "$logs"
wanted=" ${*:-clean pinned hogs narrow single_core overlap input_bound} "
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
py=python3
ncpu=$(nproc)

start_job() {  # $1 = log name, rest = optional prefix (taskset ...)
  local log=$1; shift
  "$@" $py -m bench.workloads.train_job --seconds 60 >"$logs/$log.log" 2>&1 &
  echo $!
}
wait_ready() { for _ in $(seq 120); do grep -q READY "$logs/$1.log" && return; sleep 1; done; }
want() { [[ $wanted == *" $1 "* ]]; }

scenario() {  # name [duration], then the commands that plant it are already running
  sleep 2
  $py -m affmon record "$out/$1.jsonl" --duration "${2:-4}" --interval 1 2>>"$logs/record.err"
  gzip -9 -f "$out/$1.jsonl"
}

stop() { kill "$@" 2>/dev/null; wait "$@" 2>/dev/null; }

# clean, unpinned
if want clean; then j=$(start_job clean); wait_ready clean; scenario clean; stop $j; fi
# healthy pinned: the job alone on CPUs 0-5
if want pinned; then j=$(start_job pinned taskset -c 0-5); wait_ready pinned; scenario pinned; stop $j; fi
# other tenants' CPU hogs: more busy threads than cores
if want hogs; then
  hogs=(); for _ in $(seq $ncpu); do $py -c 'while True: pass' & hogs+=($!); done
  j=$(start_job hogs); wait_ready hogs; scenario hogs; stop $j "${hogs[@]}"
fi
# too-narrow mask
if want narrow; then j=$(start_job narrow taskset -c 0-1); wait_ready narrow; scenario narrow; stop $j; fi
# DataLoader workers confined to the main thread's single core
if want single_core; then
  j=$(start_job single taskset -c 3); wait_ready single; scenario single_core; stop $j
fi
# two training jobs whose masks overlap
if want overlap; then
  a=$(start_job overlap_a taskset -c 0-5); b=$(start_job overlap_b taskset -c 2-7)
  wait_ready overlap_a; wait_ready overlap_b; scenario overlap; stop $a $b
fi
# input-bound: one DataLoader worker doing a heavy decode for a ResNet-18 step, so the loop
# waits for data (INPUT_BOUND, advising more workers); longer, so the loop probe's window
# fills (its breakdown needs a few seconds of probes)
if want input_bound; then
  $py -m bench.workloads.loop_job data --workers 1 --seconds 60 >"$logs/input_bound.log" 2>&1 &
  j=$!; wait_ready input_bound; scenario input_bound 8; stop $j
fi
ls -la "$out"; cat "$logs/record.err"
