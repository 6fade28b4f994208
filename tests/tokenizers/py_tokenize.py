#!/usr/bin/env python3
"""The `tokenize` command line, written over Hugging Face tokenizers.

    <reference python> tests/tokenizers/py_tokenize.py --tokenizer-file FILE
        (--print-ids | --offsets | --decode) [--no-special] [--whole]

It is the contract the C `tokenize` is held to, executable: the conformance
suite run against it must report zero mismatches (a check of the suite
itself), and bench/tokenize_bench.py times the library through the same
lines. Standard input is read as lines of raw bytes ("\\n" ends a line and is
not part of it); each line is line.decode("utf-8", errors="replace"):

  --print-ids   the ids of encode(line), space-separated, one line out per line in
  --offsets     id:start:end per token, start/end BYTE offsets into the raw line
  --decode      each line in is space-separated ids; prints decode(ids) (special
                tokens skipped), or decode(ids, skip_special_tokens=False)
                under --no-special
  --no-special  encode without the post-processor's special tokens; decode
                without dropping them
  --whole       all of standard input is one text (for texts holding "\\n")
"""
import argparse
import os
import sys

os.environ.setdefault("RAYON_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tokenizers import Tokenizer  # noqa: E402

import test_conformance  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer-file", required=True)
    ap.add_argument("--print-ids", action="store_true")
    ap.add_argument("--offsets", action="store_true")
    ap.add_argument("--decode", action="store_true")
    ap.add_argument("--no-special", action="store_true")
    ap.add_argument("--whole", action="store_true")
    a = ap.parse_args()
    tok = Tokenizer.from_file(a.tokenizer_file)
    data = sys.stdin.buffer.read()
    if a.whole:
        lines = [data]
    else:
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
    out = []
    if a.decode:
        seqs = [[int(x) for x in line.split()] for line in lines]
        for s in tok.decode_batch(seqs, skip_special_tokens=not a.no_special):
            out.append(s.encode("utf-8"))
    else:
        decoded = [test_conformance.decode_line(x) for x in lines]
        encs = tok.encode_batch([t for t, _ in decoded], add_special_tokens=not a.no_special)
        for e, (_, st) in zip(encs, decoded):
            if a.offsets:
                out.append(" ".join(f"{i}:{st[s]}:{st[t]}" for i, (s, t) in zip(e.ids, e.offsets)).encode())
            else:
                out.append(" ".join(map(str, e.ids)).encode())
    sys.stdout.buffer.write(b"".join(x + b"\n" for x in out))


if __name__ == "__main__":
    main()
