#!/usr/bin/env bash
# The monitor with nothing of interest running, next to htop, same window.
#
# tui_cost.py's "nothing running" row is measured by a python harness that captures the panes
# eight times a second: a busy process on the machine, which affmon samples as another
# process. This script is shell, so nothing but the two tools runs: affmon
# (`python -m affmon --interval 1` from this checkout) and `htop -d 10` run in 140x40 panes of
# a private tmux server, nothing captures them, and each one's CPU (utime + stime of all its
# threads, /proc/PID/stat) is read at the start and the end of the window, --repeat times; the
# load average (1, 5 and 15 minutes) at the end of each window is printed with it.
#
#   bash bench/cost/idle_cost.sh [--seconds 90] [--repeat 2] [--warmup 8] [--python PATH]
set -euo pipefail
seconds=90 repeat=2 warmup=8 python="${PYTHON:-.venv/bin/python}"
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds="$2"; shift 2 ;;
        --repeat) repeat="$2"; shift 2 ;;
        --warmup) warmup="$2"; shift 2 ;;
        --python) python="$2"; shift 2 ;;
        *) echo "idle_cost: unknown option $1 (--seconds, --repeat, --warmup, --python)" >&2; exit 2 ;;
    esac
done
cd "$(dirname "$0")/../.."
for tool in tmux htop; do
    command -v "$tool" >/dev/null || { echo "idle_cost: $tool is not installed (Debian: apt-get install $tool)" >&2; exit 2; }
done
[ -x "$python" ] || { echo "idle_cost: $python is not an executable python (--python PATH)" >&2; exit 2; }
tick=$(getconf CLK_TCK)
socket="affmon-idle-$$"
config=$(mktemp -d)
trap 'tmux -L "$socket" kill-server 2>/dev/null || true; rm -rf "$config"' EXIT
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

echo "nothing running but the two tools; $(nproc) CPUs; ${seconds} s measured after ${warmup} s warm-up; 140x40 tmux panes"
printf '%-6s %-22s %10s %10s %8s\n' run tool "CPU ms/s" "% of core" ratio
for run in $(seq 1 "$repeat"); do
    tmux -L "$socket" new-session -d -s affmon -x 140 -y 40 -c "$PWD" "exec $python -m affmon --interval 1"
    tmux -L "$socket" new-session -d -s htop -x 140 -y 40 "exec env XDG_CONFIG_HOME=$config htop -d 10"
    a=$(tmux -L "$socket" display-message -p -t affmon '#{pane_pid}')
    h=$(tmux -L "$socket" display-message -p -t htop '#{pane_pid}')
    sleep "$warmup"
    a0=$(cpu_ticks "$a") h0=$(cpu_ticks "$h")
    sleep "$seconds"
    a1=$(cpu_ticks "$a") h1=$(cpu_ticks "$h")
    tmux -L "$socket" kill-server
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    awk -v run="$run" -v a="$((a1 - a0))" -v h="$((h1 - h0))" -v s="$seconds" -v t="$tick" -v load="$load" 'BEGIN {
        am = a * 1000 / t / s; hm = h * 1000 / t / s
        printf "%-6s %-22s %10.2f %10.2f\n", run, "affmon --interval 1", am, am / 10
        printf "%-6s %-22s %10.2f %10.2f\n", "", "htop -d 10", hm, hm / 10
        ratio = hm > 0 ? sprintf("%.2f", am / hm) : "-"  # htop used no clock tick: no ratio
        printf "%-6s %-22s %10s %10s %8s\n", "", "ratio affmon / htop", "", "", ratio
        printf "%-6s %-22s %s\n", "", "load average", load
    }'
    sleep 1
done
