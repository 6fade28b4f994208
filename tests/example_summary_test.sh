#!/bin/sh
# tests/example_summary_test.sh FACTOR EXE [ARGS...]: runs an example whose
# last line is "summary: ... first_loss=A last_loss=B ...", prints its
# output, and fails unless it exits 0 and B < FACTOR * A (the loss fell).
# Used by example_gru_lm and example_custom_op (tests/CMakeLists.txt).
set -eu
factor=$1; shift
out=$("$@" 2>&1) || { echo "$out"; echo "example_summary_test: FAILED: $1 exited with an error"; exit 1; }
echo "$out"
echo "$out" | grep '^summary:' | tail -n1 | awk -v f="$factor" '{
  for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
  if (!(v["last_loss"] < f * v["first_loss"])) {
    print "example_summary_test: FAILED: last_loss " v["last_loss"] " is not below " f " x first_loss " v["first_loss"]
    exit 1
  }
  print "example_summary_test: the loss fell from " v["first_loss"] " to " v["last_loss"]
}'
