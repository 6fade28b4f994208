#!/usr/bin/env python3
"""Sentence embeddings per second: libtensor's `embed` against
sentence-transformers (PyTorch 2.x) on all-MiniLM-L6-v2, the same sentences.

    <reference python> bench/embed_bench.py EMBED [--n 256] [--batches 1,8,64] [--threads 2] [--rounds 3]

The sentences are tests/reference/test_hf_bert.py's (Debian's license texts and
variations; the first --n). For each batch size, in alternating rounds (C,
then PyTorch, then the next batch size; --rounds of them):

  C        `embed --model DIR --input FILE --batch B --format safetensors --time`,
           LT_NUM_THREADS=n: the seconds it prints for tokenizing, batching and
           the forward passes (the model's load not counted);
  PyTorch  SentenceTransformer.encode(sentences, batch_size=B) in this process
           (loaded once, one warm-up call), torch.set_num_threads(n): the call.

Both sort by length and pad each batch to its longest; both run with
OMP_WAIT_POLICY=PASSIVE (set before torch is imported). Prints the median
sentences/s of each and their ratio (C / PyTorch) as a Markdown table, and
checks that the two agree (worst cosine). One measurement on a shared machine:
say so when quoting it, and rerun on an idle one for figures to keep.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

# Both sides' OpenMP threads sleep when idle instead of spinning (./do.sh run sets the same for programs):
# on a shared machine a spinning pool is descheduled mid-step and PyTorch's small batches slow down 50-100x.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
from test_hf_bert import minilm_dir, sentences  # noqa: E402  (also the offline settings)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402


def run_c(embed, d, src, out, batch, threads):
    env = dict(os.environ, LT_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE")
    r = subprocess.run([embed, "--model", d, "--input", src, "--batch", str(batch), "--format", "safetensors",
                        "--out", out, "--time"], env=env, check=True, capture_output=True, text=True)
    return float(re.search(r"in ([0-9.]+) s", r.stderr).group(1)), load_file(out)["embeddings"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("embed")
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    d = minilm_dir()
    sents = sentences(a.n)
    st = SentenceTransformer(d, device="cpu")
    st.encode(sents[:16], batch_size=8)  # warm-up
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "s.txt"), os.path.join(tmp, "e.safetensors")
        with open(src, "w", encoding="utf-8") as f:
            f.write("".join(s + "\n" for s in sents))
        for b in [int(x) for x in a.batches.split(",")]:
            tc, tp, worst = [], [], 1.0
            for _ in range(a.rounds):
                t, emb = run_c(a.embed, d, src, out, b, a.threads)
                tc.append(t)
                t0 = time.perf_counter()
                want = st.encode(sents, batch_size=b, convert_to_numpy=True)
                tp.append(time.perf_counter() - t0)
                cos = (emb * want).sum(1) / (np.linalg.norm(emb, axis=1) * np.linalg.norm(want, axis=1))
                worst = min(worst, float(cos.min()))
            c, p = statistics.median(tc), statistics.median(tp)
            rows.append((b, a.n / c, a.n / p, p / c, worst))
            print(f"batch {b}: C {tc}, PyTorch {tp}", file=sys.stderr)
    print(f"all-MiniLM-L6-v2, {a.n} sentences, {a.threads} threads, median of {a.rounds} alternating rounds "
          f"(torch {torch.__version__})\n")
    print("| batch | libtensor embed (sentences/s) | sentence-transformers (sentences/s) | ratio | worst cosine |")
    print("|---|---|---|---|---|")
    for b, c, p, r, w in rows:
        print(f"| {b} | {c:.1f} | {p:.1f} | {r:.2f}x | {w:.8f} |")


if __name__ == "__main__":
    main()
