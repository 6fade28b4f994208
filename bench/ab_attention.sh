#!/bin/sh
# bench/ab_attention.sh: two builds of bench_attention against each other
# (A/B) on the fused path, alternating in one loop with the unfused path
# beside them, so that a change to the fused attention can be read on a
# shared machine whose times vary 1.5-2x from run to run.
#
# Usage: bench/ab_attention.sh A_EXE B_EXE [--T 1024,2048] [--hs 128]
#                              [--rounds 3] [--repeat 5] [--causal 1]
#                              [--autocast]
#
#   A_EXE, B_EXE   two bench_attention binaries (say main's build and a
#                  branch's); the unfused runs use B_EXE.
#
# Each round runs, for each T and HS, in wall time then CPU time (--cpu):
# unfused (B), fused A, fused B, each in its own process, best of --repeat
# calls of forward + backward, B 1, NH 4, f32 (--autocast: under bf16
# autocast, the fused path on the bf16 tile kernels), 2 threads,
# OMP_WAIT_POLICY=PASSIVE. It prints one line per (round, T, HS, clock) with
# the three times (ms) and B's speed-up over unfused, and the load average
# before and after. About 2 minutes with the defaults on a quiet machine.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
BENCH_USAGE="A_EXE B_EXE [--T LIST] [--hs LIST] [--rounds N] [--repeat N] [--causal 0|1] [--autocast]"
[ $# -ge 2 ] || bench_usage
a=$1 b=$2
shift 2
Ts="1024 2048" hss=128 rounds=3 repeat=5 causal=1 ac=
bench_parse --T:Ts:ns --hs:hss:ns --rounds:rounds:n --repeat:repeat:n --causal:causal --autocast:ac=--autocast -- "$@"
case "$causal" in 0 | 1) ;; *) echo "$0: --causal takes 0 or 1" >&2; exit 2 ;; esac
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=2
# the fwd+bwd time of one --one run (its third field)
t() { "$1" $2 $ac --repeat "$repeat" --one "$3" "$4" "$5" "$causal" | awk '{print $3}'; }
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| round | T | HS | clock | unfused ms | fused A ms | fused B ms | B speed-up |"
echo "|---|---|---|---|---|---|---|---|"
# A round: for each T, HS and clock, unfused (B), fused A, fused B, each in
# its own process, then the row.
round() { # all ROUND
  for T in $Ts; do
    for hs in $hss; do
      for clock in wall --cpu; do
        opt=; [ "$clock" = --cpu ] && opt=--cpu
        u=$(t "$b" "$opt" unfused "$T" "$hs")
        ta=$(t "$a" "$opt" fused "$T" "$hs")
        tb=$(t "$b" "$opt" fused "$T" "$hs")
        echo "| $2 | $T | $hs | ${clock#--} | $u | $ta | $tb | $(awk -v u="$u" -v f="$tb" 'BEGIN{printf "%.2fx", u / f}') |"
      done
    done
  done
}
bench_alternate "$rounds" round all
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
