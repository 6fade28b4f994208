#!/bin/sh
# bench/ab_train_step.sh: two builds of bench_train_step against each other
# (A/B), alternating in one loop, so that a change's effect on a training
# step can be read on a shared machine whose wall times vary by 15-20%
# from run to run.
#
# Usage: bench/ab_train_step.sh A_EXE B_EXE [--config small] [--precision bf16]
#                               [--steps 20] [--rounds 5] [--threads 2]
#
#   A_EXE, B_EXE   two bench_train_step binaries (say main's build and a branch's;
#                  a static build can be copied aside before rebuilding)
#
# Each round runs A then B (each in its own process, 2 warm-up steps, then
# --steps timed ones) under bench_cpu_ms (bench/lib.sh: `perf stat -e
# task-clock` when perf works, else /usr/bin/time) with OMP_WAIT_POLICY=PASSIVE. It prints per run the process's
# CPU time (all threads, ms; with passive waits it counts work done, not
# waiting) and the bench's tokens/s, median and fastest step; at the end the
# mean CPU time of each side and the ratio B / A, and the load average
# before and after. Process CPU time includes start-up and the warm-up steps,
# the same for both sides. About 1 minute for small with the defaults on a
# quiet machine, 2-3 minutes for medium with --steps 6 --rounds 3.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
BENCH_USAGE="A_EXE B_EXE [--config C] [--precision P] [--steps N] [--rounds N] [--threads N]"
[ $# -ge 2 ] || bench_usage
a=$1 b=$2
shift 2
config=small precision=bf16 steps=20 rounds=5 threads=2
bench_parse --config:config --precision:precision --steps:steps:n --rounds:rounds:n --threads:threads:n -- "$@"
for x in "$a" "$b"; do [ -x "$x" ] || { echo "$0: $x is not an executable" >&2; exit 2; }; done
export OMP_WAIT_POLICY=PASSIVE
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
echo "load before: $(cat /proc/loadavg)"
echo "A = $a"
echo "B = $b"
echo "config $config, precision $precision, $steps steps, $threads threads, $rounds rounds"
echo "side  cpu_ms  tokens/s  ms_median  ms_min"
side() { # A|B ROUND
  exe=$a
  [ "$1" = B ] && exe=$b
  bench_cpu_ms "$tmp/cpu" "$exe" --config "$config" --precision "$precision" --steps "$steps" --warmup 2 \
    --threads "$threads" --no-peak >"$tmp/out"
  line=$(grep "^$config " "$tmp/out")
  echo "$1 $(cat "$tmp/cpu") $(echo "$line" | awk '{print $4, $5, $6}')" | tee -a "$tmp/all"
}
bench_alternate "$rounds" side A B
awk '{s[$1] += $2; n[$1]++} END {
  a = s["A"] / n["A"]; b = s["B"] / n["B"];
  printf "mean CPU ms: A %.0f, B %.0f; B / A = %.3f\n", a, b, b / a }' "$tmp/all"
echo "load after: $(cat /proc/loadavg)"
