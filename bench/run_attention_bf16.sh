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
#    CPU seconds of the whole run (user + sys, /usr/bin/time), median ms
#    per step (wall) and peak RSS. CPU time is the steadier figure on a
#    shared machine; compare the two runs of a round.
#
# Builds bench_attention and bench_train_step in Release (DIR, default
# build-rel) if needed. About 4 minutes on the quiet 2-core Xeon.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
. "$here/torch_env.sh" # bench_build, bench_header
build="$root/build-rel"
threads=2
repeat=3
steps=10
rounds=3
do_steps=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --no-steps) do_steps=0; shift ;;
    *) echo "usage: $0 [--build DIR] [--threads N] [--repeat N] [--steps N] [--rounds N] [--no-steps]" >&2; exit 2 ;;
  esac
done

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
trap 'rm -f "$tmp"' EXIT INT TERM
step() { # config env... : prints "cpu_s ms_med peak"
  cfg=$1
  shift
  env "$@" /usr/bin/time -f '%U %S' -o "$tmp" "$build/bench/bench_train_step" --config "$cfg" --precision bf16 \
    --steps "$steps" --warmup 2 --no-peak --threads "$threads" | awk -v c="$cfg" '$1 == c {print $5, $7}' >"$tmp.o"
  echo "$(awk '{printf "%.2f", $1 + $2}' "$tmp") $(cat "$tmp.o")"
  rm -f "$tmp.o"
}
for cfg in small medium encdec; do
  r=1
  while [ "$r" -le "$rounds" ]; do
    set -- $(step "$cfg" LT_ATTENTION_X=) $(step "$cfg" LT_ATTENTION=unfused)
    echo "| $cfg | $r | $1 | $4 | $(awk "BEGIN{printf \"%.3f\", $1 / $4}") | $2 | $5 | $3 | $6 | $(cut -d' ' -f1 /proc/loadavg) |"
    r=$((r + 1))
  done
done
