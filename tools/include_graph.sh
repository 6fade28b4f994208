#!/bin/sh
# tools/include_graph.sh: the include graph of libtensor, computed from the
# sources (only project headers, "dir/file.h" includes; system headers are
# left out). Run from anywhere; prints plain text.
#
#   tools/include_graph.sh modules   module -> modules it includes from (default)
#   tools/include_graph.sh internal  each internal header (*internal.h,
#                                    op_registry.h, tensor/vmath.h)
#                                    and how many files include it
#   tools/include_graph.sh files     every "file -> included header" edge
#
# A module is the first path component (tensor, autograd, nn, ...); files at
# the root count as "root". docs/architecture.md is written from its output.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
what=${1:-modules}

edges() {
  find . -path ./build -prune -o -path './build-*' -prune -o -path ./.git -prune -o \
    \( -name '*.c' -o -name '*.h' -o -name '*.def' -o -name '*.inc' \) -print |
    sed 's|^\./||' | sort | while read -r f; do
      sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" |
        while read -r h; do
          if [ -f "$h" ]; then printf "%s %s\n" "$f" "$h"; fi
        done
    done
}

modof() {
  awk '{ m = $1; sub(/\/.*/, "", m); if ($1 !~ /\//) m = "root";
         n = $2; sub(/\/.*/, "", n); if ($2 !~ /\//) n = "root";
         print m, n }'
}

case "$what" in
  files) edges ;;
  modules)
    edges | modof | awk '$1 != $2' | sort -u |
      awk '{ a[$1] = a[$1] (a[$1] ? ", " : "") $2 } END { for (m in a) print m " -> " a[m] }' | sort ;;
  internal)
    edges | awk '$2 ~ /internal\.h$|op_registry\.h$|vmath\.h$/ { n[$2]++ }
                 END { for (h in n) printf "%4d  %s\n", n[h], h }' | sort -k2 ;;
  *) echo "usage: $0 [modules|internal|files]" >&2; exit 2 ;;
esac
