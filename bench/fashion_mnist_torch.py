"""bench/fashion_mnist_torch.py: what the PyTorch twins of the Fashion-MNIST
examples share (bench/cnn_fashion_mnist_torch.py, vit_fashion_mnist_torch.py),
as libtensor's examples share train/classify.h: the command line, the data,
the optimizer, the schedule, the batch order, the evaluation and the summary
line. Each script writes only its model.

The run (the same as lt_classify_fit's): images normalised with mean 0.2860
and std 0.3530; AdamW (lr 1e-3, weight decay 0.01 on the matrices and
convolution kernels only: not on biases, norms or the parameters the model
names in no_decay, as libtensor's LT_PARAM_NO_DECAY); learning rate linear
warmup for total/50 steps then cosine to 1% at the last step (lt_schedule
WARMUP_COSINE); batches of 128 in a new random permutation each epoch drawn
from a generator seeded with --seed (the same structure as the C examples;
the permutations themselves differ, since the generators differ); evaluation
of the 10k test images in batches of 1000 at the end of each epoch (or of
--max-steps), in eval mode.

--compile and --optim-impl are bench/torch_setup.py's set-ups (torch 2.x):
the compiled model trains, and the first step's compilation (its time less a
median step) is printed apart and left out of train_seconds and
ms_per_step; evaluation (batches of 1000, compiled again) is timed apart as
before. --precision bf16 runs the forward and the loss of training and the
evaluation's forward under torch.autocast("cpu", dtype=torch.bfloat16), as
bench/train_step_torch.py does (f32 weights, gradients and optimizer state).

What this is not: a script (it is imported by the two beside it).
"""
import argparse
import gzip
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

import torch_setup

MEAN, STD = 0.2860, 0.3530


def load(data, split, shape):
    """Images [N, *shape] normalised, labels [N] i64."""
    prefix = "train" if split == "train" else "t10k"
    with gzip.open(os.path.join(data, prefix + "-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, *shape)
    with gzip.open(os.path.join(data, prefix + "-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    x = (torch.from_numpy(x.astype(np.float32)) / 255.0 - MEAN) / STD
    return x, torch.from_numpy(y.astype(np.int64))


def evaluate(model, x, y):
    model.eval()
    correct = 0
    with torch.no_grad():
        for b in range(0, len(x), 1000):
            correct += (model(x[b:b + 1000]).argmax(1) == y[b:b + 1000]).sum().item()
    model.train()
    return correct / len(x)


def run(make_model, shape, epochs, no_decay=(), lr=1e-3, batch=128, weight_decay=0.01):
    """Parses the command line (epochs, lr, batch and weight_decay are the
    model's defaults, as each C example sets its own), builds make_model()
    after seeding, trains and prints one line per epoch and the summary line."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=epochs)
    ap.add_argument("--batch", type=int, default=batch)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--lr", type=float, default=lr)
    ap.add_argument("--weight-decay", type=float, default=weight_decay)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", choices=("f32", "bf16"), default="f32")
    torch_setup.add_args(ap)
    a = ap.parse_args()
    torch_setup.check(a)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    xtr, ytr = load(a.data, "train", shape)
    xte, yte = load(a.data, "test", shape)
    model = make_model()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and n not in no_decay]
    ids = {id(p) for p in decay}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": [p for p in model.parameters() if id(p) not in ids], "weight_decay": 0.0}],
                            lr=a.lr, **torch_setup.optim_kwargs(a))
    fwd = torch_setup.wrap(model, a)
    bf16 = a.precision == "bf16"
    per_epoch = (len(xtr) + a.batch - 1) // a.batch
    total = per_epoch * a.epochs
    if 0 < a.max_steps < total:
        total = a.max_steps
    warm = total // 50

    def lr_at(s):  # s = 1, 2, ... as lt_schedule_lr
        if warm > 0 and s <= warm:
            return s / warm
        q = min(1.0, max(0.0, (s - warm) / (total - warm))) if total > warm else 1.0
        return 0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * q))

    print("torch %s, threads %d, %d steps, %d parameters" % (
        torch.__version__, torch.get_num_threads(), total, sum(p.numel() for p in model.parameters())))
    step, losses, train_seconds, eval_seconds, acc, step_s = 0, [], 0.0, 0.0, 0.0, []
    while step < total:
        t0, step0 = time.perf_counter(), step
        perm = torch.randperm(len(xtr), generator=gen)
        for b in range(0, len(xtr), a.batch):
            if step == total:
                break
            step += 1
            for g in opt.param_groups:
                g["lr"] = a.lr * lr_at(step)
            idx = perm[b:b + a.batch]
            ts = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = F.cross_entropy(fwd(xtr[idx]), ytr[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
            step_s.append(time.perf_counter() - ts)
        dt = time.perf_counter() - t0
        train_seconds += dt
        te = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            acc = evaluate(fwd, xte, yte)
        eval_seconds = time.perf_counter() - te
        print("epoch done at step %d: %.2f s training (%.2f ms/step), test accuracy %.4f (evaluation %.2f s)"
              % (step, dt, 1e3 * dt / (step - step0), acc, eval_seconds), flush=True)
    k = min(20, len(losses))
    comp = torch_setup.compile_seconds(step_s[:1], torch_setup.median(step_s), a)
    train_seconds -= comp
    print("summary: steps=%d first_loss=%.4f last_loss=%.4f test_accuracy=%.4f train_seconds=%.1f "
          "ms_per_step=%.2f eval_seconds=%.2f compile_seconds=%.1f setup=%s precision=%s"
          % (step, sum(losses[:k]) / k, sum(losses[-k:]) / k, acc, train_seconds, 1e3 * train_seconds / step,
             eval_seconds, comp, a.compile, a.precision))
