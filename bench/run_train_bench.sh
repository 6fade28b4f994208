#!/bin/sh
# bench/run_train_bench.sh: libtensor against PyTorch on full training steps,
# same machine, same invocation, configuration by configuration (small,
# medium, encdec; see bench/train_step.c for the models and the formulas).
#
# Usage: bench/run_train_bench.sh [--configs "small medium encdec"] [--steps N]
#                                 [--precisions "f32 bf16"] [--threads N]
#                                 [--build DIR] [--quick]
#
# Both precisions on both sides by default: f32, and bf16 mixed precision
# (PyTorch: torch.autocast("cpu", dtype=torch.bfloat16) around forward and
# loss; libtensor: --precision bf16, lt_set_autocast). One line per
# configuration and precision, then the four columns (PyTorch f32, PyTorch
# bf16, libtensor f32, libtensor bf16) in tokens/s with the ratios and the
# peak RSS of each. GFLOP/s of a bf16 line is against the bf16 GEMM peak
# (lt_matmul under autocast) measured in the same run, of an f32 line against
# the f32 one.
#
# Builds bench_train_step in Release (DIR, default build-rel) if needed. Each
# side runs one configuration per process, so peak RSS is per configuration.
#
# PyTorch at its best. The script tries, with a short probe per
# configuration, each BLAS it can give torch (bench/torch_env.sh says which
# and why; where OpenBLAS is not installed it unpacks Debian's package under
# the build directory), each in two threading set-ups: torch 1 thread with the BLAS on N threads,
# and torch N threads with OMP_WAIT_POLICY=PASSIVE (idle OpenMP threads then
# sleep instead of spinning against the BLAS threads). The fastest is used
# for the timed run and printed (probes compare their fastest step, which
# other processes disturb least). libtensor gets the same choice: N threads
# with OMP_WAIT_POLICY=PASSIVE, or 1 thread (on a busy machine, libgomp's
# spinning waits make N threads several times slower than 1).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
. "$here/torch_env.sh"
configs="small medium encdec"
precisions="f32 bf16"
steps=10
threads=2
build="$root/build-rel"
probe_steps=2
while [ $# -gt 0 ]; do
  case "$1" in
    --configs) configs=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --precisions) precisions=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --quick) steps=3; probe_steps=1; shift ;;
    *) echo "usage: $0 [--configs \"small medium encdec\"] [--steps N] [--precisions \"f32 bf16\"] [--threads N] [--build DIR] [--quick]" >&2; exit 2 ;;
  esac
done
py=$TORCH_PY
exe="$build/bench/bench_train_step"

bench_build "$root" "$build" bench_train_step

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

bench_header

# Which BLAS does torch load by default?
sysblas=$(torch_sysblas)
echo "# torch's default BLAS: $sysblas"

# libtensor's BLIS kernel set (its number for BLIS_ARCH_TYPE).
arch=$("$exe" --config small --steps 1 --warmup 0 --no-peak | sed -n 's/.*BLIS kernels \([a-z0-9]*\).*/\1/p')

# Candidate BLAS environments for torch: "name|env assignments".
cands="$tmp/cands"
torch_blas_candidates "$cands" "$sysblas" "$arch" "$build/openblas" || true

# run_torch CONFIG STEPS WARMUP TORCH_THREADS "ENV" TIMEOUT PRECISION -> one CSV line
# (nothing when it fails or runs out of time: a probe of a hopeless set-up,
# such as BLIS's threads on a busy machine, is cut short).
run_torch() {
  # shellcheck disable=SC2086
  env $TORCH_UNSET $5 timeout "${6:-3600}" \
    "$py" "$here/train_step_torch.py" --config "$1" --steps "$2" --warmup "$3" --threads "$4" --precision "$7" \
    2>/dev/null | tail -1
}

printf '\n%-7s %-4s | %9s %8s %8s %7s | %9s %8s %8s %7s | %5s %5s | %7s %7s | %s\n' config prec "lt tok/s" "lt ms" \
  "lt min" "lt MiB" "pt tok/s" "pt ms" "pt min" "pt MiB" ratio "r min" "GFLOP/s" "of peak" "settings"
summary="$tmp/summary"
: >"$summary"
table="$tmp/table" # config prec lt_tok pt_tok lt_mib pt_mib, one line each
: >"$table"
# The GEMM peaks: f32 lt_matmul, and the same under autocast (bf16 products).
peak_of() {
  OMP_WAIT_POLICY=PASSIVE "$exe" --config small --steps 1 --warmup 0 --threads "$threads" --precision "$1" |
    sed -n 's/^GEMM peak.*: \([0-9.]*\) GFLOP.*/\1/p'
}
peak_f32=$(peak_of f32)
peak_bf16=
case " $precisions " in *" bf16 "*) peak_bf16=$(peak_of bf16) ;; esac
for c in $configs; do
for prec in $precisions; do
  if [ "$prec" = bf16 ]; then peak=$peak_bf16; else peak=$peak_f32; fi
  # PyTorch: probe every candidate and threading set-up, keep the fastest.
  best_ms=; best_env=; best_tt=; best_name=
  while IFS='|' read -r name envs; do
    for tt in 1 "$threads"; do
      if [ "$tt" = 1 ]; then e="$envs $(torch_threads_env "$threads")"
      else e="$envs $(torch_threads_env "$threads" passive)"; fi
      line=$(run_torch "$c" "$probe_steps" 1 "$tt" "$e" 120 "$prec" || true)
      ms=$(echo "$line" | cut -d, -f7)
      [ -n "$ms" ] || continue
      echo "# probe $c $prec: torch threads $tt, $name, $e: min $ms ms/step" >>"$summary"
      if [ -z "$best_ms" ] || awk "BEGIN{exit !($ms < $best_ms)}"; then
        best_ms=$ms; best_env=$e; best_tt=$tt; best_name=$name
      fi
      [ "$tt" = "$threads" ] && break
    done
  done <"$cands"
  # libtensor: the same choice between N threads (OMP_WAIT_POLICY=PASSIVE) and 1.
  lt_best_ms=; lt_best_t=; lt_best_env=
  for lt_t in "$threads" 1; do
    if [ "$lt_t" = 1 ]; then e="OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-(unset)}"; else e="OMP_WAIT_POLICY=PASSIVE"; fi
    ms=$(env -u OMP_WAIT_POLICY $(echo "$e" | grep -v unset) "$exe" --config "$c" --steps "$probe_steps" --warmup 1 \
         --threads "$lt_t" --no-peak --csv --precision "$prec" | tail -1 | cut -d, -f7)
    echo "# probe $c $prec: libtensor threads $lt_t, $e: min $ms ms/step" >>"$summary"
    if [ -z "$lt_best_ms" ] || awk "BEGIN{exit !($ms < $lt_best_ms)}"; then
      lt_best_ms=$ms; lt_best_t=$lt_t; lt_best_env=$e
    fi
    [ "$threads" = 1 ] && break
  done
  pt=$(run_torch "$c" "$steps" 2 "$best_tt" "$best_env" 3600 "$prec")
  lt=$(env -u OMP_WAIT_POLICY $(echo "$lt_best_env" | grep -v unset) "$exe" --config "$c" --steps "$steps" --warmup 2 \
       --threads "$lt_best_t" --no-peak --csv --precision "$prec" | tail -1)
  # lt csv: config,threads,params,tokens,tok_s,ms_med,ms_min,peak_mib,base_mib,gflop,gflops,frac_peak,...
  lt_tok=$(echo "$lt" | cut -d, -f5); lt_ms=$(echo "$lt" | cut -d, -f6); lt_mib=$(echo "$lt" | cut -d, -f8)
  lt_min=$(echo "$lt" | cut -d, -f7)
  gflop=$(echo "$lt" | cut -d, -f10)
  pt_tok=$(echo "$pt" | cut -d, -f5); pt_ms=$(echo "$pt" | cut -d, -f6); pt_mib=$(echo "$pt" | cut -d, -f8)
  pt_min=$(echo "$pt" | cut -d, -f7)
  ratio=$(awk "BEGIN{printf \"%.2f\", $lt_tok / $pt_tok}")
  ratio_min=$(awk "BEGIN{printf \"%.2f\", $pt_min / $lt_min}")
  gfs=$(awk "BEGIN{printf \"%.1f\", $gflop / ($lt_ms * 1e-3)}")
  frac=$(awk "BEGIN{printf \"%.0f%%\", 100 * $gflop / ($lt_ms * 1e-3) / $peak}")
  printf '%-7s %-4s | %9.0f %8.1f %8.1f %7.0f | %9.0f %8.1f %8.1f %7.0f | %5s %5s | %7s %7s | lt %s thr; torch %s thr, %s: %s\n' \
    "$c" "$prec" "$lt_tok" "$lt_ms" "$lt_min" "$lt_mib" "$pt_tok" "$pt_ms" "$pt_min" "$pt_mib" "$ratio" "$ratio_min" "$gfs" \
    "$frac" "$lt_best_t" "$best_tt" "$best_name" "$best_env"
  echo "$c $prec $lt_tok $pt_tok $lt_mib $pt_mib" >>"$table"
  echo "# lt $prec $lt" >>"$summary"
  echo "# pt $prec $pt" >>"$summary"
done
done
# The four columns, tokens/s (median step), and peak RSS in MiB.
echo
printf '%-7s | %10s %10s %10s %10s | %9s %9s %9s | %s\n' config "PyTorch f32" "PyTorch bf16" "lt f32" "lt bf16" \
  "lt/pt f32" "lt/pt bf16" "ltbf/ptf" "peak RSS MiB: pt f32, pt bf16, lt f32, lt bf16"
for c in $configs; do
  awk -v c="$c" '
    $1 == c { tok_lt[$2] = $3; tok_pt[$2] = $4; mib_lt[$2] = $5; mib_pt[$2] = $6 }
    function r(a, b) { return (a != "" && b != "" && b > 0) ? sprintf("%.2f", a / b) : "-" }
    function v(x) { return x != "" ? sprintf("%.0f", x) : "-" }
    END {
      printf "%-7s | %10s %10s %10s %10s | %9s %9s %9s | %s, %s, %s, %s\n", c, v(tok_pt["f32"]), v(tok_pt["bf16"]),
        v(tok_lt["f32"]), v(tok_lt["bf16"]), r(tok_lt["f32"], tok_pt["f32"]), r(tok_lt["bf16"], tok_pt["bf16"]),
        r(tok_lt["bf16"], tok_pt["f32"]), v(mib_pt["f32"]), v(mib_pt["bf16"]), v(mib_lt["f32"]), v(mib_lt["bf16"])
    }' "$table"
done
echo
echo "# ratio = libtensor tokens/s / PyTorch tokens/s from the medians (> 1: libtensor faster); r min = the same from"
echo "# the fastest step of each; ms = median ms/step of $steps steps, min = fastest step"
echo "# (both after 2 warm-up steps); MiB = peak RSS (ru_maxrss) of the process; libtensor BLIS kernels: $arch; 'thr' = threads"
echo "# chosen by the probes (N threads always with OMP_WAIT_POLICY=PASSIVE for libtensor)."
echo "# GFLOP/s = (6 * params * tokens + attention) / median step time; 'of peak' = against lt_matmul's best square product"
echo "# (512^3, 1024^3 or 2048^3) on $threads threads in the same run: f32 $peak_f32 GFLOP/s, bf16 (under autocast) ${peak_bf16:--} GFLOP/s."
echo "# ltbf/ptf = libtensor bf16 against PyTorch f32."
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
cat "$summary"
