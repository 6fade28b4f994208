#!/bin/sh
# tests/bench_lib_test.sh: bench/lib.sh's option parser, counts, median and
# A/B alternation (ctest bench_lib), each in a subshell so that an exit 2
# from the parser is seen as a status. Usage: sh tests/bench_lib_test.sh SRC_DIR
set -eu
src=${1:-$(cd "$(dirname "$0")/.." && pwd)}
here="$src/bench"
. "$here/lib.sh"
fails=0
check() { # NAME GOT WANT
  if [ "$2" = "$3" ]; then echo "ok   $1"; else echo "FAIL $1: got '$2', want '$3'"; fails=$((fails + 1)); fi
}
BENCH_USAGE="[--threads N] [--T LIST] [--build DIR] [--cpu] [--no-train]"
specs="--threads:threads:n --T:Ts:ns --build:build --cpu:cpu=--cpu --no-train:train=0 cnn:models=cnn"

# values, counts, lists, switches and defaults
threads=2 Ts="1 2" cpu='' train=1 models=''
bench_parse $specs -- --threads 4 --T 128,1024 --build "/tmp/a b" --cpu cnn
check "count" "$threads" 4
check "list of counts (commas to spaces)" "$Ts" "128 1024"
check "value with a space" "$build" "/tmp/a b"
check "switch" "$cpu" --cpu
check "plain-word switch" "$models" cnn
check "default kept" "$train" 1
bench_parse $specs -- --no-train --T "64 256"
check "switch to 0" "$train" 0
check "list of counts (spaces)" "$Ts" "64 256"

# rejected: the parser exits 2 and says why
for bad in "--threads 0" "--threads x" "--threads 1234567890" "--threads" "--T 1,0" "--T 1,x" "--unknown" "stray"; do
  # shellcheck disable=SC2086
  st=0; (bench_parse $specs -- $bad) 2>/dev/null || st=$?
  check "rejects $bad" "$st" 2
done
err=$( (bench_parse $specs -- --unknown) 2>&1 || true)
case "$err" in *"unknown option --unknown"*"usage: "*"[--threads N]"*) st=ok ;; *) st="$err" ;; esac
check "unknown flag: message and usage" "$st" ok

# passing words on: @rest collects unknown words, @after what follows --
pass='' extra=''
bench_parse --steps:steps:n @rest:pass -- --steps 3 --foo bar --baz
check "@rest" "$pass" "--foo bar --baz"
check "@rest keeps known flags" "$steps" 3
bench_parse --steps:steps:n @after:extra -- --steps 5 -- --hidden 512 --steps 9
check "@after" "$extra" "--hidden 512 --steps 9"
check "@after stops parsing" "$steps" 5
st=0; (bench_parse --steps:steps:n @after:extra -- --hidden 512) 2>/dev/null || st=$?
check "@after: unknown before -- rejected" "$st" 2

# median and max
check "median odd" "$(printf '3\n1\n2\n' | bench_median)" 2
check "median even" "$(printf '4\n1\n3\n2\n' | bench_median)" 2.5
check "median of g-format numbers" "$(printf '1e3\n20\n300\n' | bench_median)" 300
check "median empty" "$(printf '' | bench_median)" ""
check "max" "$(printf '9.5\n10\n2\n' | bench_max)" 10

# alternation: rounds outer, sides inner, in order; 0 rounds run nothing;
# a failing call stops the loop with its status
log=
rec() { log="$log $2$1"; }
bench_alternate 3 rec A B C
check "alternation order" "$log" " 1A 1B 1C 2A 2B 2C 3A 3B 3C"
log=
bench_alternate 0 rec A B
check "zero rounds" "$log" ""
log=
stop() { log="$log $2$1"; [ "$1$2" != B2 ]; }
st=0; bench_alternate 3 stop A B || st=$?
check "stops at the failing call" "$log" " 1A 1B 2A 2B"
check "returns its status" "$st" 1
st=0; bench_alternate x rec A 2>/dev/null || st=$?
check "rounds must be a number" "$st" 2

# the clocks
t0=$(bench_now)
case "$t0" in *.*) st=ok ;; *) st="$t0" ;; esac
check "bench_now has a fraction" "$st" ok
f=$(mktemp)
bench_cpu_ms "$f" sh -c 'i=0; while [ $i -lt 20000 ]; do i=$((i + 1)); done' >/dev/null
v=$(cat "$f")
case "$v" in nan | '' | *[!0-9.]*) st="$v" ;; *) st=ok ;; esac
check "bench_cpu_ms writes a number of ms" "$st" ok
st=0; bench_cpu_ms "$f" false || st=$?
check "bench_cpu_ms returns the command's status" "$st" 1
rm -f "$f"

# the PyTorch environment: the OpenBLAS settings are cleared for torch 1.13 only
check "torch_unset 1.13" "$(torch_unset "$TORCH_PY")" "-u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE -u OMP_NUM_THREADS -u OMP_WAIT_POLICY"
check "torch_unset 2.x" "$(torch_unset /other/python)" "-u OMP_NUM_THREADS -u OMP_WAIT_POLICY"

[ "$fails" = 0 ] || { echo "$fails failed"; exit 1; }
echo "all passed"
