#!/bin/sh
# bench/run_vision_bench.sh: the vision examples against PyTorch, side by side
# in one run: training ms/step over a fixed number of steps and the time to
# evaluate the 10k test images, for libtensor and for PyTorch at its best,
# and their ratios (PyTorch / libtensor: above 1 means libtensor is faster).
#
# Usage: bench/run_vision_bench.sh [cnn] [--steps N] [--threads N] [--build DIR] [--precision "f32 bf16"]
#        bench/run_vision_bench.sh cnn --accuracy "42 43 44" [--epochs 3]
#
# Models: cnn (examples/cnn_fashion_mnist.c against
# bench/cnn_fashion_mnist_torch.py). Each side trains N steps (default 100)
# of batch 128, then evaluates once (10 batches of 1000) in eval mode; the
# examples print their training time and the evaluation's. Takes about a
# minute per model on a quiet 2-core machine.
#
# --precision "P...": libtensor runs once per precision (f32, bf16: the
# example's --precision, autocast), one row each; PyTorch 2.x runs its
# set-ups in f32 and, with bf16 among them, under bf16 autocast too, and a
# bf16 row is compared with the faster of the two (the 1.13 history column
# stays f32).
#
# --accuracy "SEEDS": instead, the full run (--epochs, default 3) once per
# seed on each side (libtensor, then PyTorch with OpenBLAS if present, else
# the system BLAS), printing each test accuracy and epoch time and the
# mean / min / max of the accuracies (about 3 x 30 s per seed and side on a
# quiet machine for the CNN).
#
# PyTorch at its best (bench/lib.sh explains the choices):
# OMP_WAIT_POLICY=PASSIVE, OPENBLAS_CORETYPE unset (1.13), N threads, and each BLAS
# it can be given (the system's, BLIS with the skx kernels; OpenBLAS if
# present). Each is run in full and the faster one counts. PyTorch 2.x (the
# reference environment, ./do.sh reference) gets its own row: the fastest of
# torch2_setups (eager, torch.compile; compilation left out of ms/step); the
# 1.13 row stays for history. libtensor runs on N threads with
# OMP_WAIT_POLICY=PASSIVE. Needs Debian's dataset-fashion-mnist.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
models=cnn
steps=100
threads=2
seeds=
epochs=3
precisions=f32
BENCH_USAGE='[cnn] [--steps N] [--threads N] [--build DIR] [--precision "f32 bf16"] [--accuracy "SEEDS" [--epochs N]]'
bench_parse cnn:models=cnn --steps:steps:n --threads:threads:n --build:build --accuracy:seeds --epochs:epochs:n \
  --precision:precisions -- "$@"
py=$TORCH_PY

bench_build "$root" "$build" cnn_fashion_mnist

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
bench_header

# BLAS set-ups for torch: "name|env".
cands="$tmp/cands"
torch_blas_candidates "$cands" "$(torch_sysblas)" || true

# "ms_per_step eval_seconds" from an example's or the torch script's output.
lt_figures() { # the trainer's final line and the summary
  awk '/^final validation/ { gsub(/[][s]/, "", $NF); ev = $NF }
       /^summary:/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
       END { printf "%.2f %.3f %s\n", 1000 * v["train_seconds"] / v["steps"], ev, v["test_accuracy"] }' "$1"
}
pt_figures() {
  awk '/^epoch done/ { for (i = 1; i <= NF; i++) if ($i == "(evaluation") ev = $(i + 1) }
       /^summary:/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
       END { printf "%.2f %.3f %s\n", 1000 * v["train_seconds"] / v["steps"], ev, v["test_accuracy"] }' "$1"
}

if [ -n "$seeds" ]; then
  stats() { awk '{ s += $1; if (NR == 1 || $1 < lo) lo = $1; if (NR == 1 || $1 > hi) hi = $1 }
                 END { printf "mean %.4f min %.4f max %.4f (%d seeds)", s / NR, lo, hi, NR }'; }
  for m in $models; do
    case "$m" in
      cnn) exe="$build/examples/cnn_fashion_mnist"; script="$here/cnn_fashion_mnist_torch.py" ;;
    esac
    ptenv=$(tail -1 "$cands" | cut -d'|' -f2)
    : >"$tmp/lt_acc"; : >"$tmp/pt_acc"
    for seed in $seeds; do
      env OMP_WAIT_POLICY=PASSIVE LT_NUM_THREADS="$threads" "$exe" --epochs "$epochs" --seed "$seed" \
        --log-every 1000000 >"$tmp/lt.txt" 2>&1 || { cat "$tmp/lt.txt"; exit 1; }
      set -- $(lt_figures "$tmp/lt.txt")
      echo "$3" >>"$tmp/lt_acc"
      echo "$m seed $seed libtensor: test accuracy $3, $(awk '/^summary:/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } } END { printf "%.1f s of training", v["train_seconds"] }' "$tmp/lt.txt") ($epochs epochs)"
      # shellcheck disable=SC2086,SC2046
      env $(torch_unset "$py") OMP_WAIT_POLICY=PASSIVE $ptenv "$py" "$script" --epochs "$epochs" \
        --seed "$seed" --threads "$threads" >"$tmp/pt.txt" 2>&1 || { cat "$tmp/pt.txt"; exit 1; }
      set -- $(pt_figures "$tmp/pt.txt")
      echo "$3" >>"$tmp/pt_acc"
      echo "$m seed $seed PyTorch:   test accuracy $3, $(awk '/^summary:/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } } END { printf "%.1f s of training", v["train_seconds"] }' "$tmp/pt.txt")"
    done
    echo "$m libtensor: $(stats <"$tmp/lt_acc")"
    echo "$m PyTorch:   $(stats <"$tmp/pt_acc")"
  done
  echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  exit 0
fi

printf '\n%-5s | %10s %9s | %10s %9s | %10s %9s | %s\n' model "lt ms/step" "lt eval s" "pt ms/step" \
  "pt eval s" "step ratio" "eval ratio" "PyTorch set-up"
for m in $models; do
  case "$m" in
    cnn) exe="$build/examples/cnn_fashion_mnist"; script="$here/cnn_fashion_mnist_torch.py" ;;
  esac
  # libtensor, once per precision. Its train_seconds are the trainer's
  # (printed with one decimal), so N steps must take a few seconds at least:
  # fine for N >= 50.
  : >"$tmp/lt_rows"
  for prec in $precisions; do
    env OMP_WAIT_POLICY=PASSIVE LT_NUM_THREADS="$threads" "$exe" --max-steps "$steps" --log-every 1000000 \
      --precision "$prec" >"$tmp/lt.txt" 2>&1 || { cat "$tmp/lt.txt"; exit 1; }
    echo "$prec $(lt_figures "$tmp/lt.txt")" >>"$tmp/lt_rows"
  done
  best=; best_ev=; best_name=
  while IFS='|' read -r name envs; do
    # shellcheck disable=SC2086,SC2046
    env $(torch_unset "$py") OMP_WAIT_POLICY=PASSIVE $envs "$py" "$script" \
      --max-steps "$steps" --threads "$threads" >"$tmp/pt.txt" 2>&1 || { cat "$tmp/pt.txt"; exit 1; }
    set -- $(pt_figures "$tmp/pt.txt")
    if [ -z "$best" ] || awk -v a="$1" -v b="$best" 'BEGIN { exit !(a < b) }'; then
      best=$1 best_ev=$2 best_name=$name
    fi
  done <"$cands"
  # PyTorch 2.x (the reference environment): each set-up of torch2_setups,
  # in f32 and, when libtensor runs bf16, under bf16 autocast too
  # (--precision bf16); a libtensor row is compared with the fastest PyTorch
  # run of its precision or of f32 (f32 for an f32 row).
  best2=; best2_ev=; best2_name=; best2b=; best2b_ev=; best2b_name=
  if [ -n "$TORCH2_PY" ]; then
    torch2_setups "$tmp/setups2"
    pt_precs=f32; case " $precisions " in *" bf16 "*) pt_precs="f32 bf16" ;; esac
    for pp in $pt_precs; do
      while IFS='|' read -r name flags; do
        # shellcheck disable=SC2086,SC2046
        env $(torch_unset "$TORCH2_PY") OMP_WAIT_POLICY=PASSIVE "$TORCH2_PY" "$script" --max-steps "$steps" --threads "$threads" \
          --precision "$pp" $flags >"$tmp/pt.txt" 2>&1 || { echo "# PyTorch 2.x $name $pp failed:"; tail -3 "$tmp/pt.txt"; continue; }
        set -- $(pt_figures "$tmp/pt.txt")
        if [ "$pp" = f32 ]; then
          if [ -z "$best2" ] || awk -v a="$1" -v b="$best2" 'BEGIN { exit !(a < b) }'; then
            best2=$1 best2_ev=$2 best2_name="torch 2.x $name"
          fi
        elif [ -z "$best2b" ] || awk -v a="$1" -v b="$best2b" 'BEGIN { exit !(a < b) }'; then
          best2b=$1 best2b_ev=$2 best2b_name="torch 2.x $name bf16 autocast"
        fi
      done <"$tmp/setups2"
    done
  fi
  while read -r prec lt_ms lt_ev _acc; do
    label=$m; [ "$precisions" = f32 ] || label="$m $prec"
    for side in 2 1; do
      if [ "$side" = 2 ]; then
        c=$best2 d=$best2_ev n=$best2_name
        if [ "$prec" = bf16 ] && [ -n "$best2b" ] && { [ -z "$c" ] || awk -v a="$best2b" -v b="$c" 'BEGIN { exit !(a < b) }'; }; then
          c=$best2b d=$best2b_ev n=$best2b_name
        fi
      else c=$best d=$best_ev n="torch 1.13 $best_name"; fi
      [ -n "$c" ] || continue
      awk -v m="$label" -v a="$lt_ms" -v b="$lt_ev" -v c="$c" -v d="$d" -v n="$n" 'BEGIN {
        printf "%-5s | %10.2f %9.3f | %10.2f %9.3f | %9.2fx %9.2fx | %s\n", m, a, b, c, d, c / a, d / b, n }'
    done
  done <"$tmp/lt_rows"
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg); ratio = PyTorch time / libtensor time (> 1: libtensor faster)"
