#!/usr/bin/env python3
"""Tokens per second: libtensor's `tokenize` against Hugging Face tokenizers (Rust).

    <reference python> bench/tokenize_bench.py TOKENIZE [--corpus FILE] [--size 10M]
        [--tokenizers gpt2,bert_uncased] [--threads 1,2] [--rounds 3] [--mode lines|shards]
        [--clock wall|cpu]
    <reference python> bench/tokenize_bench.py --batch BENCH_HF_ENCODE [...]

The one tokenizer speed script (docs/datasets.md "The tokenize program"). The
corpus is make_corpus.py's (10 MiB by default, generated into a temporary
file unless --corpus names one), one text per line. For each tokenizer of
tests/tokenizers/fixtures/ named (or a path to a tokenizer.json) and each
thread count, in alternating rounds (C, then Rust, then the next
configuration; --rounds of them):

  C     --mode lines: `tokenize --tokenizer-file F --print-ids` with the
        corpus on standard input and its output to a file: the whole process
        (start, load, read, UTF-8 check, encode, print); line mode is one
        thread, so only thread count 1 is run;
        --mode shards: `tokenize --tokenizer-file F --out DIR --jsonl-field
        text --val-fraction 0 --doc-token none --threads n` on the corpus as
        JSON Lines (one record a line): the whole process (load, read, parse,
        encode on n threads, write the shards); tokens counted from the
        shards' headers;
  Rust  Tokenizer.encode_batch(lines) in a fresh Python process with
        RAYON_NUM_THREADS=n, timing only that call (the lines already decoded
        to str; loading and printing not counted); without special tokens in
        shard mode (as tokenize --out encodes).

With --batch, TOKENIZE is build/bench/bench_hf_encode and the C side is one
call of lt_tokenizer_encode_batch over the lines already in memory, timed
alone as the Rust side is (LT_NUM_THREADS=n).


--clock cpu times CPU seconds (user + system: the child's rusage for C,
time.process_time() for Rust) instead of wall time: on a machine shared with
other work the CPU time of one thread is steadier than the wall time.

tokens = the ids the library gives; the C output's count is checked against
it. Prints the median tokens/s of each side and their ratio (C / Rust) as a
Markdown table. It is one measurement on a shared machine: run it on an
otherwise idle one for figures to keep.
"""
import argparse
import glob
import json
import os
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOKDIR = os.path.join(HERE, "..", "tests", "tokenizers")
sys.path.insert(0, TOKDIR)
import make_corpus  # noqa: E402

RUST = r"""
import sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
with open(sys.argv[2], "rb") as f:
    lines = f.read().split(b"\n")
if lines and lines[-1] == b"":
    lines.pop()
texts = [x.decode("utf-8", errors="replace") for x in lines]
clock = time.process_time if sys.argv[4] == "cpu" else time.perf_counter
if tok.truncation and sys.argv[3] == "0":
    tok.no_truncation()
t0 = clock()
enc = tok.encode_batch(texts, add_special_tokens=sys.argv[3] == "1")
dt = clock() - t0
print(dt, sum(len(e.ids) for e in enc))
"""


def timed(args, clock, **kw):
    """Runs args; (seconds, the CompletedProcess): wall time or the child's CPU time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(args, stderr=subprocess.PIPE, **kw)
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if clock == "cpu":
        dt = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if p.returncode != 0:
        sys.exit(f"{args[0]} failed: {p.stderr.decode(errors='replace')[:400]}")
    return dt, p


def run_c(tokenize, path, corpus, threads, mode, clock):
    env = dict(os.environ, LT_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    if mode == "lines":
        with open(corpus, "rb") as fin, tempfile.TemporaryFile() as fout:
            dt, _ = timed([tokenize, "--tokenizer-file", path, "--print-ids"], clock, stdin=fin, stdout=fout, env=env)
            fout.seek(0)
            return dt, sum(len(line.split()) for line in fout)
    out = tempfile.mkdtemp(prefix="lt_tokbench_")
    try:
        dt, _ = timed([tokenize, "--tokenizer-file", path, "--out", out, "--jsonl-field", "text", "--val-fraction",
                       "0", "--doc-token", "none", "--threads", str(threads), corpus + ".jsonl"], clock,
                      stdout=subprocess.DEVNULL, env=env)
        ntok = 0
        for p in glob.glob(os.path.join(out, "train_*.bin")):
            with open(p, "rb") as f:
                ntok += struct.unpack("<3i", f.read(12))[2]
        return dt, ntok
    finally:
        shutil.rmtree(out)


def run_c_batch(bench, path, corpus, threads):
    """bench_hf_encode: (seconds of the lt_tokenizer_encode_batch call, tokens)."""
    env = dict(os.environ, LT_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    p = subprocess.run([bench, path, corpus], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    if p.returncode != 0:
        sys.exit(f"bench_hf_encode failed: {p.stderr.decode(errors='replace')[:400]}")
    dt, ntok = p.stdout.split()
    return float(dt), int(ntok)


def run_rust(python, path, corpus, threads, mode, clock):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true")
    special = "1" if mode == "lines" else "0"
    p = subprocess.run([python, "-c", RUST, path, corpus, special, clock], stdout=subprocess.PIPE, env=env,
                       check=True)
    dt, ntok = p.stdout.split()
    return float(dt), int(ntok)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tokenize")
    ap.add_argument("--corpus")
    ap.add_argument("--size", default="10M")
    ap.add_argument("--tokenizers", default="gpt2,bert_uncased")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", action="store_true", help="TOKENIZE is bench_hf_encode: time the batch call alone")
    ap.add_argument("--mode", choices=("lines", "shards"), default="lines")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    a = ap.parse_args()
    corpus = a.corpus
    if not corpus:
        fd, corpus = tempfile.mkstemp(suffix=".txt")
        with os.fdopen(fd, "wb") as f:
            f.write(b"".join(x + b"\n" for x in make_corpus.corpus_lines(make_corpus.parse_size(a.size))))
    if a.mode == "shards":  # the same lines as JSON Lines records
        with open(corpus, "rb") as fin, open(corpus + ".jsonl", "w") as fout:
            for line in fin.read().split(b"\n")[:-1]:
                fout.write(json.dumps({"text": line.decode("utf-8", errors="replace")}) + "\n")
    threads = [int(n) for n in a.threads.split(",")] if a.mode == "shards" or a.batch else [1]
    configs = [(name, n) for name in a.tokenizers.split(",") for n in threads]
    times = {c: {"c": [], "rust": []} for c in configs}
    tokens = {}
    for r in range(a.rounds):
        for name, n in configs:
            path = name if name.endswith(".json") else os.path.join(TOKDIR, "fixtures", name + ".json")
            if a.batch:
                dt_c, nt_c = run_c_batch(a.tokenize, path, corpus, n)
            else:
                dt_c, nt_c = run_c(a.tokenize, path, corpus, n, a.mode, a.clock)
            dt_r, nt_r = run_rust(sys.executable, path, corpus, n, a.mode, a.clock)
            if nt_c != nt_r:
                print(f"warning: {name}: tokenize gave {nt_c} tokens, tokenizers {nt_r}", file=sys.stderr)
            tokens[name] = nt_r
            times[(name, n)]["c"].append(dt_c)
            times[(name, n)]["rust"].append(dt_r)
            print(f"round {r + 1} {name} threads {n}: C {dt_c:.3f} s, Rust {dt_r:.3f} s", file=sys.stderr)
    size = os.path.getsize(corpus)
    print(f"corpus: {size} bytes; mode {a.mode}; {a.clock} time; median of {a.rounds} alternating rounds; "
          f"tokens/s (millions)")
    print()
    c_name = "encode_batch (C)" if a.batch else "tokenize (C)"
    print(f"| tokenizer | tokens | threads | {c_name} | tokenizers (Rust) | C / Rust |")
    print("|---|---|---|---|---|---|")
    for name, n in configs:
        c = statistics.median(times[(name, n)]["c"])
        rs = statistics.median(times[(name, n)]["rust"])
        t = tokens[name]
        print(f"| {name} | {t} | {n} | {t / c / 1e6:.2f} | {t / rs / 1e6:.2f} | {rs / c:.2f}x |")
    if a.mode == "shards":
        os.unlink(corpus + ".jsonl")
    if not a.corpus:
        os.unlink(corpus)


if __name__ == "__main__":
    main()
