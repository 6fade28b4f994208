#!/bin/sh
# tests/generate_eos_test.sh BUILD: `generate --checkpoint DIR` on a Hugging
# Face directory stops where the directory's generation_config.json (else
# config.json) says: every id of an eos_token_id list ends a row, not only
# the tokenizer's own end token. A tiny byte-level LM (2 training steps) is
# exported; its greedy output without a stop is recorded, then the id of its
# first byte is made an end id (second in a list): the output is that one
# byte. About two seconds.
set -u
B=$(cd "$1" && pwd)
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
cd "$w" || exit 1
fail() { echo "generate_eos_test: FAILED: $*"; cat out.txt 2>/dev/null; exit 1; }
awk 'BEGIN { for (i = 0; i < 400; i++) printf "the cat sees a dog. " }' >text.txt
"$B/models/transformer/train" --arch decoder-only --text text.txt --tokenizer byte --act gelu_tanh --d-model 16 \
  --heads 2 --layers 1 --d-ff 32 --seq-len 16 --steps 2 --eval-every 0 --ckpt-every 2 --gen-tokens 0 --ckpt-dir lm \
  --threads 1 >train.txt 2>&1 || { cat train.txt; fail "train"; }
"$B/models/transformer/export" --checkpoint lm --format hf --out hf >out.txt 2>&1 || fail "export exited $?"
G="$B/models/transformer/generate"
"$G" --checkpoint hf --max-len 8 "the cat" >free.txt 2>out.txt || fail "generate exited $?"
n=$(head -n 1 free.txt | tr -d '\n' | wc -c)
[ "$n" -ge 2 ] || fail "the free run made $n bytes (want 8, no <eos>)"
first=$(head -c 1 free.txt | od -An -tu1 | tr -d ' ')
id=$((first + 4)) # the byte tokenizer's id of byte b is 4 + b
check() { # check WHAT: the output is the first byte alone
  "$G" --checkpoint hf --max-len 8 "the cat" >stop.txt 2>out.txt || fail "$1: generate exited $?"
  [ "$(head -n 1 stop.txt | tr -d '\n' | wc -c)" -eq 1 ] && [ "$(head -c 1 stop.txt)" = "$(head -c 1 free.txt)" ] ||
    fail "$1: the output is '$(head -n 1 stop.txt)', not its first byte alone (free run: '$(head -n 1 free.txt)')"
}
printf '{"eos_token_id": [3, %d], "pad_token_id": 0}\n' "$id" >hf/generation_config.json
check "generation_config.json"
# generation_config.json without the key: config.json's
printf '{"do_sample": false}\n' >hf/generation_config.json
sed "s/\"pad_token_id\": 0,/\"pad_token_id\": 0, \"eos_token_id\": [3, $id],/" hf/config.json >c.json && mv c.json hf/config.json
check "config.json"
# a list that is not ids: refused naming the file and the key
printf '{"eos_token_id": ["</s>"]}\n' >hf/generation_config.json
"$G" --checkpoint hf --max-len 8 "the cat" >stop.txt 2>out.txt
[ $? -eq 1 ] || fail "a bad eos_token_id: exit status not 1"
grep -q "generation_config.json': key 'eos_token_id' must be an id or a list of ids" out.txt || fail "no message"
echo "generate_eos_test: passed (free run '$(head -n 1 free.txt)', stopped at its first byte, id $id)"
