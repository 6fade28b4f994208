#!/bin/sh
# bench/run_dist_bench.sh: data parallelism on this machine, in one command
# (docs/distributed.md keeps the tables). Under 5 minutes on a quiet 2-core
# machine.
#
# Usage: bench/run_dist_bench.sh [--build DIR] [--steps N] [--configs "small medium"] [--zero-only]
#
#   1. the gradient allreduce over message sizes (latency, bus bandwidth) and
#      a 100 MB gradient by bucket size: mpirun -np 2 bench_dist;
#   2. GPT small and medium (bench/train_step.c's models, the same global
#      batch every time): np=1 x 2 threads, then np=2 x 1 thread with the
#      buckets reduced during backward (25 MB buckets, PyTorch's default, and
#      1 MB ones, libtensor's) and after it (--no-overlap). Each np=2 line gives the
#      reduction's time alone and the exposed part per step (time in
#      lt_dist_grads_finish); hidden = alone - exposed.
#   3. ZeRO-1 (--zero 1, 1 MB buckets): every np=2 line also gives each
#      rank's optimizer-state MiB and peak RSS, so the 1 MB line without it
#      and this one compare the memory. --zero-only runs only these two
#      (GPT medium: bench/run_dist_bench.sh --configs medium --zero-only).
#
# Threads: OMP_WAIT_POLICY=PASSIVE; --bind-to none (Open MPI binds each of 2
# ranks to a core by default, which is what np=2 x 1 thread wants anyway).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
steps=4
configs="small medium"
zero_only=0
BENCH_USAGE='[--build DIR] [--steps N] [--configs "small medium"] [--zero-only]'
bench_parse --build:build --steps:steps:n --configs:configs --zero-only:zero_only=1 -- "$@"
bench_build "$root" "$build" bench_dist bench_train_step
export OMP_WAIT_POLICY=PASSIVE
mpirun="mpirun --bind-to none"
[ "$(id -u)" = 0 ] && mpirun="$mpirun --allow-run-as-root"
echo "load: $(cat /proc/loadavg)"
modes="--bucket-mb_25 --bucket-mb_1 --bucket-mb_25_--no-overlap --bucket-mb_1_--zero_1"
[ "$zero_only" = 1 ] && modes="--bucket-mb_1 --bucket-mb_1_--zero_1"
[ "$zero_only" = 1 ] || $mpirun -np 2 "$build/bench/bench_dist"
for c in $configs; do
  if [ "$zero_only" = 0 ]; then
    echo "== $c: np=1 x 2 threads"
    "$build/bench/bench_train_step" --config "$c" --threads 2 --no-peak --steps "$steps" --warmup 1 | tail -1
  fi
  for m in $modes; do
    mode=$(echo "$m" | tr _ ' ')
    echo "== $c: np=2 x 1 thread, $mode"
    # shellcheck disable=SC2086
    $mpirun -np 2 "$build/bench/bench_train_step" --config "$c" --threads 1 --no-peak --steps "$steps" --warmup 1 $mode | tail -3
  done
done
echo "load: $(cat /proc/loadavg)"
