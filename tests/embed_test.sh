#!/bin/sh
# tests/embed_test.sh BUILD SRC: the embed program as a user runs it, on a tiny
# random BERT directory (tests/interop/bert_tool make) with the conformance
# suite's WordPiece tokenizer.json (1,500 ids): operands and --input give the
# same vectors, one JSON line per text; --normalize gives unit vectors;
# safetensors output; and the refusals, each with its exit status and
# message (a decoder-only directory, no texts, a tokenizer of another model,
# no tokenizer). About a second. (The real MiniLM against sentence-transformers:
# reference_hf_bert.)
set -u
B=$(cd "$1" && pwd)
S=$(cd "$2" && pwd)
E="$B/models/transformer/embed"
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
cd "$w" || exit 1
fail() { echo "embed_test: FAILED: $*"; cat out.txt err.txt 2>/dev/null; exit 1; }
"$B/tests/bert_tool" make bert 3 0 1500 32 || fail "bert_tool make"
cp "$S/tests/tokenizers/fixtures/bert_uncased.json" bert/tokenizer.json
"$E" --model bert "the quick brown fox" "" "hello world" >out.txt 2>err.txt || fail "operands: exit $?"
[ "$(wc -l <out.txt)" -eq 3 ] || fail "not 3 lines"
grep -q '^{"text": "the quick brown fox", "embedding": \[' out.txt || fail "no first line"
n=$(sed -n '1s/.*"embedding": \[\(.*\)\]}$/\1/p' out.txt | tr ',' '\n' | wc -l)
[ "$n" -eq 24 ] || fail "$n values, not 24"
printf 'the quick brown fox\n\nhello world\n' >in.txt
"$E" --model bert --input in.txt --batch 2 >out2.txt 2>err.txt || fail "--input: exit $?"
cmp -s out.txt out2.txt || fail "--input and operands differ"
"$E" --model bert --normalize "hello world" >out.txt 2>err.txt || fail "--normalize: exit $?"
sed -n 's/.*"embedding": \[\(.*\)\]}$/\1/p' out.txt | tr ',' '\n' |
  awk '{ s += $1 * $1 } END { if (s < 0.99999 || s > 1.00001) exit 1 }' || fail "--normalize: not a unit vector"
"$E" --model bert --format safetensors --out e.safetensors "a" "b c" 2>err.txt || fail "safetensors: exit $?"
[ -s e.safetensors ] || fail "no safetensors file"
# refusals
"$B/tests/hf_tool" make llama llama 1 || fail "hf_tool make"
cp bert/tokenizer.json llama/
"$E" --model llama "x" >out.txt 2>err.txt; [ $? -eq 2 ] || fail "decoder-only: exit status not 2"
grep -q "decoder-only" err.txt || fail "decoder-only: no message"
"$E" --model bert >out.txt 2>err.txt; [ $? -eq 2 ] || fail "no texts: exit status not 2"
"$E" --model bert --format safetensors "x" >out.txt 2>err.txt; [ $? -eq 2 ] || fail "safetensors without --out"
"$B/tests/bert_tool" make small 3 0 || fail "bert_tool make small"
cp bert/tokenizer.json small/
"$E" --model small "the quick brown fox" >out.txt 2>err.txt; [ $? -eq 1 ] || fail "another model's tokenizer: not 1"
grep -q "the tokenizer is not this model's" err.txt || fail "another model's tokenizer: no message"
rm small/tokenizer.json
"$E" --model small "x" >out.txt 2>err.txt; [ $? -eq 1 ] || fail "no tokenizer: exit status not 1"
grep -q "tokenizer" err.txt || fail "no tokenizer: no message"
echo "embed_test: ok"
