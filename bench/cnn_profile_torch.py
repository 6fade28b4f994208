#!/usr/bin/python3
"""bench/cnn_profile_torch.py: where PyTorch's CNN training step spends its
time, by op class (conv fwd, conv bwd data, conv bwd weights, BN, ReLU, pool,
linear, optimizer, other), for the before/after tables in docs/vision.md.

libtorch_cpu.so is stripped, so `perf` cannot name its functions; this uses
torch.profiler's self CPU time per aten op instead. The model and optimizer
are bench/cnn_fashion_mnist_torch.py's; the input is random (the same
shapes: batch 128 of 1x28x28), after 10 warm-up steps.

    unset OPENBLAS_CORETYPE
    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/cnn_profile_torch.py --steps 50 --threads 2
"""
import argparse

import torch
import torch.nn.functional as F

from cnn_fashion_mnist_torch import CNN

CLASSES = [  # (class, substrings of aten op names), first match wins
    ("conv bwd", ("convolution_backward", "conv_backward", "ConvolutionBackward")),
    ("conv fwd", ("convolution", "conv2d", "mkldnn_conv")),
    ("BN", ("batch_norm", "BatchNorm")),
    ("ReLU", ("relu", "threshold", "Relu", "clamp_min")),
    ("pool", ("max_pool", "MaxPool")),
    ("linear", ("addmm", "mm", "linear", "Addmm", "MmBackward", "AddmmBackward", " t", "TBackward")),
    ("loss", ("cross_entropy", "log_softmax", "nll_loss", "NllLoss", "LogSoftmax")),
    ("optimizer", ("adam", "_foreach", "lerp", "addcdiv", "addcmul", "sqrt", "mul_", "add_", "div_", "fill_", "zero_")),
]


def classify(name):
    for cls, keys in CLASSES:
        if any(k in name for k in keys):
            return cls
    return "other"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = CNN()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    x = torch.randn(128, 1, 28, 28)
    y = torch.randint(0, 10, (128,))

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(10):
        step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(a.steps):
            step()
    tot = {}
    for e in prof.key_averages():
        tot.setdefault(classify(e.key), []).append((e.self_cpu_time_total, e.key))
    all_us = sum(t for v in tot.values() for t, _ in v)
    print(f"# PyTorch {torch.__version__}, {a.threads} threads, {a.steps} steps: self CPU time by op class")
    for cls, v in sorted(tot.items(), key=lambda kv: -sum(t for t, _ in kv[1])):
        s = sum(t for t, _ in v)
        top = ", ".join(k for t, k in sorted(v, reverse=True)[:3])
        print(f"{cls:10s} {s / a.steps / 1000:7.2f} ms/step {100 * s / all_us:5.1f}%   ({top})")
    print(f"{'total':10s} {all_us / a.steps / 1000:7.2f} ms/step")


if __name__ == "__main__":
    main()
