#!/bin/sh
# tests/evaluate_test.sh BUILD: the evaluate program on a tiny decoder-only run
# of train (byte tokenizer): perplexity of a text (the same from the
# checkpoint and from its Hugging Face export), --json, the loss on token
# shards written by tokenize, a multiple-choice file; then its refusals: bad
# flags (exit 2), a missing model, a FIFO as the text, a bad multiple-choice
# line (exit 1, each naming what). A few seconds.
set -u
B=$(cd "$1" && pwd)
E="$B/models/transformer/evaluate"
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
cd "$w" || exit 1
fail() { echo "evaluate_test: FAILED: $*"; cat out.txt 2>/dev/null; exit 1; }
awk 'BEGIN { for (i = 0; i < 300; i++) printf "the cat sees a dog. the dog sees a cat.\n" }' >text.txt
"$B/models/transformer/train" --arch decoder-only --text text.txt --tokenizer byte --act gelu_tanh --d-model 32 --heads 2 \
  --layers 1 --d-ff 64 --seq-len 32 --steps 60 --lr 1e-2 --eval-every 0 --ckpt-every 60 --gen-tokens 0 \
  --ckpt-dir lm --threads 1 >train.txt 2>&1 || { cat train.txt; fail "train"; }
head -c 2000 text.txt >held.txt

# perplexity: a sentence, and the same numbers from the checkpoint and its Hugging Face export
"$E" --model lm --text held.txt --window 32 --stride 16 >out.txt 2>&1 || fail "--text exited $?"
grep -Eq '^held.txt: 2000 tokens, 1999 scored in [0-9]+ windows of 32 \(stride 16\): loss [0-9.]+, perplexity [0-9.]+$' \
  out.txt || fail "--text: no perplexity line"
"$B/models/transformer/export" --checkpoint lm --format hf --out hf >/dev/null 2>&1 || fail "export --format hf"
"$E" --model hf --text held.txt --window 32 --stride 16 >out2.txt 2>&1 || fail "--text (hf) exited $?"
[ "$(cut -d: -f2- out.txt)" = "$(cut -d: -f2- out2.txt)" ] || { cat out2.txt; fail "checkpoint and export differ"; }
"$E" --model lm --text held.txt --json >out.txt 2>&1 || fail "--json exited $?"
grep -Eq '^\{"model": ?"lm", ?"text": ?"held.txt", ?"tokens": ?2000, ?"scored": ?[0-9]+, ?"windows": ?63, ?"window": ?32,' \
  out.txt || fail "--json: not the object"
# the trained model knows this text: a perplexity well below the byte vocabulary's
ppl=$(sed -n 's/.*"perplexity": *\([0-9.e+-]*\).*/\1/p' out.txt)
awk -v p="$ppl" 'BEGIN { exit !(p > 1 && p < 40) }' || fail "--json: perplexity $ppl of a trained model"

# token shards of the same text through tokenize
"$B/tokenize" --tokenizer byte --out shards --val-fraction 0.5 --chunk-bytes 1024 text.txt >/dev/null 2>&1 || fail "tokenize"
"$E" --model lm --data 'shards/val_*.bin' --window 16 --batch 4 >out.txt 2>&1 || fail "--data exited $?"
grep -Eq '^shards/val_\*.bin: 1 shards, [0-9]+ windows of 16, [0-9]+ targets on 1 rank\(s\): loss [0-9.]+, perplexity' \
  out.txt || fail "--data: no line"

# multiple choice
printf '%s\n' '{"ctx": "the cat sees a", "endings": ["dog.", "zqxj."], "label": 0}' \
  '{"context": "the dog sees a", "endings": ["kkkk.", "cat."], "label": 1}' >mc.jsonl
"$E" --model lm --multiple-choice mc.jsonl >out.txt 2>&1 || fail "--multiple-choice exited $?"
grep -Eq '^mc.jsonl: 2 items: accuracy 1.0000 \(2/2\) by mean token loss' out.txt || fail "--multiple-choice: accuracy"
"$E" --model lm --multiple-choice mc.jsonl --json >out.txt 2>&1 || fail "--multiple-choice --json exited $?"
grep -q '"line": *2, *"label": *1, *"choice": *1, *"scores": *\[' out.txt || fail "--json: no scores of line 2"

# refusals
expect() { # STATUS TEXT ARGS...: evaluate ARGS exits STATUS with TEXT in its message
  st=$1 txt=$2
  shift 2
  timeout 20 "$E" "$@" >out.txt 2>&1
  got=$?
  [ $got -eq "$st" ] || fail "evaluate $*: exit $got, not $st"
  grep -q -- "$txt" out.txt || fail "evaluate $*: no '$txt'"
}
expect 2 "--model PATH is required" --text held.txt
expect 2 "give one of" --model lm
expect 2 "give one of" --model lm --text held.txt --multiple-choice mc.jsonl
expect 2 "--stride is for --text" --model lm --data 'shards/val_*.bin' --stride 4
expect 2 "--stride 9: over --window 8" --model lm --text held.txt --window 8 --stride 9
expect 2 "window 40 must be in" --model lm --text held.txt --window 40
expect 2 "--window 40: over the model's max_len 32" --model lm --data 'shards/val_*.bin' --window 40
expect 2 "--batch" --model lm --data 'shards/val_*.bin' --batch 0
expect 2 "unknown flag --perplexity" --model lm --text held.txt --perplexity
expect 1 "nothere" --model nothere --text held.txt
expect 1 "nothing.txt" --model lm --text nothing.txt
mkfifo fifo.txt
expect 1 "fifo.txt" --model lm --text fifo.txt
expect 1 "fifo.txt" --model lm --multiple-choice fifo.txt
printf '%s\n' '{"ctx": "a", "endings": ["b", "c"], "label": 0}' '{"ctx": "a", "endings": ["b"], "label": 0}' >bad.jsonl
expect 1 "'bad.jsonl' line 2: \"endings\" must be an array" --model lm --multiple-choice bad.jsonl
expect 1 "no shard matches 'noshards/val_" --model lm --data 'noshards/val_*.bin'
printf 'x' >one.txt
expect 1 "at least 2" --model lm --text one.txt
echo "evaluate_test: ok"
