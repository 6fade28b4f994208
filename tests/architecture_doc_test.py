#!/usr/bin/env python3
"""tests/architecture_doc_test.py: docs/architecture.md says what the sources
do. The blocks after "<!-- include_graph modules -->" and "<!-- include_graph
cycles -->" must equal tools/include_graph.sh's output, each row of the
internal-header table must give the count `include_graph.sh internal` gives,
and the tables after "<!-- paths -->" and "<!-- settings -->" must list the
lines of tensor/paths.def (family, path and switch; variable), no more.

    architecture_doc_test.py SOURCE_DIR
"""
import re
import subprocess
import sys

root = sys.argv[1]
doc = open(f"{root}/docs/architecture.md", encoding="utf-8").read()


def tool(mode):
    return subprocess.run(["sh", f"{root}/tools/include_graph.sh", mode], check=True,
                          capture_output=True, text=True).stdout.strip()


failures = []
for mode in ("modules", "cycles"):
    m = re.search(r"<!-- include_graph %s -->\n```\n(.*?)```" % mode, doc, re.S)
    if not m:
        failures.append(f"docs/architecture.md has no '<!-- include_graph {mode} -->' block")
        continue
    want, have = tool(mode), m.group(1).strip()
    if want != have:
        failures.append(f"the {mode} block differs from tools/include_graph.sh {mode}:\n"
                        f"--- docs/architecture.md\n{have}\n--- tool\n{want}")

counts = {}
for line in tool("internal").splitlines():
    n, h = line.split()
    counts[h] = int(n)
rows = re.findall(r"^\| `([^`]+)` \|.*\| (\d+) \|$", doc, re.M)
listed = set()
for h, n in rows:
    if h not in counts:
        continue
    listed.add(h)
    if counts[h] != int(n):
        failures.append(f"internal header table: {h} is included by {counts[h]} files, the doc says {n}")
for h in sorted(set(counts) - listed):
    failures.append(f"internal header table: {h} ({counts[h]} files) has no row")

defs = open(f"{root}/tensor/paths.def", encoding="utf-8").read()
want_paths = re.findall(r'^\s*X\((\w+), (\w+), "([^"]+)"', defs, re.M)
want_settings = re.findall(r'^\s*S\(\w+, "([^"]+)"', defs, re.M)
if not want_paths or not want_settings:
    failures.append("tensor/paths.def: no X(...) or S(...) lines found")


def table(marker):
    m = re.search(r"<!-- %s -->\n((?:\|.*\n)+)" % marker, doc)
    if not m:
        failures.append(f"docs/architecture.md has no '<!-- {marker} -->' table")
        return []
    return [[c.strip().strip("`") for c in line.strip().strip("|").split("|")]
            for line in m.group(1).splitlines()[2:]]


have_paths = [tuple(r[:3]) for r in table("paths")]
for w in want_paths:
    if w not in have_paths:
        failures.append("paths table: no row for %s %s %s (tensor/paths.def)" % w)
for h in have_paths:
    if h not in want_paths:
        failures.append("paths table: row %s %s %s is not in tensor/paths.def" % h)
have_settings = [r[0] for r in table("settings")]
for w in want_settings:
    if w not in have_settings:
        failures.append(f"settings table: no row for {w} (tensor/paths.def)")
for h in have_settings:
    if h not in want_settings:
        failures.append(f"settings table: row {h} is not in tensor/paths.def")

for f in failures:
    print("FAIL:", f)
print(f"architecture_doc: {len(failures)} difference(s)")
sys.exit(1 if failures else 0)
