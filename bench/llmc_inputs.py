#!/usr/bin/env python3
"""bench/llmc_inputs.py: the files karpathy/llm.c's train_gpt2 reads, with
random weights and tokens, so that its CPU training step can be timed beside
libtensor's and PyTorch's on the same GPT-2 124M (bench/run_gpt2_bench.sh).

llm.c's own script downloads GPT-2's weights and a tokenized corpus; these
machines reach no model hub, and a step's time does not depend on the values.
The layouts are llm.c's (train_gpt2.c, gpt2_build_from_checkpoint;
llmc/dataloader.h):
  gpt2_124M.bin  256 int32 header: magic 20240326, version 3, maxT, V, L, NH,
                 C, Vp (padded vocabulary), zeros; then the parameters, f32, in
                 this order: wte [Vp, C], wpe [maxT, C], ln1w/ln1b [L, C],
                 qkvw [L, 3C, C], qkvb [L, 3C], attprojw [L, C, C],
                 attprojb [L, C], ln2w/ln2b [L, C], fcw [L, 4C, C],
                 fcb [L, 4C], fcprojw [L, C, 4C], fcprojb [L, C], lnfw/lnfb [C]
  dev/data/tinyshakespeare/tiny_shakespeare_{train,val}.bin
                 256 int32 header: magic 20240520, version 1, token count,
                 zeros; then uint16 tokens
Weights are N(0, 0.02^2) (GPT-2's init), norms weight 1 and bias 0, biases 0;
tokens are uniform in [0, V) from a fixed seed. No tokenizer file: llm.c then
prints token ids when it samples.

Usage: python3 bench/llmc_inputs.py OUT_DIR [--tokens N]
"""
import argparse
import os

import numpy as np

MAXT, V, VP, L, NH, C = 1024, 50257, 50304, 12, 12, 768


def header(*vals):
    h = np.zeros(256, dtype="<i4")
    h[: len(vals)] = vals
    return h.tobytes()


def write_model(path, rng):
    shapes = [(VP, C), (MAXT, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C), (L, C), (L, C),
              (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]
    ones = {2, 8, 14}  # ln1w, ln2w, lnfw
    zeros = {3, 5, 7, 9, 11, 13, 15}  # norm biases and linear biases
    with open(path + ".tmp", "wb") as f:
        f.write(header(20240326, 3, MAXT, V, L, NH, C, VP))
        n = 0
        for i, s in enumerate(shapes):
            if i in ones:
                a = np.ones(s, dtype="<f4")
            elif i in zeros:
                a = np.zeros(s, dtype="<f4")
            else:
                a = (rng.standard_normal(s, dtype=np.float32) * 0.02).astype("<f4")
            f.write(a.tobytes())
            n += a.size
    os.replace(path + ".tmp", path)
    return n


def write_tokens(path, n, rng):
    toks = rng.integers(0, V, size=n, dtype=np.uint16)
    with open(path + ".tmp", "wb") as f:
        f.write(header(20240520, 1, n))
        f.write(toks.astype("<u2").tobytes())
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--tokens", type=int, default=1 << 18)
    a = ap.parse_args()
    rng = np.random.default_rng(1337)
    data = os.path.join(a.out, "dev", "data", "tinyshakespeare")
    os.makedirs(data, exist_ok=True)
    n = write_model(os.path.join(a.out, "gpt2_124M.bin"), rng)
    write_tokens(os.path.join(data, "tiny_shakespeare_train.bin"), a.tokens, rng)
    write_tokens(os.path.join(data, "tiny_shakespeare_val.bin"), a.tokens // 8, rng)
    print(f"llmc_inputs: {n} parameters (padded vocabulary {VP}), {a.tokens} training tokens in {a.out}")


if __name__ == "__main__":
    main()
