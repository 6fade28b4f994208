#!/bin/sh
# bench/run_gpt2_bench.sh: GPT-2 124M training steps in libtensor, PyTorch 2.x
# and karpathy/llm.c on the same machine, in one run, with the step's
# physical bound beside them (issue 33; docs/benchmarks.md keeps the table).
#
# Usage: bench/run_gpt2_bench.sh [--llmc PATH/train_gpt2] [--llmc-steps N]
#                                [--rounds N] [--steps N] [--t1024]
#                                [--build DIR] [run_train_bench.sh flags...]
#
#   --llmc       llm.c's CPU trainer, built as its Makefile builds it
#                (`make train_gpt2`: -Ofast -march=native, OpenMP on). llm.c
#                is not part of this repository: fetch it and build it
#                yourself (docs/benchmarks.md says how it was measured).
#                Without it the llm.c row is left out.
#   --llmc-steps timed llm.c steps (default 6): train_gpt2 runs unchanged on
#                inputs from bench/llmc_inputs.py (random weights, random
#                tokens, its layouts) and is stopped after step N; the first
#                step (a warm-up) is not counted, the median of the others is.
#                Its B 4, T 64 are fixed in its source: it has the gpt2 row
#                only.
#   --t1024      also the gpt2-1024 row (T 1,024, B 4) on libtensor and
#                PyTorch.
#
# The rows: `run_train_bench.sh --configs "gpt2 [gpt2-1024]"` (libtensor
# f32 and bf16 against PyTorch 2.x's fastest set-up; the flags after ours
# pass through), then llm.c's median step and tokens/s, then libtensor's
# bound (bench_train_step --bound: products at the measured GEMM peak plus
# AdamW's 28 bytes per parameter at the measured triad bandwidth) in f32 and
# bf16. llm.c's model has 124,475,904 parameters (vocabulary padded to
# 50,304 rows); libtensor's and PyTorch's 124,439,808 (50,257 rows); the
# products differ by the 47 padded rows of the head (0.03% of the step).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
llmc=
llmc_steps=6
rounds=1
steps=5
t1024=0
pass=
BENCH_USAGE="[--llmc PATH/train_gpt2] [--llmc-steps N] [--rounds N] [--steps N] [--t1024] [--build DIR] [run_train_bench.sh flags...]"
bench_parse --llmc:llmc --llmc-steps:llmc_steps:n --rounds:rounds:n --steps:steps:n --t1024:t1024=1 --build:build \
  @rest:pass -- "$@"
[ -z "$llmc" ] || [ -x "$llmc" ] || { echo "$0: --llmc $llmc is not an executable" >&2; exit 2; }
configs=gpt2
[ "$t1024" = 0 ] || configs="gpt2 gpt2-1024"
exe="$build/bench/bench_train_step"
bench_build "$root" "$build" bench_train_step
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

bench_header "GPT-2 124M"
# shellcheck disable=SC2086
"$here/run_train_bench.sh" --configs "$configs" --steps "$steps" --rounds "$rounds" --build "$build" $pass

if [ -n "$llmc" ]; then
  echo
  /usr/bin/python3 "$here/llmc_inputs.py" "$tmp/llmc" >/dev/null
  llmc_round() { # llmc ROUND; fails (ending the rounds) when llm.c gave no step times
    # llm.c reads its inputs from the working directory; stop it after the
    # last timed step (it would otherwise run 40 steps and sample twice).
    (cd "$tmp/llmc" && OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE stdbuf -oL "$llmc" 2>&1) |
      awk -v last="$llmc_steps" '{ print } /^step [0-9]+:/ { if ($2 + 0 >= last) exit }' >"$tmp/llmc.out" || true
    ms=$(sed -n 's/^step \([0-9]*\): .*(took \([0-9.]*\) ms)$/\1 \2/p' "$tmp/llmc.out" | awk '$1 > 0 { print $2 }' |
      bench_median)
    params=$(sed -n 's/^num_parameters: //p' "$tmp/llmc.out")
    [ -n "$ms" ] || { echo "# llm.c gave no step times:"; sed 's/^/#   /' "$tmp/llmc.out" | tail -5; return 1; }
    printf 'llm.c     f32   %s | %9.0f tok/s %9.1f ms (median of steps 1-%s, B 4, T 64, %s parameters, OMP_NUM_THREADS=2)\n' \
      "$2" "$(awk "BEGIN{print 256 / ($ms * 1e-3)}")" "$ms" "$llmc_steps" "$params"
  }
  bench_alternate "$rounds" llmc_round llmc || true
fi

echo
for prec in f32 bf16; do
  for c in $configs; do
    OMP_WAIT_POLICY=PASSIVE "$exe" --config "$c" --steps "$steps" --warmup 2 --threads 2 --precision "$prec" --bound |
      sed -n "s/^\($c *bound: .*\)/$prec \1/p"
  done
done
