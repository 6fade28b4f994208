#!/usr/bin/env python3
"""Tokens per second: libtensor's `tokenize` against Hugging Face tokenizers (Rust).

    <reference python> bench/tokenize_bench.py TOKENIZE [--corpus FILE] [--size 10M]
        [--tokenizers gpt2,bert_uncased] [--threads 1,2] [--rounds 3]
    <reference python> bench/tokenize_bench.py --batch BENCH_HF_ENCODE [...]

The corpus is make_corpus.py's (10 MiB by default, generated into a temporary
file unless --corpus names one), one text per line. For each tokenizer of
tests/tokenizers/fixtures/ named and each thread count, in alternating rounds
(C, then Rust, then the next configuration; --rounds of them):

  C     `tokenize --tokenizer-file F --print-ids` with the corpus on standard
        input and its output to a file: the whole process (start, load, read,
        UTF-8 check, encode, print), LT_NUM_THREADS=n (and --threads n when
        tokenize --help offers it);
  Rust  Tokenizer.encode_batch(lines) in a fresh Python process with
        RAYON_NUM_THREADS=n, timing only that call (the lines already decoded
        to str; loading and printing not counted).

With --batch, TOKENIZE is build/bench/bench_hf_encode and the C side is one
call of lt_tokenizer_encode_batch over the lines already in memory, timed
alone as the Rust side is (LT_NUM_THREADS=n).

tokens = the ids the library gives, special tokens included; the C output's
count is checked against it. Prints the median tokens/s of each side and their
ratio (C / Rust) as a Markdown table. It is one measurement on a shared
machine: run it on an otherwise idle one for figures to keep.
"""
import argparse
import os
import statistics
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
t0 = time.perf_counter()
enc = tok.encode_batch(texts, add_special_tokens=True)
dt = time.perf_counter() - t0
print(dt, sum(len(e.ids) for e in enc))
"""


def run_c(tokenize, path, corpus, threads, thread_flag):
    env = dict(os.environ, LT_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    args = [tokenize, "--tokenizer-file", path, "--print-ids"]
    if thread_flag:
        args += [thread_flag, str(threads)]
    with open(corpus, "rb") as fin, tempfile.TemporaryFile() as fout:
        t0 = time.perf_counter()
        p = subprocess.run(args, stdin=fin, stdout=fout, stderr=subprocess.PIPE, env=env)
        dt = time.perf_counter() - t0
        if p.returncode != 0:
            sys.exit(f"tokenize failed: {p.stderr.decode(errors='replace')[:400]}")
        fout.seek(0)
        ntok = sum(len(line.split()) for line in fout)
    return dt, ntok


def run_c_batch(bench, path, corpus, threads):
    """bench_hf_encode: (seconds of the lt_tokenizer_encode_batch call, tokens)."""
    env = dict(os.environ, LT_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    p = subprocess.run([bench, path, corpus], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    if p.returncode != 0:
        sys.exit(f"bench_hf_encode failed: {p.stderr.decode(errors='replace')[:400]}")
    dt, ntok = p.stdout.split()
    return float(dt), int(ntok)


def run_rust(python, path, corpus, threads):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true")
    p = subprocess.run([python, "-c", RUST, path, corpus], stdout=subprocess.PIPE, env=env, check=True)
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
    a = ap.parse_args()
    corpus = a.corpus
    if not corpus:
        fd, corpus = tempfile.mkstemp(suffix=".txt")
        with os.fdopen(fd, "wb") as f:
            f.write(b"".join(x + b"\n" for x in make_corpus.corpus_lines(make_corpus.parse_size(a.size))))
    if a.batch:
        thread_flag = "LT_NUM_THREADS"
    else:
        helptext = subprocess.run([a.tokenize, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT).stdout
        thread_flag = "--threads" if b"--threads" in helptext else None
    configs = [(name, int(n)) for name in a.tokenizers.split(",") for n in a.threads.split(",")]
    times = {c: {"c": [], "rust": []} for c in configs}
    tokens = {}
    for r in range(a.rounds):
        for name, n in configs:
            path = os.path.join(TOKDIR, "fixtures", name + ".json")
            if a.batch:
                dt_c, nt_c = run_c_batch(a.tokenize, path, corpus, n)
            else:
                dt_c, nt_c = run_c(a.tokenize, path, corpus, n, thread_flag)
            dt_r, nt_r = run_rust(sys.executable, path, corpus, n)
            if nt_c != nt_r:
                print(f"warning: {name}: tokenize gave {nt_c} tokens, tokenizers {nt_r}", file=sys.stderr)
            tokens[name] = nt_r
            times[(name, n)]["c"].append(dt_c)
            times[(name, n)]["rust"].append(dt_r)
            print(f"round {r + 1} {name} threads {n}: C {dt_c:.3f} s, Rust {dt_r:.3f} s", file=sys.stderr)
    size = os.path.getsize(corpus)
    print(f"corpus: {size} bytes; median of {a.rounds} alternating rounds; tokens/s (millions)")
    if not thread_flag:
        print("(tokenize --help names no --threads: C's rows differ only by LT_NUM_THREADS)")
    print()
    c_name = "encode_batch (C)" if a.batch else "tokenize (C)"
    print(f"| tokenizer | tokens | threads | {c_name} | tokenizers (Rust) | C / Rust |")
    print("|---|---|---|---|---|---|")
    for name, n in configs:
        c = statistics.median(times[(name, n)]["c"])
        rs = statistics.median(times[(name, n)]["rust"])
        t = tokens[name]
        print(f"| {name} | {t} | {n} | {t / c / 1e6:.2f} | {t / rs / 1e6:.2f} | {rs / c:.2f}x |")
    if not a.corpus:
        os.unlink(corpus)


if __name__ == "__main__":
    main()
