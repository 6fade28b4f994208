#!/bin/sh
# bench/gpt2_memory.sh: peak resident memory of GPT-2 124M training at T 1,024,
# libtensor's `train` against a plain PyTorch 2.x loop of the same model
# (issue 31; docs/train.md "Memory" keeps the table).
#
# Usage: bench/gpt2_memory.sh [--batch "1 4"] [--steps N] [--work DIR] [--build DIR]
#                             [train flags...]
#
#   --batch  the batch sizes to measure (default 1), each on both sides
#   --steps  training steps a process runs (default 2: the second step is the
#            first with AdamW's moments alive, 2 x 475 MiB, beside the
#            activations, so its peak is the steady state's)
#   --work   scratch directory (default a temporary one, removed at the end)
#   flags after ours go to `train` (e.g. --recompute layer --chunked-head)
#
# Both sides train the same Hugging Face GPT-2 124M directory (V 50,257, C 768,
# 12 layers, 12 heads, T 1,024, dropout 0; bench/gpt2_memory.py prepare, the
# corpus and tokenizer of tests/reference/train_curve.py) on the same shards
# (libtensor's `tokenize`), f32, AdamW, gradient clipping at 1, 2 threads.
# libtensor: `train --init-from DIR --data ...` with no evaluation, no
# generation and no checkpoint; PyTorch: train_curve.py's loop (transformers'
# GPT2LMHeadModel, SDPA attention, torch.optim.AdamW with foreach=False).
# Peak RSS is /usr/bin/time's "Maximum resident set size" of each process: all
# of it, the program, its libraries and (for PyTorch) the interpreter
# included. RSS does not depend on the machine's load, so one run a side is
# enough. Needs the reference environment (./do.sh reference) and, for the
# PyTorch side, about 5 GB at B 1 and 11 GB at B 4: it refuses to start with
# less than 3 + 2 x B GB available.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
batches=1
steps=2
work=
pass=
BENCH_USAGE='[--batch "1 4"] [--steps N] [--work DIR] [--build DIR] [train flags...]'
bench_parse --batch:batches:ns --steps:steps:n --work:work --build:build @rest:pass -- "$@"
[ -n "$TORCH2_PY" ] || { echo "$0: no reference environment (./do.sh reference)" >&2; exit 1; }
# PyTorch's side is the larger: about 5 GB at B 1 and 11 GB at B 4 (docs/train.md)
bmax=0
for b in $batches; do [ "$b" -le "$bmax" ] || bmax=$b; done
need=$((3 + 2 * bmax))
avail=$(awk '/^MemAvailable:/ {print int($2 / 1048576)}' /proc/meminfo)
[ "$avail" -ge "$need" ] || { echo "$0: $avail GB available, $need GB needed at B $bmax" >&2; exit 1; }
bench_build "$root" "$build" train tokenize
if [ -z "$work" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT INT TERM
fi

bench_header "GPT-2 124M peak RSS, T 1024, $steps steps a process"
if [ ! -d "$work/init" ]; then
  # shellcheck disable=SC2046 # torch_unset's words are separate flags
  env $(torch_unset "$TORCH2_PY") HF_HUB_OFFLINE=1 "$TORCH2_PY" "$here/gpt2_memory.py" prepare "$work" >/dev/null
fi
if [ ! -d "$work/shards" ]; then
  "$build/tokenize" --tokenizer-file "$work/tokenizer.json" --out "$work/shards" --val-fraction 0.005 \
    --chunk-bytes 16384 "$work/corpus.txt" >/dev/null
fi

maxrss_mib() { awk -F': ' '/Maximum resident set size/ {printf "%.0f\n", $2 / 1024}' "$1"; }

echo "side|B|peak RSS (MiB)"
for b in $batches; do
  # shellcheck disable=SC2086
  /usr/bin/time -v -o "$work/lt.time" env OMP_WAIT_POLICY=PASSIVE "$build/models/transformer/train" \
    --init-from "$work/init" --data "$work/shards/train_*.bin" --val-data "$work/shards/val_*.bin" \
    --seq-len 1024 --batch "$b" --steps "$steps" --optim adamw --clip 1 --dropout 0 --threads 2 \
    --eval-every 0 --eval-batch 1 --gen-tokens 0 --examples 0 --no-ckpt --ckpt-dir "$work/run" \
    $pass >"$work/lt.out" 2>&1 || { cat "$work/lt.out" >&2; exit 1; }
  echo "libtensor train${pass:+ $pass}|$b|$(maxrss_mib "$work/lt.time")"
  # shellcheck disable=SC2046
  /usr/bin/time -v -o "$work/pt.time" env $(torch_unset "$TORCH2_PY") OMP_WAIT_POLICY=PASSIVE HF_HUB_OFFLINE=1 \
    "$TORCH2_PY" "$here/gpt2_memory.py" torch "$work" --batch "$b" --steps "$steps" --threads 2 \
    >"$work/pt.out" 2>&1 || { cat "$work/pt.out" >&2; exit 1; }
  echo "PyTorch $("$TORCH2_PY" -c 'import torch; print(torch.__version__)') eager|$b|$(maxrss_mib "$work/pt.time")"
done
echo "# load after: $(bench_load)"
