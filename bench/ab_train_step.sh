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
# --steps timed ones) under `perf stat -e task-clock` (when perf is
# installed) with OMP_WAIT_POLICY=PASSIVE. It prints per run the process's
# CPU time (all threads, ms; with passive waits it counts work done, not
# waiting) and the bench's tokens/s, median and fastest step; at the end the
# mean CPU time of each side and the ratio B / A, and the load average
# before and after. Process CPU time includes start-up and the warm-up steps,
# the same for both sides. About 1 minute for small with the defaults on a
# quiet machine, 2-3 minutes for medium with --steps 6 --rounds 3.
set -eu

[ $# -ge 2 ] || { echo "usage: $0 A_EXE B_EXE [--config C] [--precision P] [--steps N] [--rounds N] [--threads N]" >&2; exit 2; }
a=$1 b=$2
shift 2
config=small precision=bf16 steps=20 rounds=5 threads=2
while [ $# -gt 0 ]; do
  case "$1" in
    --config) config=$2; shift 2 ;;
    --precision) precision=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) echo "$0: unknown option $1" >&2; exit 2 ;;
  esac
done
for x in "$a" "$b"; do [ -x "$x" ] || { echo "$0: $x is not an executable" >&2; exit 2; }; done
export OMP_WAIT_POLICY=PASSIVE
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
perf_ok=0
command -v perf > /dev/null 2>&1 && perf stat -e task-clock -x, true > /dev/null 2>&1 && perf_ok=1
echo "load before: $(cat /proc/loadavg)"
echo "A = $a"
echo "B = $b"
echo "config $config, precision $precision, $steps steps, $threads threads, $rounds rounds"
echo "side  cpu_ms  tokens/s  ms_median  ms_min"
i=0
while [ $i -lt "$rounds" ]; do
  for side in A B; do
    exe=$a
    [ $side = B ] && exe=$b
    set -- "$exe" --config "$config" --precision "$precision" --steps "$steps" --warmup 2 --threads "$threads" --no-peak
    if [ $perf_ok = 1 ]; then
      perf stat -e task-clock -x, -o "$tmp/stat" "$@" > "$tmp/out"
      cpu=$(grep task-clock "$tmp/stat" | cut -d, -f1)
    else
      "$@" > "$tmp/out"
      cpu=nan
    fi
    line=$(grep "^$config " "$tmp/out")
    echo "$side $cpu $(echo "$line" | awk '{print $4, $5, $6}')" | tee -a "$tmp/all"
  done
  i=$((i + 1))
done
awk '{s[$1] += $2; n[$1]++} END {
  a = s["A"] / n["A"]; b = s["B"] / n["B"];
  printf "mean CPU ms: A %.0f, B %.0f; B / A = %.3f\n", a, b, b / a }' "$tmp/all"
echo "load after: $(cat /proc/loadavg)"
