#!/usr/bin/env bash
# Where the monitor's CPU goes, thread by thread, watching RANKS training-like ranks (1;
# bench/workloads/ranks.py) beside THREADS waking threads in 10 plain python processes (0;
# bench/workloads/waking.py), with htop beside it in the same tmux server: each thread's
# utime + stime from /proc/PID/task/TID/stat over SECONDS (40), named by py-spy dump when
# py-spy is installed (the bench extra), and htop's over the same window.
# JOB="command": also start a real job (e.g. on a GPU machine, with RANKS=0:
# JOB="python3 -m bench.workloads.train_job --seconds 400"), wait for its READY line, and
# with JOB_PID=1 give its pid to the monitor (--pid). The monitor is this checkout's.
# SCHEDSTAT=1: each thread's time on a CPU from /proc/PID/task/TID/schedstat (nanoseconds, as
# the scheduler counts it) in place of utime + stime (clock ticks: 0.33 ms a second over 30 s,
# and a thread that wakes for microseconds at a time is charged only the ticks it is caught in).
# GONE=1: the ranks exit 6 s after they start, before the window: what the monitor costs once
# the job it watched has ended.
#   [RANKS=1] [THREADS=0] [JOB=...] [JOB_PID=1] [PYTHON=...] [SCHEDSTAT=1] [GONE=1] bench/cost/tui_threads.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-40}
py=${PYTHON:-.venv/bin/python}
tmp=$(mktemp -d)
ranks=${RANKS:-1}
threads=${THREADS:-0}
pids=()
sock="affmon-threads-$$"
rank_s=$((secs + 60))
[ -z "${GONE:-}" ] || rank_s=6
cleanup() { tmux -L "$sock" kill-server 2>/dev/null || true; kill "${pids[@]}" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
for r in $(seq 1 "$ranks"); do
  "$py" -m bench.workloads.ranks --seconds "$rank_s" --seed "$r" > "$tmp/rank$r.json" &
  pids+=($!)
done
if [ "$threads" -gt 0 ]; then
  for p in $(seq 1 10); do
    "$py" -m bench.workloads.waking --threads $((threads / 10)) --seconds $((secs + 60)) --seed "$p" > /dev/null &
    pids+=($!)
  done
fi
args=""
if [ -n "${JOB:-}" ]; then
  PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} bash -c "exec $JOB" > "$tmp/job.log" 2>&1 &
  job=$!
  pids+=("$job")
  for _ in $(seq 300); do grep -q READY "$tmp/job.log" && break; sleep 1; done
  grep -q READY "$tmp/job.log" || { echo "the job never said READY:"; tail -5 "$tmp/job.log"; exit 1; }
  [ -z "${JOB_PID:-}" ] || args="--pid $job"
fi
for r in $(seq 1 "$ranks"); do while [ ! -s "$tmp/rank$r.json" ]; do sleep 0.2; done; done
tmux -L "$sock" new-session -d -x 140 -y 40 "env -u COLUMNS -u LINES $py -m affmon --interval 1 $args"
tmux -L "$sock" new-window -d "env HOME=$tmp htop -d 10"
if [ -n "${GONE:-}" ]; then for r in $(seq 1 "$ranks"); do wait "${pids[$((r - 1))]}" || true; done; fi
sleep 8
monitor=$(tmux -L "$sock" list-panes -t 0 -F '#{pane_pid}')
htop=$(tmux -L "$sock" list-panes -t 1 -F '#{pane_pid}')
names=$tmp/names
: > "$names"
if [ -x "$(dirname "$py")/py-spy" ]; then
  "$(dirname "$py")/py-spy" dump -p "$monitor" 2>/dev/null | sed -n 's/^Thread \([0-9]*\) ([a-z]*): "\(.*\)"$/\1 \2/p' > "$names" || true
fi
if [ -n "${SCHEDSTAT:-}" ]; then
  cpu() { awk '{print $1}' "$1/schedstat"; }  # nanoseconds
  ms=0.000001 digits=2 counted="schedstat"
else
  cpu() { awk '{print $14 + $15}' "$1/stat"; }  # clock ticks
  ms=$(awk -v hz="$(getconf CLK_TCK)" 'BEGIN {print 1000 / hz}') digits=1 counted="utime + stime"
fi
snap() { for t in /proc/"$monitor"/task/*; do echo "$(basename "$t") $(cpu "$t")"; done; }
snap > "$tmp/t0"; h0=$(cpu /proc/"$htop")
sleep "$secs"
snap > "$tmp/t1"; h1=$(cpu /proc/"$htop")
echo "over $secs s ($(cut -d' ' -f1-3 /proc/loadavg) load): ms of CPU a second ($counted)"
join "$tmp/t0" "$tmp/t1" | while read -r tid a b; do
  name=$(awk -v t="$tid" '$1 == t {print $2}' "$names"); [ -n "$name" ] || name="thread $tid"
  awk -v n="$name" -v d=$((b - a)) -v s="$secs" -v ms="$ms" -v k="$digits" 'BEGIN {if (d) printf "  affmon %-14s %5.*f\n", n, k, d * ms / s}'
done
join "$tmp/t0" "$tmp/t1" | awk -v s="$secs" -v ms="$ms" -v k="$digits" -v h=$((h1 - h0)) '{d += $3 - $2} END {printf "  affmon in all     %5.*f\n  htop              %5.*f\n  ratio             %5.2f\n", k, d * ms / s, k, h * ms / s, (h ? d / h : 0)}'
