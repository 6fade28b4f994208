#!/usr/bin/env python3
"""The PyTorch 2.x side of bench/gpt2_memory.sh (issue 31): GPT-2 124M's
inputs, and the peak RSS of a plain PyTorch training loop over them.

    <reference python> bench/gpt2_memory.py prepare WORK
        WORK/corpus.txt (Debian's text), WORK/tokenizer.json (byte-level BPE,
        GPT-2's vocabulary size, trained by `tokenizers`), WORK/init (a
        Hugging Face GPT-2 124M directory: GPT2LMHeadModel(config),
        torch.manual_seed(0), dropout 0, T 1,024, with the tokenizer.json)
    <reference python> bench/gpt2_memory.py torch WORK --batch B --steps N [--threads N]
        trains WORK/init on WORK/shards (written by libtensor's `tokenize`)
        for N steps with tests/reference/train_curve.py's loop (the one the
        loss curves are compared with: AdamW with libtensor's groups,
        foreach=False, clipping, f32, SDPA attention) and prints
        "peak_rss_mib X" (getrusage's ru_maxrss of this process).

The corpus, the tokenizer, the model and the loop are train_curve.py's own
(imported, not copied), so the memory is that of the run whose loss curve
docs/train.md compares.
"""
import argparse
import os
import resource
import shutil
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "reference"))
import train_curve as tc  # noqa: E402


def prepare(work):
    os.makedirs(work, exist_ok=True)
    P = tc.PRESETS["gpt2"]
    corpus = os.path.join(work, "corpus.txt")
    tc.write_corpus(corpus, P["corpus"])
    tokjson = os.path.join(work, "tokenizer.json")
    vocab = tc.make_tokenizer(corpus, P["vocab"], tokjson)
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=vocab, n_positions=P["T"], n_embd=P["d"], n_layer=P["layers"],
                     n_head=P["heads"], resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     bos_token_id=0, eos_token_id=0)
    model_dir = os.path.join(work, "init")
    model = GPT2LMHeadModel(cfg)
    model.save_pretrained(model_dir, safe_serialization=True)
    shutil.copy(tokjson, os.path.join(model_dir, "tokenizer.json"))
    print(f"vocab {vocab} parameters {sum(p.numel() for p in model.parameters())}")


def run_torch(work, batch, steps, threads):
    T = tc.PRESETS["gpt2"]["T"]
    shards = tc.read_shards(os.path.join(work, "shards"), "train_")
    rows = tc.torch_curve(os.path.join(work, "init"), shards, T, batch, steps, threads)
    for step, loss, gn, sec in rows:
        print(f"step {step} loss {loss:.4f} grad_norm {gn:.4f} s {sec:.1f}")
    print(f"peak_rss_mib {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["prepare", "torch"])
    ap.add_argument("work")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if a.what == "prepare":
        prepare(a.work)
    else:
        run_torch(a.work, a.batch, a.steps, a.threads)


if __name__ == "__main__":
    main()
