#!/bin/sh
# tests/export_list_test.sh BUILD: `export --list` (lt_ckpt_describe) on a
# checkpoint of a tiny `train` run: the configuration, one line per model
# tensor (as many as the header line says) and the optimizer's states; then a
# truncated copy and a file that is no checkpoint: exit status 1 with the
# loader's message, no crash. About a second.
set -u
B=$(cd "$1" && pwd)
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
cd "$w" || exit 1
fail() { echo "export_list_test: FAILED: $*"; cat out.txt 2>/dev/null; exit 1; }
"$B/models/transformer/train" --task reverse --d-model 32 --heads 2 --layers 1 --d-ff 64 --task-train 200 \
  --task-valid 20 --steps 3 --eval-every 0 --ckpt-every 3 --ckpt-dir run --threads 1 >train.txt 2>&1 ||
  { cat train.txt; fail "train"; }
"$B/models/transformer/export" --checkpoint run --list >out.txt 2>&1 || fail "export --list exited $?"
grep -q '^checkpoint .*ckpt-000000000003.h5: format version [0-9]*, written by libtensor .*, training state$' out.txt ||
  fail "no header line"
grep -q '^  d_model = 32$' out.txt || fail "no d_model in the configuration"
grep -q '^  arch = .encoder-decoder.$' out.txt || fail "no arch in the configuration"
n=$(sed -n 's/^model: \([0-9]*\) tensors, .*/\1/p' out.txt)
[ -n "$n" ] && [ "$n" -gt 10 ] || fail "no model line"
lines=$(awk '/^model:/ { on = 1; next } /^optimizer:/ { on = 0 } on && /^  [a-z].* (f32|f64|i32|i64|bool|bf16) +\[/ { k++ }
             END { print k + 0 }' out.txt)
[ "$lines" -eq "$n" ] || fail "$lines tensor lines for $n tensors"
grep -q '^  encoder.layers.0.self_attn.q_proj.weight  *f32  \[32,32\]$' out.txt || fail "q_proj.weight [32,32] missing"
grep -Eq '^optimizer: adamw?, step 3, [0-9]+ state tensors$' out.txt || fail "no optimizer line"
grep -q '^  encoder.layers.0.self_attn.q_proj.weight.exp_avg_sq  *f32  \[32,32\]$' out.txt || fail "no exp_avg_sq line"
# a truncated checkpoint and a text file: refused with the loader's message, exit status 1
head -c 3000 run/ckpt-000000000003.h5 >trunc.h5
"$B/models/transformer/export" --checkpoint trunc.h5 --list >out.txt 2>&1
[ $? -eq 1 ] || fail "a truncated file: exit status not 1"
grep -q "truncated" out.txt || fail "a truncated file: no 'truncated' in the message"
"$B/models/transformer/export" --checkpoint train.txt --list >out.txt 2>&1
[ $? -eq 1 ] || fail "a text file: exit status not 1"
grep -q "not a libtensor checkpoint" out.txt || fail "a text file: no message"
echo "export_list_test: $n model tensors listed; truncated and foreign files refused"
