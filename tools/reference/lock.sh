#!/bin/sh
# tools/reference/lock.sh: re-resolves requirements.in into a fresh venv and
# writes its `pip freeze` to requirements.txt (the lock ./do.sh reference
# installs). Run it only to move the reference to newer versions, then rerun
# the reference tests and benchmarks.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
/usr/bin/python3 -m venv "$tmp/venv"
# llama-cpp-python's wheel, when ./do.sh reference has built it (else pip builds llama.cpp here)
wheels="${LT_REFERENCE_DIR:-${HOME:-/root}/.cache/libtensor/reference}/wheels"
"$tmp/venv/bin/pip" install -q --find-links "$wheels" -r "$here/requirements.in"
{
  echo "# The reference environment's lock: \`pip freeze\` of requirements.in, made by"
  echo "# tools/reference/lock.sh on $(date -u +%Y-%m-%d) with $(/usr/bin/python3 --version). ./do.sh reference installs it."
  "$tmp/venv/bin/pip" freeze
} >"$here/requirements.txt.new"
mv "$here/requirements.txt.new" "$here/requirements.txt"
