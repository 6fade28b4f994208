#!/bin/sh
# bench/run_decode_bench.sh: batch-1 greedy decoding with the KV cache,
# libtensor (bench_decode) against PyTorch 2.x (bench/decode_torch.py:
# transformers' GPT2LMHeadModel) on the small and medium decoder-only models,
# tokens/s (issue 33; target: at least PyTorch 2.x's fastest set-up).
#
# Usage: bench/run_decode_bench.sh [--models "small medium"] [--lengths 64,256]
#                                  [--rounds N] [--no-compile] [--build DIR]
#
# Each side takes its best threading (1 or 2 threads, OMP_WAIT_POLICY=PASSIVE)
# and PyTorch its best set-up (generate() eager, a plain loop with
# past_key_values, and the static cache with torch.compile unless
# --no-compile), chosen in the first round from every combination; later
# rounds (--rounds, default 3) alternate the two sides' kept set-ups and the
# table gives the medians of each round's best of 3.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
models="small medium"
lengths=64,256
rounds=3
compile=1
BENCH_USAGE='[--models "small medium"] [--lengths 64,256] [--rounds N] [--no-compile] [--build DIR]'
bench_parse --models:models --lengths:lengths --rounds:rounds:n --no-compile:compile=0 --build:build -- "$@"
[ -n "$TORCH2_PY" ] || { echo "$0: needs the reference environment (./do.sh reference)" >&2; exit 2; }
bench_build "$root" "$build" bench_decode
exe="$build/bench/bench_decode"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

lt_run() { # MODEL THREADS -> "length tok_s" lines
  OMP_WAIT_POLICY=PASSIVE "$exe" --only "$1" --lengths "$lengths" --threads "$2" --cached-only |
    awk -F'|' '/decoder-only/ { gsub(/ /, "", $4); gsub(/ /, "", $5); print $4, $5 }'
}
pt_run() { # MODEL THREADS SETUP -> "length tok_s" lines
  # shellcheck disable=SC2046
  env $(torch_unset "$TORCH2_PY") OMP_WAIT_POLICY=PASSIVE "$TORCH2_PY" "$here/decode_torch.py" --model "$1" --lengths "$lengths" \
    --threads "$2" --setup "$3" 2>/dev/null | awk -F, '{ print $2, $3, $5 }'
}
total() { awk '{ s += $2 } END { print s + 0 }' "$1"; } # the sum of tok/s over lengths: the choice's score

bench_header "batch 1, greedy, KV cache, $rounds rounds"
echo "# PyTorch: torch $("$TORCH2_PY" -c 'import torch, transformers; print(torch.__version__, "transformers", transformers.__version__)' 2>/dev/null)"
setups="eager loop"
[ "$compile" = 0 ] || setups="$setups compile"
echo
echo "| model | new tokens | libtensor tok/s | PyTorch 2.x tok/s | speed-up | libtensor set-up | PyTorch set-up |"
echo "|---|---|---|---|---|---|---|"
for m in $models; do
  lt_best=; lt_score=0
  for t in 1 2; do
    lt_run "$m" "$t" >"$tmp/lt.$t"
    s=$(total "$tmp/lt.$t")
    if awk "BEGIN{exit !($s > $lt_score)}"; then lt_score=$s; lt_best=$t; fi
  done
  pt_best=; pt_score=0
  for st in $setups; do
    for t in 1 2; do
      pt_run "$m" "$t" "$st" >"$tmp/pt.$st.$t" || true
      s=$(total "$tmp/pt.$st.$t")
      echo "# $m: PyTorch $st, $t threads: $(tr '\n' ' ' <"$tmp/pt.$st.$t")" >>"$tmp/log"
      if awk "BEGIN{exit !($s > $pt_score)}"; then pt_score=$s; pt_best="$st $t"; fi
    done
  done
  cp "$tmp/lt.$lt_best" "$tmp/lt.rounds"
  cp "$tmp/pt.$(echo "$pt_best" | tr ' ' .)" "$tmp/pt.rounds"
  # rounds 2.. alternate the kept set-ups (round 1 was the choice)
  side() { # lt|pt ROUND
    if [ "$1" = lt ]; then lt_run "$m" "$lt_best" >>"$tmp/lt.rounds"
    # shellcheck disable=SC2086
    else pt_run "$m" ${pt_best#* } ${pt_best% *} >>"$tmp/pt.rounds" 2>/dev/null || true; fi
  }
  bench_alternate $((rounds - 1)) side lt pt
  for n in $(echo "$lengths" | tr , ' '); do
    l=$(awk -v n="$n" '$1 == n { print $2 }' "$tmp/lt.rounds" | bench_median)
    p=$(awk -v n="$n" '$1 == n { print $2 }' "$tmp/pt.rounds" | bench_median)
    printf '| %s | %s | %.0f | %.0f | **%.2fx** | %s threads | %s, %s threads |\n' "$m" "$n" "$l" "$p" \
      "$(awk "BEGIN{print $l / $p}")" "$lt_best" "${pt_best% *}" "${pt_best#* }"
  done
done
echo
echo "# speed-up = libtensor tok/s / PyTorch 2.x tok/s (> 1: libtensor faster). load after: $(cut -d' ' -f1-3 /proc/loadavg)"
cat "$tmp/log"
