#!/bin/sh
# bench/run_attention_sdpa.sh: libtensor's fused attention against PyTorch
# 2.x's F.scaled_dot_product_attention (its CPU flash kernel), forward and
# forward + backward, B 1, NH 4, T in {1024, 2048, 4096}, head sizes 64 and
# 128, causal and not, in f32 and under bf16 autocast (issue 33; target:
# libtensor's forward + backward at least 1.2x SDPA's at T >= 1,024).
#
# Usage: bench/run_attention_sdpa.sh [--build DIR] [--T "1024 2048 4096"]
#                                    [--hs "64 128"] [--rounds N] [--repeat N]
#                                    [--precisions "f32 bf16"]
#
# Each configuration runs in its own process on each side (bench_attention
# --one fused, bench/attention_torch.py), 2 threads with
# OMP_WAIT_POLICY=PASSIVE, best of --repeat (default 2) after a warm-up;
# --rounds (default 3) alternate the two sides and the table gives the
# medians. No RSS column: torch's process RSS is dominated by its import
# (about 540 MB) and says nothing about the kernel; bench/run_attention_bench.sh
# gives libtensor's.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
Ts="1024 2048 4096"
hss="64 128"
rounds=3
repeat=2
precisions="f32 bf16"
BENCH_USAGE='[--build DIR] [--T "1024 2048 4096"] [--hs "64 128"] [--rounds N] [--repeat N] [--precisions "f32 bf16"]'
bench_parse --build:build --T:Ts:ns --hs:hss:ns --rounds:rounds:n --repeat:repeat:n --precisions:precisions -- "$@"
[ -n "$TORCH2_PY" ] || { echo "$0: needs the reference environment (./do.sh reference)" >&2; exit 2; }
bench_build "$root" "$build" bench_attention
exe="$build/bench/bench_attention"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
# One side of a round: libtensor's fused path (lt) or SDPA (pt), one line each.
side() { # lt|pt ROUND
  if [ "$1" = lt ]; then
    # shellcheck disable=SC2086
    OMP_WAIT_POLICY=PASSIVE LT_NUM_THREADS=2 "$exe" --repeat "$repeat" $lt_flag --one fused "$T" "$hs" "$causal" |
      tail -1 >>"$tmp/lt"
  else
    # shellcheck disable=SC2086,SC2046
    env $(torch_unset "$TORCH2_PY") OMP_WAIT_POLICY=PASSIVE "$TORCH2_PY" "$here/attention_torch.py" "$T" "$hs" "$causal" \
      --repeat "$repeat" --threads 2 $pt_flag 2>/dev/null | tail -1 >>"$tmp/pt"
  fi
}

bench_header "B 1, NH 4, 2 threads, best of $repeat, median of $rounds alternating rounds"
echo "# PyTorch: torch $("$TORCH2_PY" -c 'import torch; print(torch.__version__)' 2>/dev/null), F.scaled_dot_product_attention (CPU flash kernel)"
echo
echo "| prec | HS | T | causal | fwd lt ms | fwd SDPA ms | fwd lt/SDPA speed | fwd+bwd lt ms | fwd+bwd SDPA ms | fwd+bwd speed-up |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for prec in $precisions; do
  lt_flag=; pt_flag=
  [ "$prec" = f32 ] || { lt_flag=--autocast; pt_flag=--bf16; }
  for hs in $hss; do
    for causal in 1 0; do
      for T in $Ts; do
        : >"$tmp/lt"; : >"$tmp/pt"
        bench_alternate "$rounds" side lt pt
        lf=$(cut -d' ' -f1 "$tmp/lt" | bench_median) lb=$(cut -d' ' -f3 "$tmp/lt" | bench_median)
        pf=$(cut -d' ' -f1 "$tmp/pt" | bench_median) pb=$(cut -d' ' -f3 "$tmp/pt" | bench_median)
        printf '| %s | %s | %s | %s | %.2f | %.2f | %.2fx | %.2f | %.2f | **%.2fx** |\n' "$prec" "$hs" "$T" \
          "$([ "$causal" = 1 ] && echo yes || echo no)" "$lf" "$pf" "$(awk "BEGIN{print $pf / $lf}")" "$lb" "$pb" \
          "$(awk "BEGIN{print $pb / $lb}")"
      done
    done
  done
done
echo
echo "# speed-up = SDPA ms / libtensor ms (> 1: libtensor faster). load after: $(cut -d' ' -f1-3 /proc/loadavg)"
