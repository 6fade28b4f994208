#!/usr/bin/env python3
"""Expected `tokenize` output for the fixtures, for tests without the reference environment.

    <reference python> tests/tokenizers/make_expected.py

writes tests/tokenizers/expected/inputs.txt (make_corpus's EDGE_LINES up to
100 bytes and 40 generated lines cut at 100 bytes, seed 7: no Debian text, so
the file is the same on every machine; about 0.5 MB of expected output) and, for each tests/tokenizers/fixtures/NAME.json, what
`tokenize --tokenizer-file NAME.json` must print for it, as Hugging Face
tokenizers computes it (the contract of py_tokenize.py):

  NAME.ids          --print-ids on inputs.txt
  NAME.plain.ids    --print-ids --no-special on inputs.txt
  NAME.offsets      --offsets on inputs.txt (byte offsets)
  NAME.decode       --decode on NAME.ids: decode(ids), special tokens skipped
  NAME.decode-keep  --decode --no-special on NAME.ids: decode(ids, skip_special_tokens=False)

tests/tokenizers/expected_test.sh compares the C program's output with them
(ctest tokenizers_expected, every build type, sanitizers included). Rerun
this script after make_tokenizers.py; two runs give identical files.
"""
import os
import random
import sys

os.environ["RAYON_NUM_THREADS"] = "1"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from tokenizers import Tokenizer  # noqa: E402

import make_corpus  # noqa: E402
import test_conformance  # noqa: E402


def inputs():
    rng = random.Random(7)
    lines = [x for x in make_corpus.EDGE_LINES if len(x) <= 100]
    for _ in range(40):
        x = make_corpus.gen_line(rng)
        if isinstance(x, str):
            x = x.encode("utf-8")
        lines.append(x.replace(b"\n", b" ")[:100])
    return lines


def write(path, rows):
    with open(path, "wb") as f:
        f.write(b"".join(r + b"\n" for r in rows))


def main():
    out = os.path.join(HERE, "expected")
    os.makedirs(out, exist_ok=True)
    lines = inputs()
    write(os.path.join(out, "inputs.txt"), lines)
    decoded = [test_conformance.decode_line(x) for x in lines]
    texts = [t for t, _ in decoded]
    total = 0
    for name, path in test_conformance.fixture_paths():
        if name == "minilm":                          # not in the tree (the package holds it)
            continue
        tok = Tokenizer.from_file(path)
        enc = tok.encode_batch(texts, add_special_tokens=True)
        plain = tok.encode_batch(texts, add_special_tokens=False)
        ids = [" ".join(map(str, e.ids)).encode() for e in enc]
        files = {
            "ids": ids,
            "plain.ids": [" ".join(map(str, e.ids)).encode() for e in plain],
            "offsets": [" ".join(f"{i}:{st[s]}:{st[t]}" for i, (s, t) in zip(e.ids, e.offsets)).encode()
                        for e, (_, st) in zip(enc, decoded)],
            "decode": [s.encode() for s in tok.decode_batch([e.ids for e in enc], skip_special_tokens=True)],
            "decode-keep": [s.encode() for s in tok.decode_batch([e.ids for e in enc], skip_special_tokens=False)],
        }
        for suffix, rows in files.items():
            p = os.path.join(out, f"{name}.{suffix}")
            write(p, rows)
            total += os.path.getsize(p)
    print(f"{out}: {len(lines)} inputs, {total} bytes of expected output")


if __name__ == "__main__":
    main()
