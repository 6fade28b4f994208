#!/usr/bin/env python3
"""GPT-2 trained from the same start by libtensor's `train` and by PyTorch
2.x with transformers: the two loss curves, step by step.

    <reference python> tests/reference/train_curve.py --build BUILD --work DIR
        [--preset tiny|gpt2] [--steps N] [--batch B] [--seq-len T] [--threads N]
        [--check [--tolerance X]] [--out CSV]

What it does, on both sides the same:
  1. a byte-level BPE tokenizer.json in GPT-2's layout, trained by the
     `tokenizers` library on Debian's text (/usr/share/common-licenses and the
     copyright files under /usr/share/doc: the corpus the README's GPT-2
     commands use), with GPT-2's vocabulary size for the gpt2 preset;
  2. token shards of that text written by libtensor's `tokenize`
     (llm.c's format), read here with numpy;
  3. a GPT-2 of the preset's size, initialised by transformers
     (GPT2LMHeadModel(config), torch.manual_seed(0)), dropout 0, saved with
     save_pretrained: libtensor starts from it with `train --init-from`;
  4. the same windows in the same order (`train --no-shuffle`: window w of a
     shard is its tokens [w*T, w*T + T], batches of B consecutive windows),
     AdamW with the same groups (no decay on norms, biases and embeddings),
     the same warmup-cosine schedule (nn/schedule.c, 1-based steps), gradient
     clipping at 1, the mean cross-entropy over the B x T targets, f32.
Then the per-step losses and gradient norms are compared.

--check fails (exit 1) unless the loss of every step after the first 10 is
within --tolerance (relative, default 1%) of PyTorch's, and step 1's loss and
gradient norm within 1e-4 relative (the same start). The tiny preset is the
ctest `reference_train_curve`; the gpt2 preset (124 M parameters, T 1024) is
the run docs/train.md reports, about 20 s a step on each side on 2 cores.
"""
import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import time

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PRESETS = {
    # name: vocab, d_model, layers, heads, seq_len, batch, steps, corpus bytes (None: all), the share of
    # 16 KiB pieces held out (the final validation runs on them)
    "tiny": dict(vocab=1024, d=64, layers=2, heads=4, T=64, B=4, steps=40, corpus=1 << 20,
                 val_fraction=0.05),
    "gpt2": dict(vocab=50257, d=768, layers=12, heads=12, T=1024, B=1, steps=200, corpus=None,
                 val_fraction=0.005),
}
LR, MIN_LR, WARMUP, WD, BETA1, BETA2, EPS, CLIP = 6e-4, 6e-5, 10, 0.1, 0.9, 0.95, 1e-8, 1.0


def corpus_files():
    files = sorted(os.path.join("/usr/share/common-licenses", f) for f in os.listdir("/usr/share/common-licenses"))
    for d in sorted(os.listdir("/usr/share/doc")):
        p = os.path.join("/usr/share/doc", d, "copyright")
        if os.path.isfile(p) and not os.path.islink(p):
            files.append(p)
    return [f for f in files if os.path.isfile(f)]


def write_corpus(path, limit):
    n = 0
    with open(path, "wb") as out:
        for f in corpus_files():
            with open(f, "rb") as fh:
                data = fh.read()
            if b"\x00" in data[:4096]:
                continue
            out.write(data)
            if not data.endswith(b"\n"):
                out.write(b"\n")
            n += len(data)
            if limit is not None and n >= limit:
                break
    return n


def make_tokenizer(corpus, vocab, path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train([corpus], trainer)
    tok.save(path)
    return tok.get_vocab_size()


def read_shards(pattern_dir, prefix):
    toks = []
    for f in sorted(os.listdir(pattern_dir)):
        if not (f.startswith(prefix) and f.endswith(".bin")):
            continue
        raw = open(os.path.join(pattern_dir, f), "rb").read()
        head = np.frombuffer(raw[:1024], dtype=np.int32)
        assert head[0] == 20240520, f"{f}: magic {head[0]}"
        dtype = np.uint16 if head[1] == 1 else np.uint32
        n = int(head[2])
        toks.append(np.frombuffer(raw[1024:], dtype=dtype, count=n).astype(np.int64))
    return toks


def windows_in_order(shards, T):
    for t in shards:
        for w in range((len(t) - 1) // T):
            yield t[w * T: w * T + T + 1]


def lr_at(step, total, lr=LR, min_lr=MIN_LR, warmup=WARMUP):
    """nn/schedule.c's WARMUP_COSINE at the 1-based step (also bert_finetune.py's)."""
    t = max(step, 1)
    if warmup > 0 and t <= warmup:
        return lr * t / warmup
    q = (t - warmup) / (total - warmup) if total > warmup else 1.0
    q = min(max(q, 0.0), 1.0)
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * q))


def torch_curve(model_dir, shards, T, B, steps, threads):
    import torch
    from transformers import GPT2LMHeadModel
    torch.set_num_threads(threads)
    model = GPT2LMHeadModel.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="sdpa")
    model.train()
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        # libtensor's groups: no decay on norms, biases and embeddings (wte is also the tied head)
        (no_decay if (p.dim() < 2 or ".ln_" in name or name.endswith("wte.weight") or name.endswith("wpe.weight"))
         else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(BETA1, BETA2), eps=EPS, foreach=False)
    it = windows_in_order(shards, T)
    rows = []
    for step in range(1, steps + 1):
        batch = np.stack([next(it) for _ in range(B)])
        x = torch.from_numpy(batch[:, :T].copy())
        y = torch.from_numpy(batch[:, 1:].copy())
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps)
        t0 = time.perf_counter()
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        rows.append((step, float(loss.detach()), float(gn), time.perf_counter() - t0))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", help="libtensor build directory (its tokenize and models/transformer/train)")
    ap.add_argument("--tokenize", help="the tokenize program (default: BUILD/tokenize)")
    ap.add_argument("--train", help="the train program (default: BUILD/models/transformer/train)")
    ap.add_argument("--work", required=True, help="scratch directory (created; removed first)")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--seq-len", type=int)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tolerance", type=float, default=0.01)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--out", help="write the two curves here as CSV")
    a = ap.parse_args()
    if not (a.build or (a.tokenize and a.train)):
        ap.error("give --build, or --tokenize and --train")
    tokenize = a.tokenize or os.path.join(a.build, "tokenize")
    train = a.train or os.path.join(a.build, "models/transformer/train")
    P = dict(PRESETS[a.preset])
    T = a.seq_len or P["T"]
    B = a.batch or P["B"]
    steps = a.steps or P["steps"]
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    corpus = os.path.join(a.work, "corpus.txt")
    nbytes = write_corpus(corpus, P["corpus"])
    tokjson = os.path.join(a.work, "tokenizer.json")
    vocab = make_tokenizer(corpus, P["vocab"], tokjson)
    shards = os.path.join(a.work, "shards")
    subprocess.run([tokenize, "--tokenizer-file", tokjson, "--out", shards,
                    "--val-fraction", str(P["val_fraction"]), "--chunk-bytes", "16384", corpus], check=True, stdout=subprocess.DEVNULL)
    train_tokens = read_shards(shards, "train_")
    need = steps * B
    have = sum((len(t) - 1) // T for t in train_tokens)
    if have < need:
        sys.exit(f"train_curve: {have} windows of {T} in {nbytes} bytes of text, {need} needed")

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=vocab, n_positions=T, n_embd=P["d"], n_layer=P["layers"], n_head=P["heads"],
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    model_dir = os.path.join(a.work, "init")
    GPT2LMHeadModel(cfg).save_pretrained(model_dir, safe_serialization=True)
    shutil.copy(tokjson, os.path.join(model_dir, "tokenizer.json"))
    nparams = sum(p.numel() for p in GPT2LMHeadModel(cfg).parameters())

    lt_csv = os.path.join(a.work, "libtensor.csv")
    cmd = [train, "--init-from", model_dir,
           "--data", os.path.join(shards, "train_*.bin"), "--val-data", os.path.join(shards, "val_*.bin"),
           "--no-shuffle", "--seq-len", str(T), "--batch", str(B), "--steps", str(steps),
           "--optim", "adamw", "--lr", str(LR), "--min-lr", str(MIN_LR), "--schedule", "cosine",
           "--warmup", str(WARMUP), "--weight-decay", str(WD), "--beta1", str(BETA1), "--beta2", str(BETA2),
           "--eps", str(EPS), "--clip", str(CLIP), "--dropout", "0", "--threads", str(a.threads),
           "--eval-every", "0", "--eval-batch", str(B), "--gen-tokens", "0", "--examples", "0",
           "--no-ckpt", "--csv", lt_csv, "--ckpt-dir", os.path.join(a.work, "run")]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    lt_seconds = time.perf_counter() - t0
    with open(lt_csv) as f:
        lt = [(int(r["step"]), float(r["train_loss"]), float(r["grad_norm"]), float(r["step_ms"]) / 1e3)
              for r in csv.DictReader(f)]
    t0 = time.perf_counter()
    pt = torch_curve(model_dir, train_tokens, T, B, steps, a.threads)
    pt_seconds = time.perf_counter() - t0

    worst, worst_step = 0.0, 0
    for (s, l1, _, _), (_, l2, _, _) in zip(lt, pt):
        rel = abs(l1 - l2) / abs(l2)
        if s > 10 and rel > worst:
            worst, worst_step = rel, s
    first_loss = abs(lt[0][1] - pt[0][1]) / abs(pt[0][1])
    first_gn = abs(lt[0][2] - pt[0][2]) / abs(pt[0][2])
    last = lt[-1][0]
    summary = {
        "preset": a.preset, "parameters": nparams, "vocab": vocab, "T": T, "B": B, "steps": steps,
        "torch": torch.__version__, "step1_loss_rel": first_loss, "step1_grad_norm_rel": first_gn,
        "worst_rel_after_10": worst, "worst_step": worst_step,
        "final_loss": {"libtensor": lt[-1][1], "torch": pt[-1][1]},
        "final_rel": abs(lt[-1][1] - pt[-1][1]) / abs(pt[-1][1]), "final_step": last,
        "median_step_s": {"libtensor": float(np.median([r[3] for r in lt[1:]])),
                          "torch": float(np.median([r[3] for r in pt[1:]]))},
        "wall_s": {"libtensor": lt_seconds, "torch": pt_seconds},
    }
    print(json.dumps(summary, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            f.write("step,libtensor_loss,torch_loss,libtensor_grad_norm,torch_grad_norm\n")
            for (s, l1, g1, _), (_, l2, g2, _) in zip(lt, pt):
                f.write(f"{s},{l1:.9g},{l2:.9g},{g1:.9g},{g2:.9g}\n")
    if a.check:
        bad = []
        if len(lt) != steps or len(pt) != steps:
            bad.append(f"{len(lt)} libtensor steps and {len(pt)} PyTorch steps, {steps} asked")
        if first_loss > 1e-4 or first_gn > 1e-4:
            bad.append(f"step 1 differs: loss {first_loss:.2e}, grad norm {first_gn:.2e} relative")
        if worst > a.tolerance:
            bad.append(f"step {worst_step}: loss {worst:.3%} from PyTorch's (tolerance {a.tolerance:.1%})")
        if bad:
            sys.exit("train_curve: " + "; ".join(bad))
    return 0


if __name__ == "__main__":
    sys.exit(main())
