#!/usr/bin/env bash
# The monitor's memory over time beside glances' and htop's, with many threads that wake.
#
# Starts the waking population of bench/workloads/waking.py (--processes processes of
# --threads-each threads, each thread waking every --period seconds, plus the training-like
# process of 12 threads), then affmon (`python -m affmon --interval 1` from this checkout),
# glances (`GLANCES -t 1`) and htop (`htop -d 10`, an empty configuration) in 140x40 panes of
# a private tmux server, and prints each one's VmRSS (/proc/PID/status) every --every
# seconds for --minutes minutes. glances is on PyPI: python -m venv /tmp/glancesvenv &&
# /tmp/glancesvenv/bin/pip install glances.
#
#   bash bench/cost/rss_curve.sh --glances /tmp/glancesvenv/bin/glances [--minutes 30]
#        [--every 60] [--processes 10] [--threads-each 1000] [--period 5] [--python PATH]
set -euo pipefail
minutes=30 every=60 processes=10 threads=1000 period=5 glances="" python="${PYTHON:-.venv/bin/python}"
while [ $# -gt 0 ]; do
    case "$1" in
        --minutes) minutes="$2"; shift 2 ;;
        --every) every="$2"; shift 2 ;;
        --processes) processes="$2"; shift 2 ;;
        --threads-each) threads="$2"; shift 2 ;;
        --period) period="$2"; shift 2 ;;
        --glances) glances="$2"; shift 2 ;;
        --python) python="$2"; shift 2 ;;
        *) echo "rss_curve: unknown option $1 (--glances, --minutes, --every, --processes, --threads-each, --period, --python)" >&2; exit 2 ;;
    esac
done
cd "$(dirname "$0")/../.."
[ -n "$glances" ] && [ -x "$glances" ] || { echo "rss_curve: --glances PATH: a glances executable is needed" >&2; exit 2; }
[ -x "$python" ] || { echo "rss_curve: $python is not an executable python (--python PATH)" >&2; exit 2; }
for tool in tmux htop; do
    command -v "$tool" >/dev/null || { echo "rss_curve: $tool is not installed (Debian: apt-get install $tool)" >&2; exit 2; }
done
socket="affmon-rss-$$"
config=$(mktemp -d)
lifetime=$((minutes * 60 + 120))
workers=()
cleanup() {
    tmux -L "$socket" kill-server 2>/dev/null || true
    [ ${#workers[@]} -gt 0 ] && kill "${workers[@]}" 2>/dev/null || true
    rm -rf "$config"
}
trap cleanup EXIT
for _ in $(seq "$processes"); do
    (exec -a waker "$python" -m bench.workloads.waking --threads "$threads" --period "$period" --name waker \
        --seconds "$lifetime" >/dev/null) &
    workers+=($!)
done
"$python" -m bench.workloads.waking --threads 12 --busy-duty 0.3,0.4,0.5 --name trainer --seconds "$lifetime" >/dev/null &
workers+=($!)
sleep 10
tmux -L "$socket" new-session -d -s affmon -x 140 -y 40 "exec $python -m affmon --interval 1"
tmux -L "$socket" new-session -d -s glances -x 140 -y 40 "exec $glances -t 1"
tmux -L "$socket" new-session -d -s htop -x 140 -y 40 "exec env XDG_CONFIG_HOME=$config htop -d 10"
sleep 5
pid() { tmux -L "$socket" display-message -p -t "$1" "#{pane_pid}"; }
rss() { awk '/^VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }
a=$(pid affmon) g=$(pid glances) h=$(pid htop)
echo "$processes x $threads waking threads (every $period s) + a training-like process; VmRSS in MiB every $every s"
printf '%8s %8s %8s %8s %8s\n' seconds affmon glances htop ratio
steps=$((minutes * 60 / every))
for step in $(seq 0 "$steps"); do
    ra=$(rss "$a") rg=$(rss "$g") rh=$(rss "$h")
    printf '%8d %8s %8s %8s %8s\n' $((step * every)) "$ra" "$rg" "$rh" "$(awk -v a="$ra" -v g="$rg" 'BEGIN { printf "%.2f", a / g }')"
    if [ "$step" -lt "$steps" ]; then sleep "$every"; fi
done
