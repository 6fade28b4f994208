#!/bin/sh
# tests/api_exports_test.sh: the shared libraries export their API and
# nothing else (tensor/tensor.h, "Exports"): every lt_<name> function the
# static archive defines is exported by the shared library built from the
# same objects, and no lt__<name> (internal) symbol is.
#   api_exports_test.sh STATIC.a SHARED.so [STATIC.a SHARED.so ...]
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
while [ $# -ge 2 ]; do
  nm --defined-only "$1" 2>/dev/null | awk '$2 == "T" && $3 ~ /^lt_[a-z0-9]/ { print $3 }' | sort -u > "$tmp/defined"
  nm -D --defined-only "$2" | awk '{ print $NF }' | sort -u > "$tmp/exported"
  grep '^lt__' "$tmp/exported" > "$tmp/internal" || true
  comm -23 "$tmp/defined" "$tmp/exported" > "$tmp/missing"
  if [ -s "$tmp/internal" ]; then
    echo "FAIL: $2 exports $(wc -l < "$tmp/internal") internal symbols:" $(cat "$tmp/internal")
    fail=1
  fi
  if [ -s "$tmp/missing" ]; then
    echo "FAIL: $2 does not export $(wc -l < "$tmp/missing") public functions (declare them LT_API):" $(cat "$tmp/missing")
    fail=1
  fi
  echo "$2: $(grep -c '^lt_' "$tmp/exported") lt_ functions exported, $(wc -l < "$tmp/internal") lt__ symbols"
  shift 2
done
exit $fail
