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
root=$(dirname "$here")
. "$here/torch_env.sh"
build="$root/build-rel"
Ts="1024 2048 4096"
hss="64 128"
rounds=3
repeat=2
precisions="f32 bf16"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --T) Ts=$2; shift 2 ;;
    --hs) hss=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --precisions) precisions=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--T \"1024 2048 4096\"] [--hs \"64 128\"] [--rounds N] [--repeat N] [--precisions \"f32 bf16\"]" >&2; exit 2 ;;
  esac
done
for v in $Ts $hss "$rounds" "$repeat"; do
  case "$v" in '' | *[!0-9]* | 0*) echo "$0: --T, --hs, --rounds and --repeat take whole numbers from 1, not '$v'" >&2; exit 2 ;; esac
done
[ -n "$TORCH2_PY" ] || { echo "$0: needs the reference environment (./do.sh reference)" >&2; exit 2; }
bench_build "$root" "$build" bench_attention
exe="$build/bench/bench_attention"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

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
        r=1
        while [ "$r" -le "$rounds" ]; do
          # shellcheck disable=SC2086
          OMP_WAIT_POLICY=PASSIVE LT_NUM_THREADS=2 "$exe" --repeat "$repeat" $lt_flag --one fused "$T" "$hs" "$causal" |
            tail -1 >>"$tmp/lt"
          # shellcheck disable=SC2086
          env $TORCH_UNSET OMP_WAIT_POLICY=PASSIVE "$TORCH2_PY" "$here/attention_torch.py" "$T" "$hs" "$causal" \
            --repeat "$repeat" --threads 2 $pt_flag 2>/dev/null | tail -1 >>"$tmp/pt"
          r=$((r + 1))
        done
        lf=$(cut -d' ' -f1 "$tmp/lt" | median) lb=$(cut -d' ' -f3 "$tmp/lt" | median)
        pf=$(cut -d' ' -f1 "$tmp/pt" | median) pb=$(cut -d' ' -f3 "$tmp/pt" | median)
        printf '| %s | %s | %s | %s | %.2f | %.2f | %.2fx | %.2f | %.2f | **%.2fx** |\n' "$prec" "$hs" "$T" \
          "$([ "$causal" = 1 ] && echo yes || echo no)" "$lf" "$pf" "$(awk "BEGIN{print $pf / $lf}")" "$lb" "$pb" \
          "$(awk "BEGIN{print $pb / $lb}")"
      done
    done
  done
done
echo
echo "# speed-up = SDPA ms / libtensor ms (> 1: libtensor faster). load after: $(cut -d' ' -f1-3 /proc/loadavg)"
