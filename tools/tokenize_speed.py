#!/usr/bin/env python3
"""tools/tokenize_speed.py: tokens per second of the `tokenize` program against the
`tokenizers` library, one thread each (docs/datasets.md "The tokenize program").

    RAYON_NUM_THREADS=1 ~/.cache/libtensor/reference/bin/python tools/tokenize_speed.py \\
        build/tokenize tokenizer.json corpus.txt

CPU times (user + system): the library's encode_batch over the corpus's lines
(best of three), and the whole `tokenize --print-ids` run (loading, reading,
encoding, printing). It also checks that both give the same number of tokens.
"""
import os
import resource
import subprocess
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
from tokenizers import Tokenizer  # noqa: E402


def main():
    prog, tj, corpus = sys.argv[1:4]
    raw = open(corpus, "rb").read()
    lines = raw.decode("utf-8", errors="replace").split("\n")
    tk = Tokenizer.from_file(tj)
    best = None
    for _ in range(3):
        t = time.process_time()
        encs = tk.encode_batch(lines)
        dt = time.process_time() - t
        best = dt if best is None else min(best, dt)
    n = sum(len(e.ids) for e in encs)
    cbest = None
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run([prog, "--tokenizer-file", tj, "--print-ids"], input=raw, capture_output=True,
                             check=True).stdout
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        dt = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        cbest = dt if cbest is None else min(cbest, dt)
    m = len(out.split())
    print(f"{tj}: tokenizers {n} tokens, {n / best / 1e6:.2f} M tokens/s; tokenize {m} tokens, "
          f"{m / cbest / 1e6:.2f} M tokens/s; ratio {(m / cbest) / (n / best):.1f}x")


if __name__ == "__main__":
    main()
