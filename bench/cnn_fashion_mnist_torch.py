#!/usr/bin/python3
"""bench/cnn_fashion_mnist_torch.py: examples/cnn_fashion_mnist.c in PyTorch,
for the side-by-side measurement in docs/vision.md.

The same configuration: conv 3x3 1->16 (pad 1) -> BatchNorm2d -> ReLU ->
max pool 2, conv 3x3 16->32 -> BatchNorm2d -> ReLU -> max pool 2, linear
1568->128 -> ReLU -> linear 128->10; PyTorch's default initialisation;
images normalised with mean 0.2860 and std 0.3530; AdamW (lr 1e-3, weight
decay 0.01 except on biases and BatchNorm parameters, as libtensor's
LT_PARAM_NO_DECAY); learning rate linear warmup for total/50 steps then
cosine to 1% at the last step (lt_schedule WARMUP_COSINE); batches of 128 in
a new random permutation each epoch drawn from a generator seeded with
--seed (the same structure as the C example; the permutations themselves
differ, since the generators differ); evaluation of the 10k test images in
batches of 1000 at the end of each epoch, in eval mode.

    unset OPENBLAS_CORETYPE
    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/cnn_fashion_mnist_torch.py --epochs 3 --threads 2

Prints one line per epoch (seconds, test accuracy) and a summary line with
the same keys as the C example's.
"""
import argparse
import gzip
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = 0.2860, 0.3530


def load(data, split):
    prefix = "train" if split == "train" else "t10k"
    with gzip.open(os.path.join(data, prefix + "-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(data, prefix + "-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    x = (torch.from_numpy(x.astype(np.float32)) / 255.0 - MEAN) / STD
    return x, torch.from_numpy(y.astype(np.int64))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def evaluate(model, x, y):
    model.eval()
    correct = 0
    with torch.no_grad():
        for b in range(0, len(x), 1000):
            correct += (model(x[b:b + 1000]).argmax(1) == y[b:b + 1000]).sum().item()
    model.train()
    return correct / len(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    xtr, ytr = load(a.data, "train")
    xte, yte = load(a.data, "test")
    model = CNN()
    decay = [p for n, p in model.named_parameters() if n.endswith("weight") and not n.startswith("bn")]
    no_decay = [p for n, p in model.named_parameters() if not (n.endswith("weight") and not n.startswith("bn"))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr)
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

    print("torch %s, threads %d, %d steps" % (torch.__version__, torch.get_num_threads(), total))
    step, losses, train_seconds, acc = 0, [], 0.0, 0.0
    while step < total:
        t0 = time.perf_counter()
        perm = torch.randperm(len(xtr), generator=gen)
        for b in range(0, len(xtr), a.batch):
            if step == total:
                break
            step += 1
            for g in opt.param_groups:
                g["lr"] = a.lr * lr_at(step)
            idx = perm[b:b + a.batch]
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        dt = time.perf_counter() - t0
        train_seconds += dt
        te = time.perf_counter()
        acc = evaluate(model, xte, yte)
        print("epoch done at step %d: %.2f s training, test accuracy %.4f (evaluation %.2f s)"
              % (step, dt, acc, time.perf_counter() - te), flush=True)
    k = min(20, len(losses))
    print("summary: steps=%d first_loss=%.4f last_loss=%.4f test_accuracy=%.4f train_seconds=%.1f"
          % (step, sum(losses[:k]) / k, sum(losses[-k:]) / k, acc, train_seconds))


if __name__ == "__main__":
    main()
