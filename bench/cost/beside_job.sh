#!/usr/bin/env bash
# The monitor next to its peers beside a real job: affmon (`--interval 1`), nvitop (`-m full
# --interval 1`: its process data every second; it redraws about every 0.2 s) and htop (`-d 10`),
# each in a 140x40 pane of a private tmux server, all three at once, while JOB runs; each one's
# CPU (utime + stime of the pane's process and its threads, /proc/PID/stat) over SECONDS (40)
# after 10 s of warm-up, ROUNDS times (2), the tools started again for each round. Prints
# the CPU of each in ms a second and affmon's over each peer's, with the load average.
# nvitop runs where `python -m nvitop` imports (the bench extra or `pip install nvitop`) and
# NVML answers; otherwise it is left out and said so.
#   JOB="python3 -m bench.workloads.train_job --seconds 300" [PYTHON=python3] [ROUNDS=2] \
#     bash bench/cost/beside_job.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-40}
rounds=${ROUNDS:-2}
py=${PYTHON:-.venv/bin/python}
[ -n "${JOB:-}" ] || { echo "beside_job: JOB is not set (the command of the job to run beside)" >&2; exit 2; }
for tool in tmux htop; do
    command -v "$tool" >/dev/null || { echo "beside_job: $tool is not installed" >&2; exit 2; }
done
tmp=$(mktemp -d)
sock="affmon-beside-$$"
job=""
cleanup() { tmux -L "$sock" kill-server 2>/dev/null || true; [ -z "$job" ] || kill "$job" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
tools=(affmon htop)
if "$py" -c "import nvitop, pynvml; pynvml.nvmlInit()" 2>/dev/null; then
    tools+=(nvitop)
else
    echo "nvitop left out: it does not import here, or NVML does not answer"
fi
declare -A commands=(
    [affmon]="exec $py -m affmon --interval 1"
    [nvitop]="exec $py -m nvitop -m full --interval 1"
    [htop]="exec env HOME=$tmp htop -d 10"
)
PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} bash -c "exec $JOB" > "$tmp/job.log" 2>&1 &
job=$!
for _ in $(seq 300); do grep -q READY "$tmp/job.log" && break; sleep 1; done
grep -q READY "$tmp/job.log" || { echo "beside_job: the job never said READY:" >&2; tail -5 "$tmp/job.log" >&2; exit 1; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
echo "beside: $JOB; $(nproc) CPUs; ${secs} s measured after 10 s warm-up, ${rounds} rounds; 140x40 tmux panes; ms of CPU a second"
for round in $(seq 1 "$rounds"); do
    declare -A pid=() start=() spent=()
    for tool in "${tools[@]}"; do
        tmux -L "$sock" new-session -d -s "$tool" -x 140 -y 40 "${commands[$tool]}"
    done
    sleep 10
    for tool in "${tools[@]}"; do
        pid[$tool]=$(tmux -L "$sock" display-message -p -t "$tool" '#{pane_pid}')
        start[$tool]=$(ticks "${pid[$tool]}")
    done
    sleep "$secs"
    for tool in "${tools[@]}"; do
        spent[$tool]=$(( $(ticks "${pid[$tool]}") - ${start[$tool]} ))
    done
    tmux -L "$sock" kill-server
    line="round $round:"
    for tool in "${tools[@]}"; do
        line+=$(awk -v t="$tool" -v d="${spent[$tool]}" -v s="$secs" -v hz="$hz" 'BEGIN {printf "  %s %.1f", t, d * 1000 / hz / s}')
    done
    for peer in "${tools[@]:1}"; do
        line+=$(awk -v p="$peer" -v a="${spent[affmon]}" -v b="${spent[$peer]}" 'BEGIN {printf "  affmon/%s %s", p, (b ? sprintf("%.2f", a / b) : "-")}')
    done
    echo "$line  (load $(cut -d' ' -f1-3 /proc/loadavg))"
    sleep 1
done
echo "the job's last report: $(grep -v READY "$tmp/job.log" | tail -1)"
