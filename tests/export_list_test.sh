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
# export --format hf: an --out that already holds an export is refused without --overwrite (it was
# replaced silently), one that is not a directory is named as such (it ended with mkdir's "File exists");
# a tokenizer file that is a FIFO is reported as unreadable, not as missing; a tokenizer that does not
# belong to the weights is named as such by train --init-from.
awk 'BEGIN { for (i = 0; i < 400; i++) printf "the cat sees a dog. " }' >text.txt
"$B/models/transformer/train" --arch decoder-only --text text.txt --act gelu_tanh --d-model 16 --heads 2 --layers 1 \
  --d-ff 32 --seq-len 16 --steps 2 --eval-every 0 --ckpt-every 2 --gen-tokens 0 --ckpt-dir lm --threads 1 \
  >train.txt 2>&1 || { cat train.txt; fail "train (decoder-only)"; }
X="$B/models/transformer/export"
"$X" --checkpoint lm --format hf --out hf >out.txt 2>&1 || fail "export --format hf exited $?"
[ -s hf/config.json ] && [ -s hf/model.safetensors ] || fail "no config.json or model.safetensors"
cp hf/config.json config.before
"$X" --checkpoint lm --format hf --out hf >out.txt 2>&1
[ $? -eq 2 ] || fail "an existing export: exit status not 2"
grep -q "already holds config.json (a regular file): --overwrite replaces" out.txt || fail "an existing export: no message"
"$X" --checkpoint lm --format hf --out hf --overwrite >out.txt 2>&1 || fail "export --overwrite exited $?"
"$X" --checkpoint lm --format hf --out /dev/full >out.txt 2>&1
[ $? -eq 2 ] || fail "--out /dev/full: exit status not 2"
grep -q "'/dev/full' is a character device, not a directory" out.txt || fail "--out /dev/full: no message"
grep -q "File exists" out.txt && fail "--out /dev/full: mkdir's message"
G="$B/models/transformer/generate"
"$G" --checkpoint hf --max-len 2 "the cat" >out.txt 2>&1 || fail "generate --checkpoint hf exited $?"
mv hf/libtensor-tokenizer.bin tok.bin && mkfifo hf/libtensor-tokenizer.bin
timeout 20 "$G" --checkpoint hf --max-len 2 "the cat" >out.txt 2>&1
[ $? -eq 1 ] || fail "a FIFO tokenizer: exit status not 1"
grep -q "FIFO" out.txt || fail "a FIFO tokenizer: the message does not say FIFO"
grep -q "without libtensor's tokenizer" out.txt && fail "a FIFO tokenizer reported as missing"
rm hf/libtensor-tokenizer.bin
# a tokenizer of another vocabulary beside the weights: train --init-from names the mismatch
"$B/models/transformer/train" --arch decoder-only --text text.txt --act gelu_tanh --tokenizer byte --d-model 16 \
  --heads 2 --layers 1 --d-ff 32 --seq-len 16 --steps 1 --eval-every 0 --ckpt-every 1 --gen-tokens 0 --ckpt-dir lmb \
  --threads 1 >/dev/null 2>&1 || fail "train (byte tokenizer, decoder-only)"
"$X" --checkpoint lmb --format hf --out hfb >/dev/null 2>&1 || fail "export of the byte run"
cp hfb/libtensor-tokenizer.bin hf/libtensor-tokenizer.bin
"$B/models/transformer/train" --init-from hf --text text.txt --steps 1 --eval-every 0 --gen-tokens 0 --no-ckpt \
  --ckpt-dir init --threads 1 >out.txt 2>&1
[ $? -eq 1 ] || fail "--init-from a directory whose tokenizer is another's: exit status not 1"
grep -q "its tokenizer has 260 ids, its model's vocab_size is" out.txt || fail "--init-from: no clear message"
grep -q "holds no tokenizer" out.txt && fail "--init-from: 'holds no tokenizer'"
echo "export_list_test: $n model tensors listed; truncated and foreign files refused; an existing --out refused" \
  "without --overwrite, /dev/full named; a FIFO tokenizer and another's tokenizer named"

