#!/bin/sh
# bench/run_lstm_bench.sh: the character LSTM (examples/char_lstm.c) against
# its PyTorch twin (bench/char_lstm_torch.py), same machine, same
# configuration, same data order, back to back: ms per training step and the
# validation loss after the same steps, and their ratio.
#
# Usage: bench/run_lstm_bench.sh [--steps N] [--threads N] [--build DIR] [--seed S] [-- EXTRA ARGS]
#   EXTRA ARGS go to both programs (e.g. -- --hidden 512 --layers 2).
# Defaults: 300 steps, 2 threads, build-rel; under a minute on a quiet machine.
#
# PyTorch at its best: each BLAS torch can use (bench/lib.sh says which
# and why) with torch on N threads or 1 and the BLAS on N threads or 1
# (OMP_WAIT_POLICY=PASSIVE), probed for 20 steps; the fastest runs the timed
# run. libtensor gets the same choice between N threads (PASSIVE) and 1.
# PyTorch 2.x (the reference environment, ./do.sh reference): every set-up of
# torch2_setups (bench/lib.sh: eager, torch.compile) runs the timed
# steps on N threads (PASSIVE) and the fastest is the PyTorch 2.x row
# (compilation printed apart, not in ms/step); the 1.13 row stays for history.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
steps=300
threads=2
seed=1
extra=
BENCH_USAGE="[--steps N] [--threads N] [--build DIR] [--seed S] [-- EXTRA ARGS]"
bench_parse --steps:steps:n --threads:threads:n --build:build --seed:seed @after:extra -- "$@"
py=$TORCH_PY
bench_build "$root" "$build" char_lstm
exe="$build/examples/char_lstm"

bench_header
echo "# config: steps $steps, seed $seed, threads $threads ${extra:+, $extra}"

cands=$(mktemp)
trap 'rm -f "$cands"' EXIT INT TERM
torch_blas_candidates "$cands" "$(torch_sysblas)" || true

# field NAME LINE: the value after NAME in a "result:" line
field() { echo "$2" | sed -n "s/.* $1 \([^ ]*\).*/\1/p"; }
# A probe of a hopeless set-up (BLAS threads on a busy machine) is cut short
# after 120 s (TIMEOUT, 4th argument); the timed runs get an hour.
run_torch() { # STEPS TORCH_THREADS "ENV" [TIMEOUT [PYTHON [FLAGS]]]
  # shellcheck disable=SC2086
  # shellcheck disable=SC2046
  env $(torch_unset "${5:-$py}") $3 timeout "${4:-3600}" \
    "${5:-$py}" "$here/char_lstm_torch.py" --steps "$1" --threads "$2" --seed "$seed" ${6:-} $extra 2>/dev/null | grep '^result:' || true
}
run_lt() { # STEPS THREADS "ENV" [TIMEOUT]
  # shellcheck disable=SC2086
  env -u OMP_WAIT_POLICY $3 timeout "${4:-3600}" "$exe" --steps "$1" --threads "$2" --seed "$seed" --sample 0 $extra | grep '^result:' || true
}

best_ms=; best=
while IFS='|' read -r name envs; do
  # torch threads / BLAS threads: N/N, 1/N, 1/1 (on a busy machine BLAS threads
  # can be hopeless: 13 s a step was seen with BLIS on 2 threads at load 10)
  for tb in "$threads/$threads" "1/$threads" 1/1; do
    tt=${tb%/*}; bt=${tb#*/}
    e="$envs $(torch_threads_env "$bt" passive)"
    ms=$(field ms_per_step "$(run_torch 20 "$tt" "$e" 120)")
    [ -n "$ms" ] || { echo "# probe torch: $tt threads, BLAS $bt, $name: no result within 120 s"; continue; }
    echo "# probe torch: $tt threads, BLAS $bt, $name: $ms ms/step"
    if [ -z "$best_ms" ] || awk "BEGIN{exit !($ms < $best_ms)}"; then best_ms=$ms; best="$tt|$e|$name"; fi
  done
done <"$cands"
lt_best_ms=; lt_best=
for t in "$threads" 1; do
  ms=$(field ms_per_step "$(run_lt 20 "$t" OMP_WAIT_POLICY=PASSIVE 120)")
  [ -n "$ms" ] || continue
  echo "# probe libtensor: $t threads: $ms ms/step"
  if [ -z "$lt_best_ms" ] || awk "BEGIN{exit !($ms < $lt_best_ms)}"; then lt_best_ms=$ms; lt_best=$t; fi
done

tt=$(echo "$best" | cut -d'|' -f1); te=$(echo "$best" | cut -d'|' -f2); tn=$(echo "$best" | cut -d'|' -f3)
lt=$(run_lt "$steps" "$lt_best" OMP_WAIT_POLICY=PASSIVE)
pt=$(run_torch "$steps" "$tt" "$te")
pt2=; pt2_name=
if [ -n "$TORCH2_PY" ]; then
  torch2_setups "$cands"
  while IFS='|' read -r name flags; do
    r=$(run_torch "$steps" "$threads" "$(torch_threads_env "$threads" passive)" 3600 "$TORCH2_PY" "$flags")
    [ -n "$r" ] || { echo "# torch 2.x $name: no result"; continue; }
    echo "# torch 2.x $name ($flags): $r"
    if [ -z "$pt2" ] || awk "BEGIN{exit !($(field ms_per_step "$r") < $(field ms_per_step "$pt2"))}"; then pt2=$r; pt2_name=$name; fi
  done <"$cands"
fi
lms=$(field ms_per_step "$lt"); pms=$(field ms_per_step "$pt")
printf '\n%-12s | %10s %10s | %s\n' side "ms/step" "val loss" settings
printf '%-12s | %10s %10s | %s\n' libtensor "$lms" "$(field val_loss "$lt")" "$lt_best threads, OMP_WAIT_POLICY=PASSIVE"
[ -z "$pt2" ] || printf '%-12s | %10s %10s | %s\n' "pytorch 2.x" "$(field ms_per_step "$pt2")" "$(field val_loss "$pt2")" \
  "$threads threads, $pt2_name (compile $(field compile_s "$pt2") s apart)"
printf '%-12s | %10s %10s | %s\n' "pytorch 1.13" "$pms" "$(field val_loss "$pt")" "$tt threads, $tn"
[ -z "$pt2" ] || echo "speed ratio against PyTorch 2.x (its ms / libtensor ms, > 1: libtensor faster): $(awk "BEGIN{printf \"%.2f\", $(field ms_per_step "$pt2") / $lms}")"
echo "speed ratio against PyTorch 1.13 (history): $(awk "BEGIN{printf \"%.2f\", $pms / $lms}")"
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
