#!/bin/sh
# tokenize against the expected output of tests/tokenizers/expected/ (written
# by make_expected.py with Hugging Face tokenizers), without Python:
#
#   expected_test.sh TOKENIZE
#
# For each fixture NAME with expected files: --print-ids, --print-ids
# --no-special and --offsets on inputs.txt, --decode and --decode --no-special
# on NAME.ids, each compared byte for byte. Prints one line per fixture and the
# first differing lines of each failing check; exit 1 if any differs, except
# for the fixtures of known_divergent.txt (reported only).
set -u
TOKENIZE=$1
HERE=$(cd "$(dirname "$0")" && pwd)
EXP=$HERE/expected
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0
for json in "$HERE"/fixtures/*.json; do
  name=$(basename "$json" .json)
  [ -f "$EXP/$name.ids" ] || { echo "$name: no expected files (run make_expected.py)"; fail=1; continue; }
  bad=""
  check() {        # check LABEL EXPECTED INPUT ARGS...
    label=$1 want=$2 input=$3
    shift 3
    "$TOKENIZE" --tokenizer-file "$json" "$@" < "$input" > "$TMP/out" 2> "$TMP/err"
    rc=$?
    if [ $rc -ne 0 ]; then
      bad="$bad $label"
      echo "  $name $label: exit status $rc: $(head -c 400 "$TMP/err")"
    elif ! cmp -s "$want" "$TMP/out"; then
      bad="$bad $label"
      echo "  $name $label: differs (< expected, > tokenize; line numbers are inputs.txt's)"
      diff "$want" "$TMP/out" | head -n 8 | cut -c 1-300 | sed 's/^/    /'
    fi
  }
  check ids "$EXP/$name.ids" "$EXP/inputs.txt" --print-ids
  check ids/plain "$EXP/$name.plain.ids" "$EXP/inputs.txt" --print-ids --no-special
  check offsets "$EXP/$name.offsets" "$EXP/inputs.txt" --offsets
  check decode "$EXP/$name.decode" "$EXP/$name.ids" --decode
  check decode/keep "$EXP/$name.decode-keep" "$EXP/$name.ids" --decode --no-special
  known=$(sed -n "s/^$name  *\([a-z-]*\).*/\1/p" "$HERE/known_divergent.txt")
  if [ -n "$bad" ] && [ -n "$known" ]; then
    echo "$name: $(wc -l < "$EXP/inputs.txt") strings, differs:$bad (known divergence: $known; known_divergent.txt)"
  elif [ -n "$bad" ]; then
    echo "$name: $(wc -l < "$EXP/inputs.txt") strings, FAILED:$bad"
    fail=1
  else
    echo "$name: $(wc -l < "$EXP/inputs.txt") strings, 5 checks identical"
  fi
done
exit $fail
