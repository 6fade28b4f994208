#!/bin/sh
# bench/run_ab_step.sh: libtensor against libtensor, two builds of
# bench_train_step (say main's and a branch's) alternating in one loop, so
# that both see the same machine. Prints, per run, the median and minimum
# step (ms), the CPU time of the whole run (perf stat task-clock: steadier
# than wall time on a shared machine) and the page faults, then the medians
# of each build per configuration. No PyTorch: for that, run_train_bench.sh.
#
# Usage: bench/run_ab_step.sh A_BUILD B_BUILD [--configs "small medium encdec"]
#                             [--precision bf16|f32] [--rounds N] [--steps N]
#   A_BUILD, B_BUILD: build directories (bench/bench_train_step inside) or the
#   programs themselves. Defaults: all three configurations, bf16, 3 rounds,
#   10 timed steps (6 for medium) after 2 warm-up steps, 2 threads with
#   OMP_WAIT_POLICY=PASSIVE. About 4 minutes on a quiet machine.
#
# Example (docs/mixed-precision.md, "Where the time goes", session 7):
#   bench/run_ab_step.sh /work/main/build-rel build-rel
set -eu
[ $# -ge 2 ] || { sed -n '2,16p' "$0"; exit 2; }
prog() { if [ -x "$1/bench/bench_train_step" ]; then echo "$1/bench/bench_train_step"; else echo "$1"; fi; }
A=$(prog "$1"); B=$(prog "$2"); shift 2
configs="small medium encdec"; prec=bf16; rounds=3; steps=10
while [ $# -gt 0 ]; do
  case "$1" in
    --configs) configs=$2; shift 2 ;;
    --precision) prec=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) echo "run_ab_step.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
for p in "$A" "$B"; do [ -x "$p" ] || { echo "run_ab_step.sh: $p is not a program" >&2; exit 2; }; done
command -v perf >/dev/null || { echo "run_ab_step.sh: needs perf (linux-perf)" >&2; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "A = $A"; echo "B = $B"; echo "load before: $(cat /proc/loadavg)"
echo "round config  build |   ms med   ms min | task-clock ms | page faults"
for r in $(seq "$rounds"); do
  for c in $configs; do
    n=$steps; [ "$c" = medium ] && [ "$steps" -gt 6 ] && n=6
    for side in A B; do
      p=$A; [ $side = B ] && p=$B
      line=$(OMP_WAIT_POLICY=PASSIVE perf stat -x, -e task-clock,page-faults -o "$tmp/ps" \
               "$p" --config "$c" --precision "$prec" --steps "$n" --warmup 2 --threads 2 --no-peak | tail -1)
      tc=$(grep task-clock "$tmp/ps" | cut -d, -f1); pf=$(grep page-faults "$tmp/ps" | cut -d, -f1)
      set -- $line
      printf '%5s %-7s %5s | %8s %8s | %13.0f | %11s\n' "$r" "$c" "$side" "$5" "$6" "$tc" "$pf"
      echo "$c $side $5 $tc" >> "$tmp/all"
    done
  done
done
echo "load after: $(cat /proc/loadavg)"
echo "medians per configuration: ms med (A, B, A/B) | task-clock ms (A, B, A/B)"
for c in $configs; do
  med() { grep "^$c $1 " "$tmp/all" | awk -v k="$2" '{print $k}' | sort -n | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
  am=$(med A 3); bm=$(med B 3); at=$(med A 4); bt=$(med B 4)
  awk -v c="$c" -v am="$am" -v bm="$bm" -v at="$at" -v bt="$bt" \
    'BEGIN {printf "%-7s %8.1f %8.1f %5.2fx | %8.0f %8.0f %5.2fx\n", c, am, bm, am/bm, at, bt, at/bt}'
done
