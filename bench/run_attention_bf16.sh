#!/bin/sh
# bench/run_attention_bf16.sh: attention under bf16 autocast (docs/attention.md,
# "bf16 tiles under autocast"): the fused path's bf16 tile kernels against the
# per-tile lt__mat_gemm path and the unfused path, alone and in whole steps.
#
# Usage: bench/run_attention_bf16.sh [--build DIR] [--threads N] [--repeat N]
#                                    [--steps N] [--rounds N] [--no-steps]
#
# 1. bench_attention --autocast --cpu (CPU time of all threads, best of
#    --repeat, default 3), the three shapes of bench_train_step's models
#    (GPT small: B 16, NH 4; GPT medium: B 8, NH 8; the encoder-decoder:
#    B 32, NH 4; HS 64), T in {64, 128, 256, 512, 1024} (medium: 256),
#    causal or not: once as every user gets it (bf16 tiles: "fused") and
#    once with LT_ATTENTION_BF16=0 (the per-tile lt__mat_gemm path the
#    fused path took before). Each table's "unfused" column is the same
#    unfused path.
# 2. bench_train_step --precision bf16 --config small|medium|encdec, the
#    default (fused at every T under autocast) against LT_ATTENTION=unfused
#    (what main did at these T), alternating, --rounds rounds (default 3):
#    CPU seconds of the whole run (bench_cpu_ms: perf's task-clock, else
#    user + sys from /usr/bin/time), median ms
#    per step (wall) and peak RSS. CPU time is the steadier figure on a
#    shared machine; compare the two runs of a round.
#
# Builds bench_attention and bench_train_step in Release (DIR, default
# build-rel) if needed. About 4 minutes on the quiet 2-core Xeon.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
threads=2
repeat=3
steps=10
rounds=3
do_steps=1
BENCH_USAGE="[--build DIR] [--threads N] [--repeat N] [--steps N] [--rounds N] [--no-steps]"
bench_parse --build:build --threads:threads:n --repeat:repeat:n --steps:steps:n --rounds:rounds:n \
  --no-steps:do_steps=0 -- "$@"

bench_build "$root" "$build" bench_attention bench_train_step
export OMP_WAIT_POLICY=PASSIVE LT_NUM_THREADS="$threads"

bench_header "$threads threads"
attn() { # B NH T-list
  for mode in tiles per-tile; do
    echo
    echo "### B $1, NH $2, HS 64, fused = $mode (CPU ms)"
    if [ "$mode" = tiles ]; then
      "$build/bench/bench_attention" --autocast --cpu --repeat "$repeat" --B "$1" --NH "$2" --T "$3" --hs 64
    else
      LT_ATTENTION_BF16=0 "$build/bench/bench_attention" --autocast --cpu --repeat "$repeat" --B "$1" --NH "$2" \
        --T "$3" --hs 64
    fi | grep '^|'
  done
}
echo
echo "## Attention alone under autocast"
attn 16 4 64,128,256,512,1024
attn 8 8 256
attn 32 4 64
[ "$do_steps" = 1 ] || exit 0

echo
echo "## Whole bf16 steps: default (fused, bf16 tiles) against LT_ATTENTION=unfused, $steps steps"
echo
echo "| config | round | CPU s default | CPU s unfused | CPU ratio | ms/step default | ms/step unfused | peak MiB default | peak MiB unfused | load |"
echo "|---|---|---|---|---|---|---|---|---|---|"
tmp=$(mktemp)
trap 'rm -f "$tmp" "$tmp".*' EXIT INT TERM
# One side of a round, the default (fused, bf16 tiles) or LT_ATTENTION=unfused:
# "cpu_s ms_med peak" into $tmp.default / $tmp.unfused; after the unfused
# side, the round's row.
side() { # default|unfused ROUND
  e=LT_ATTENTION_X=
  [ "$1" = default ] || e=LT_ATTENTION=unfused
  bench_cpu_ms "$tmp.cpu" env "$e" "$build/bench/bench_train_step" \
    --config "$cfg" --precision bf16 --steps "$steps" --warmup 2 --no-peak --threads "$threads" |
    awk -v c="$cfg" '$1 == c {print $5, $7}' >"$tmp.o"
  echo "$(awk '{printf "%.2f", $1 / 1000}' "$tmp.cpu") $(cat "$tmp.o")" >"$tmp.$1"
  [ "$1" = unfused ] || return 0
  set -- $(cat "$tmp.default") $(cat "$tmp.unfused") "$2"
  echo "| $cfg | $7 | $1 | $4 | $(awk "BEGIN{printf \"%.3f\", $1 / $4}") | $2 | $5 | $3 | $6 | $(bench_load) |"
}
for cfg in small medium encdec; do
  bench_alternate "$rounds" side default unfused
done
