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
#   tools/include_graph.sh cycles    include circles, one per line: modules
#                                    that include each other, then files
#
# A module is the first path component (tensor, autograd, nn, ...); files at
# the root count as "root". docs/architecture.md is written from its output,
# and the ctest architecture_doc checks that it still is.
#
# Circles (cycles). Modules: the library's modules that include each other's
# files (.def op tables left out: they are data every module lists in
# op_registry.h). Files: units that include each other's headers, where a
# unit is a .c file with its own headers (x.c, x.h, x_internal.h); a module's
# main header (tensor/tensor.h, nn/nn.h, ...: named after its folder) and any
# header without a .c of its own belong to whoever includes them.
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
  cycles)
    edges | python3 -c '
import collections, os, sys
LIB = {"tensor", "autograd", "nn", "generate", "datasets", "checkpoint", "train", "dist", "models"}
g = collections.defaultdict(set)
for line in sys.stdin:
    a, b = line.split()
    if not b.endswith(".def"): g[a].add(b)
files = set(g) | {b for bs in g.values() for b in bs}
def mod(f): return f.split("/")[0] if "/" in f else "root"
def stem(f):
    s = os.path.splitext(f)[0]
    return s[:-len("_internal")] if s.endswith("_internal") else s
units = {stem(f) for f in files if f.endswith(".c")}
def unit_of(f):
    d, base = os.path.split(stem(f))
    if f.endswith(".h") and base == os.path.basename(d): return None  # a main header
    return stem(f) if stem(f) in units else None
def reach(f, seen):  # the units f depends on, through headers of nobody
    out = set()
    for h in g.get(f, ()):
        u = unit_of(h)
        if u: out.add(u)
        elif h not in seen:
            seen.add(h); out |= reach(h, seen)
    return out
dep = collections.defaultdict(set)
for f in files:
    u = unit_of(f)
    if u and mod(f) in LIB: dep[u] |= {d for d in reach(f, set()) if mod(d) == mod(u) and d != u}
mdep = collections.defaultdict(set)
for f, hs in g.items():
    for h in hs:
        if mod(f) in LIB and mod(h) in LIB and mod(f) != mod(h): mdep[mod(f)].add(mod(h))
def sccs(succ):
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
        for w in sorted(succ.get(v, ())):
            if w not in index: visit(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            c = []
            while True:
                w = stack.pop(); on.discard(w); c.append(w)
                if w == v: break
            if len(c) > 1: out.append(sorted(c))
    for v in sorted(succ):
        if v not in index: visit(v)
    return sorted(out)
for c in sccs(mdep): print("modules: " + " <-> ".join(c))
for c in sccs(dep): print("files: " + " <-> ".join(c))
' ;;
  *) echo "usage: $0 [modules|internal|files|cycles]" >&2; exit 2 ;;
esac
