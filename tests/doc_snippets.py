#!/usr/bin/python3
"""tests/doc_snippets.py: compiles the C snippets of the docs, so that they
cannot rot (ctest doc_snippets; docs/testing.md, "Doc snippets").

Every ```c block of each markdown file given must be preceded (on the line
just above it) by a marker saying how it is compiled:

    <!-- snippet: file -->          file scope, in the doc's program
    <!-- snippet: body CONTEXT -->  a statement list, the body of a function
                                    whose locals are DOC_CONTEXT_<CONTEXT>
    <!-- snippet: none REASON -->   not compiled (say why: output, pseudo-code)

A doc's snippets make one translation unit: tests/doc_snippets/<doc>.h (the
reader's own names the doc leaves out: a model type, a TRY macro, ...), then
its file-scope snippets in order (a later one may use an earlier one's
names, as the reader would), then each body snippet in a function of its
own. The unit is compiled with the installed headers' include path
(<libtensor/...>) and the warnings that catch a snippet that would not
build: undeclared functions, wrong pointer types, redefinitions. Nothing is
linked or run. A ```c block without a marker fails the test, so a new
snippet cannot skip it.

Usage: doc_snippets.py CC SOURCE_DIR WORK_DIR DOC.md...
Exit status 0 when every unit compiles, 1 otherwise (printing the unit with
line numbers around the first errors).
"""
import os
import re
import subprocess
import sys

MARK = re.compile(r"^<!--\s*snippet:\s*(file|body|none)\b\s*([A-Za-z0-9_]*)?.*-->\s*$")

WARNINGS = ["-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-unused-variable",
            "-Wno-unused-function", "-Wno-unused-but-set-variable", "-Wno-missing-field-initializers",
            "-Werror=implicit-function-declaration", "-Werror=incompatible-pointer-types",
            "-Werror=int-conversion", "-Werror=implicit-int", "-Werror=return-type",
            "-Werror=discarded-qualifiers", "-Werror=format", "-Werror=uninitialized"]


def snippets(path):
    """[(line, kind, context, text)] of the doc's ```c blocks; errors for unmarked ones."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, errors, i = [], [], 0
    while i < len(lines):
        if lines[i].strip() == "```c":
            m = MARK.match(lines[i - 1].strip()) if i > 0 else None
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            if j == len(lines):
                errors.append(f"{path}:{i + 1}: a ```c block that never closes")
                break
            if not m:
                errors.append(f"{path}:{i + 1}: a ```c block without a '<!-- snippet: file|body CONTEXT|none "
                              "REASON -->' line above it")
            elif m.group(1) == "body" and not m.group(2):
                errors.append(f"{path}:{i + 1}: 'snippet: body' needs a context name")
            else:
                out.append((i + 2, m.group(1), m.group(2), "\n".join(lines[i + 1:j])))
            i = j
        i += 1
    return out, errors


def unit(doc, src, parts):
    name = os.path.splitext(os.path.basename(doc))[0]
    text = [f'#include "doc_snippets/{name}.h" /* the names the doc leaves to the reader */']
    bodies = 0
    for line, kind, ctx, body in [p for p in parts if p[1] == "file"] + [p for p in parts if p[1] == "body"]:
        text.append(f'#line {line} "{doc}"')
        if kind == "file":
            text.append(body)
        else:  # leading #include lines go to file scope, the rest into the function
            rows = body.split("\n")
            k = 0
            while k < len(rows) and (rows[k].startswith("#include") or not rows[k].strip()):
                k += 1
            text.extend(rows[:k])
            bodies += 1
            text.append(f"static int doc_snippet_{bodies}(void) {{ DOC_CONTEXT_{ctx}")
            text.append(f'#line {line + k} "{doc}"')
            text.append("\n".join(rows[k:]))
            text.append("return 0; }")
    return "\n".join(text) + "\n"


def main():
    if len(sys.argv) < 5:
        print(__doc__)
        return 2
    cc, src, work = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(work, exist_ok=True)
    inc = os.path.join(work, "include")
    os.makedirs(inc, exist_ok=True)
    link = os.path.join(inc, "libtensor")
    if not os.path.islink(link):
        os.symlink(os.path.abspath(src), link)
    failed = 0
    for doc in sys.argv[4:]:
        parts, errors = snippets(doc)
        for e in errors:
            print(e)
        failed += len(errors)
        code = unit(os.path.relpath(doc, src) if doc.startswith(src) else doc, src, parts)
        base = os.path.splitext(os.path.basename(doc))[0]
        cfile = os.path.join(work, f"{base}_snippets.c")
        with open(cfile, "w", encoding="utf-8") as f:
            f.write(code)
        cmd = [cc, *WARNINGS, "-I", inc, "-I", src, "-I", os.path.join(src, "tests"), "-c", cfile, "-o", os.devnull]
        r = subprocess.run(cmd, capture_output=True, text=True)
        n = {k: sum(1 for p in parts if p[1] == k) for k in ("file", "body", "none")}
        if r.returncode != 0:
            failed += 1
            print(f"{doc}: its snippets do not compile ({cfile}):\n{r.stderr}")
        else:
            print(f"{doc}: {n['file']} file-scope and {n['body']} body snippets compile ({n['none']} marked none)"
                  + (f"\n{r.stderr}" if r.stderr else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
