#!/bin/sh
# tools/default_run_figures.sh: the figures docs/train.md publishes for the
# default run ("Measured"), produced by running it, with the machine recorded.
#
#   tools/default_run_figures.sh [OUT_DIR] [train flags...]
#
# Builds the Release tree (as ./do.sh run does), runs `train` with no flags
# (or the flags given, e.g. `--steps 200` for a quick check of the script)
# with idle OpenMP threads sleeping (OMP_WAIT_POLICY=PASSIVE, as ./do.sh run),
# and writes OUT_DIR/figures.md (default runs/figures-<date>-<time>):
#   machine   CPU model, cores, load average before and after, the BLIS kernel
#             set train chose and why, the threads it settled on, git commit;
#   figures   validation loss at step 400 and at the end (all held-out
#             examples), exact match at the end, wall time, training tokens/s,
#             peak RSS.
# The full train output is kept in OUT_DIR/train.log, the run in OUT_DIR/run.
# Which figures depend on the machine: docs/train.md, "Which figures depend on
# the CPU". The default run takes about 4 minutes on 2 busy cores.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-"$root/runs/figures-$(date -u +%Y%m%d-%H%M%S)"}
[ $# -gt 0 ] && shift
mkdir -p "$out"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$root/build" -j2 --target train >/dev/null
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s)
OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}" "$root/build/models/transformer/train" --ckpt-dir "$out/run" "$@" \
  >"$out/train.log" 2>&1 || { echo "default_run_figures: train failed, see $out/train.log" >&2; exit 1; }
t1=$(date +%s)
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
log="$out/train.log"; csv="$out/run/metrics.csv"
# A column of metrics.csv at a step ("" if that step has no value).
col_at() { awk -F, -v name="$1" -v step="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i; next }
                                               $1 == step { print $c }' "$csv"; }
last_step=$(tail -n 1 "$csv" | cut -d, -f1)
v400=$(col_at val_loss 400); [ -n "$v400" ] || v400="(no validation at step 400)"
final=$(grep '^held-out ' "$log" | tail -n 1)             # held-out exact match: X% (n/N), loss L, ...
final_loss=$(echo "$final" | sed -n 's/.*, loss \([0-9.]*\),.*/\1/p')
exact=$(echo "$final" | sed -n 's/.*: \([0-9.]*% ([0-9]*\/[0-9]*)\).*/\1/p')
rss=$(sed -n 's/^peak RSS \(.*\)$/\1/p' "$log")
toks=$(sed -n 's/.*, \([0-9]*\) tokens\/s in training steps.*/\1/p' "$log")
blis=$(sed -n 's/^runtime: //p' "$log")
# the setting, then where the auto-tuning ended and how often it switched
setting=$(sed -n 's/^training: .*threads: //p' "$log" | head -n 1)
switches=$(grep -c '^threads: now' "$log" || true)
last=$(sed -n 's/^threads: //p' "$log" | tail -n 1)
threads="${setting:-(not printed)}${last:+; last: $last, after $switches switches}"
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
secs=$((t1 - t0))
{
  echo "# Default run figures ($(date -u '+%Y-%m-%d %H:%M UTC'))"
  echo
  echo "| machine | |"
  echo "|---|---|"
  echo "| CPU | $cpu, $(nproc) cores |"
  echo "| runtime | $blis |"
  echo "| threads | $threads |"
  echo "| load average (1, 5, 15 min) | before $load_before, after $load_after |"
  echo "| commit | $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown) |"
  echo "| flags | train --ckpt-dir OUT/run $* |"
  echo
  echo "| figure | value |"
  echo "|---|---|"
  echo "| validation loss at step 400 (first 200 held-out) | $v400 |"
  echo "| final loss (all held-out examples, step $last_step) | $final_loss |"
  echo "| held-out exact match at the end | $exact |"
  echo "| wall time, start to end | $((secs / 60)) min $((secs % 60)) s |"
  echo "| training throughput | ${toks:-?} tokens/s |"
  echo "| peak RSS | $rss |"
} >"$out/figures.md"
cat "$out/figures.md"
