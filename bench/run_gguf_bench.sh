#!/bin/sh
# bench/run_gguf_bench.sh: libtensor (bench_gguf) against llama.cpp
# (llama-cpp-python, bench/gguf_llama.py) on the same GGUF file, the same
# prompt, the same threads: prompt processing and generation tokens/s, with
# the bandwidth bound of generation beside them (issue 32, item 3;
# docs/decoding.md records the results).
#
# Usage: bench/run_gguf_bench.sh [--models "gpt2 llama"] [--weights "f32 bf16 q8_0 q4_0"]
#                                [--prompt 512] [--gen 128] [--threads 2] [--rounds 3]
#                                [--wait passive|default] [--dir DIR] [--build DIR]
#
# --wait: OpenMP's wait policy for both sides, OMP_WAIT_POLICY=PASSIVE (idle
# threads sleep at once: the figures of a machine shared with other work) or
# OpenMP's default (they spin a while first, as a user's process does unless
# told otherwise). llama.cpp's threads wait for each other in ggml's own
# spinning barrier whatever the policy; libtensor's wait at the end of each
# product's parallel region, so PASSIVE costs it a wake-up per product
# (docs/decoding.md).
#
# The models (bench_gguf make: GPT-2 124M's shape, a 205M Llama; random
# weights) are written once into --dir (default /tmp/lt_gguf_bench, kept
# between runs). Each round runs libtensor then llama.cpp on every file
# (alternating, so that a change in the machine's load hits both); the table
# gives the medians over the rounds and the ratio of the medians. The bound
# is bytes per generated token (the file's weights, in the file's type:
# bench_gguf holds the matrices in it as llama.cpp does; the f32 column is
# the same model in f32) over the triad bandwidth (bench/triad.h) measured
# once before the rounds. On a machine shared with
# other work the figures are low and noisy: read the ratios, which come
# from the same rounds.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
models="gpt2 llama"
weights="f32 bf16 q8_0 q4_0"
prompt=512
gen=128
threads=2
rounds=3
dir=/tmp/lt_gguf_bench
wait=passive
BENCH_USAGE='[--models "gpt2 llama"] [--weights "f32 bf16 q8_0 q4_0"] [--prompt N] [--gen N] [--threads N] [--rounds N] [--wait passive|default] [--dir DIR] [--build DIR]'
bench_parse --models:models --weights:weights --prompt:prompt:n --gen:gen:n --threads:threads:n --rounds:rounds:n \
  --wait:wait --dir:dir --build:build -- "$@"
case $wait in
  passive) policy=OMP_WAIT_POLICY=PASSIVE ;;
  default) policy=LT_BENCH_WAIT=default ;; # (a harmless assignment: env needs one)
  *) echo "$0: --wait passive or default, not '$wait'" >&2; exit 2 ;;
esac
[ -n "$TORCH2_PY" ] && "$TORCH2_PY" -c 'import llama_cpp' 2>/dev/null ||
  { echo "$0: needs llama-cpp-python in the reference environment (./do.sh reference)" >&2; exit 2; }
bench_build "$root" "$build" bench_gguf
exe="$build/bench/bench_gguf"
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

bench_header "prompt $prompt, generation $gen, $threads threads, $rounds rounds, OpenMP wait $wait"
echo "# llama.cpp: llama-cpp-python $("$TORCH2_PY" -c 'import llama_cpp; print(llama_cpp.__version__)'), CPU backend"
for m in $models; do
  for w in $weights; do
    f="$dir/$m-$w.gguf"
    [ -f "$f" ] || "$exe" make "$m" "$f" "$w"
  done
done
gbs=$("$exe" bound "$dir/$(echo "$models" | cut -d' ' -f1)-$(echo "$weights" | cut -d' ' -f1).gguf" \
  --threads "$threads" | awk '{ print $6 }')
echo "# memory bandwidth (triad, $threads threads): $gbs GB/s"
# A round: libtensor then llama.cpp on every file (one side: both, file by
# file, so that the two runs of a file stay back to back).
round() { # files ROUND
  for m in $models; do
    for w in $weights; do
      f="$dir/$m-$w.gguf"
      env -u OMP_WAIT_POLICY "$policy" "$exe" run "$f" --prompt "$prompt" --gen "$gen" --threads "$threads" >>"$tmp/lt-$m-$w"
      # shellcheck disable=SC2046
      env $(torch_unset "$TORCH2_PY") "$policy" "$TORCH2_PY" "$here/gguf_llama.py" "$f" --prompt "$prompt" \
        --gen "$gen" --threads "$threads" >>"$tmp/ll-$m-$w"
    done
  done
}
bench_alternate "$rounds" round files
echo
echo "| model | weights | file MB | pp libtensor tok/s | pp llama.cpp tok/s | pp ratio | tg libtensor tok/s | tg llama.cpp tok/s | tg ratio | tg bound (file) tok/s | tg bound (f32) tok/s | libtensor % of the bound (file) | llama.cpp % of it |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for m in $models; do
  for w in $weights; do
    f="$dir/$m-$w.gguf"
    set -- $("$exe" bound "$f" --threads "$threads")
    bytes=$2 f32b=$4
    lpp=$(awk '{ print $2 }' "$tmp/lt-$m-$w" | bench_median) ltg=$(awk '{ print $4 }' "$tmp/lt-$m-$w" | bench_median)
    cpp=$(awk '{ print $2 }' "$tmp/ll-$m-$w" | bench_median) ctg=$(awk '{ print $4 }' "$tmp/ll-$m-$w" | bench_median)
    awk -v m="$m" -v w="$w" -v sz="$(wc -c <"$f")" -v lpp="$lpp" -v cpp="$cpp" -v ltg="$ltg" -v ctg="$ctg" \
      -v b="$bytes" -v fb="$f32b" -v g="$gbs" 'BEGIN {
        bf = g * 1e9 / b; b32 = g * 1e9 / fb
        printf "| %s | %s | %.0f | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f | %.1f | %.1f | %.0f%% | %.0f%% |\n",
          m, w, sz / 1e6, lpp, cpp, lpp / cpp, ltg, ctg, ltg / ctg, bf, b32, 100 * ltg / bf, 100 * ctg / bf }'
  done
done
