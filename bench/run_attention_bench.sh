#!/bin/sh
# bench/run_attention_bench.sh: the tables of docs/attention.md in one command
# (issue 15): fused against unfused attention, alone and in whole training
# steps.
#
# Usage: bench/run_attention_bench.sh [--build DIR] [--threads N] [--repeat N]
#                                     [--steps N] [--rounds N] [--T LIST]
#                                     [--cpu] [--no-train] [--no-attention]
#
# 1. bench_attention (bench/attention.c): B 1, NH 4, f32, forward and
#    forward + backward, T in {128, 512, 1024, 2048, 4096}, causal or not,
#    head sizes 64 and 128, each configuration in its own process (its peak
#    RSS), best of --repeat (default 2). --cpu times the CPU of all threads
#    instead of the wall clock (steadier on a loaded machine; run with
#    OMP_WAIT_POLICY=PASSIVE, which this script sets for --cpu).
# 2. Whole training steps (the issue's table): train --arch decoder-only
#    --text /usr/share/common-licenses/GPL-3 --tokenizer char, d 256, 4
#    layers, 4 heads, 8192 tokens per step (batch 8192 / T), T in {256, 1024,
#    2048, 4096} (--T 1024,2048: some of them), --steps (default 3) steps,
#    --rounds (default 1) runs of each path alternating (the median
#    tokens/s, the largest peak RSS): peak RSS and training tokens/s
#    of the default path (AUTO: fused, except unfused where T and S fit one
#    tile) against LT_ATTENTION=unfused, plus LT_ATTENTION=fused at T = 256.
#
# Builds bench_attention and train in Release (DIR, default build-rel) if
# needed. About 3 minutes on the quiet 2-core Xeon. Compare the two paths of
# the same row (ratios): other processes change absolute figures.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
threads=2
repeat=2
steps=3
rounds=1
Ts="256 1024 2048 4096"
cpu=""
train=1
attn=1
BENCH_USAGE="[--build DIR] [--threads N] [--repeat N] [--steps N] [--rounds N] [--T LIST] [--cpu] [--no-train] [--no-attention]"
bench_parse --build:build --threads:threads:n --repeat:repeat:n --steps:steps:n --rounds:rounds:n --T:Ts:ns \
  --cpu:cpu=--cpu --no-train:train=0 --no-attention:attn=0 -- "$@"
bench_build "$root" "$build" bench_attention train

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

bench_header "$threads threads"
if [ "$attn" = 1 ]; then
  echo
  echo "## Attention alone (bench_attention${cpu:+ --cpu}, repeat $repeat)"
  if [ -n "$cpu" ]; then
    OMP_WAIT_POLICY=PASSIVE LT_NUM_THREADS=$threads "$build/bench/bench_attention" --cpu --repeat "$repeat"
  else
    LT_NUM_THREADS=$threads "$build/bench/bench_attention" --repeat "$repeat"
  fi
fi
[ "$train" = 1 ] || exit 0

# One training run: prints "peak_MB tokens_per_s".
run_train() { # T path(default|fused|unfused)
  T=$1
  vf=0.1
  [ "$T" -ge 4096 ] && vf=0.15 # 35,149 tokens: 0.1 leaves no T + 1 for validation
  env_path=""
  [ "$2" != default ] && env_path="LT_ATTENTION=$2"
  env $env_path "$build/models/transformer/train" --arch decoder-only --text /usr/share/common-licenses/GPL-3 \
    --tokenizer char --d-model 256 --layers 4 --heads 4 --seq-len "$T" --batch $((8192 / T)) --steps "$steps" \
    --threads "$threads" --eval-every 0 --ckpt-every 0 --gen-tokens 0 --valid-fraction "$vf" \
    --ckpt-dir "$tmp/run-$T-$2" >"$tmp/out" 2>&1 || { cat "$tmp/out" >&2; exit 1; }
  rm -rf "$tmp/run-$T-$2" # the next round starts a new run
  peak=$(sed -n 's/^peak RSS \([0-9.]*\) MB.*/\1/p' "$tmp/out")
  tps=$(sed -n 's/^done:.* \([0-9]*\) tokens\/s in training steps.*/\1/p' "$tmp/out")
  echo "$peak $tps"
}

echo
echo "## Whole training steps (d 256, 4 layers, 4 heads, 8192 tokens per step, $steps steps, $threads threads, median of $rounds)"
echo
echo "| T | batch | peak RSS unfused | peak RSS default | tokens/s unfused | tokens/s default | speed-up | load |"
echo "|---|---|---|---|---|---|---|---|"
# --rounds R: each path R times, alternating (bench_alternate), the median
# tokens/s and the largest peak RSS of each (one run's tokens/s varies by 20%
# or more on a shared machine; alternating spreads the noise over both paths).
round() { # unfused|default ROUND: appends "peak tok/s" to $tmp/u or $tmp/d
  f=$tmp/d
  [ "$1" = default ] || f=$tmp/u
  run_train "$T" "$1" >>"$f"
}
for T in ${Ts}; do
  : >"$tmp/u" && : >"$tmp/d"
  bench_alternate "$rounds" round unfused default
  set -- "$(cut -d' ' -f1 "$tmp/u" | bench_max)" "$(cut -d' ' -f2 "$tmp/u" | bench_median)" \
    "$(cut -d' ' -f1 "$tmp/d" | bench_max)" "$(cut -d' ' -f2 "$tmp/d" | bench_median)"
  echo "| $T | $((8192 / T)) | $1 MB | $3 MB | $2 | $4 | $(awk "BEGIN{printf \"%.2fx\", $4 / $2}") | $(bench_load) |"
  if [ "$T" = 256 ]; then
    set -- $(run_train 256 fused)
    echo "| 256 (LT_ATTENTION=fused) | 32 | | $1 MB | | $2 | | $(bench_load) |"
  fi
done
