#!/usr/bin/env python3
"""bench/train_step_torch.py: the PyTorch side of bench/train_step.c.

Times full training steps (forward, cross-entropy, backward, AdamW step,
zero-grad) of the same three models as bench_train_step, float32 on the CPU,
and prints one CSV line per configuration with the same columns:
tokens/s, ms/step (median and min), peak RSS (ru_maxrss of this process,
which includes the ~200-300 MiB of the torch import; base_mib is the RSS
before the model was built).

Usage: python3 bench/train_step_torch.py --config small [--steps N]
       [--warmup N] [--threads N] [--precision f32|bf16]
       [--compile none|default|max-autotune] [--optim-impl default|foreach|fused]
       [--header]

Runs on Debian's torch 1.13 (/usr/bin/python3) and on torch 2.x (the
reference environment, ./do.sh reference). --compile and --optim-impl are the
set-ups of bench/torch_setup.py; with --compile the warm-up steps include the
compilation, which is reported apart (compile_s: the warm-up steps' time
minus warmup x the median step) and never counted in tokens/s.

--precision bf16 is PyTorch's CPU mixed precision as its documentation
gives it: the forward and the loss under torch.autocast("cpu",
dtype=torch.bfloat16), the backward and the optimizer outside it (f32 master
weights, gradients and AdamW state; autocast's lower_precision_fp ops run
in bf16 through oneDNN, the fp32 list stays f32).

Threads are NOT set here beyond torch.set_num_threads(--threads): the caller
(run_train_bench.sh) chooses the environment (OPENBLAS_CORETYPE unset,
OPENBLAS_NUM_THREADS, OMP_WAIT_POLICY) because OpenBLAS and libgomp read it
when torch is imported. Run one configuration per process so that the peak
RSS is per configuration.

The models:
  small / medium: GPT-2 written out (pre-norm, learned positions, tanh GELU,
    biases on every Linear, tied head, no dropout, final LayerNorm, d_ff 4C,
    embeddings N(0, 0.02^2)); attention through
    torch.nn.functional.scaled_dot_product_attention when present (torch >= 2),
    else the explicit softmax(q k^T / sqrt(hs) + causal mask) v.
  encdec: nn.Transformer with its defaults (post-norm, ReLU, dropout 0.1,
    final encoder/decoder norms, batch_first) plus token embedding, learned
    positions (both N(0, 0.02^2), as libtensor initialises unscaled
    embeddings) and dropout on the embedding sum, and an untied head without
    bias; causal target mask, no padding.
"""
import argparse
import math
import os
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_setup

CONFIGS = {
    "small": dict(encdec=False, V=256, C=256, L=4, NH=4, dff=1024, B=16, T=128),
    # GPT-2 124M (llm.c's model with the unpadded vocabulary): B 4, T 64 is
    # llm.c's CPU default; gpt2-1024 the model's full context.
    "gpt2": dict(encdec=False, V=50257, C=768, L=12, NH=12, dff=3072, B=4, T=64, P=1024),
    "gpt2-1024": dict(encdec=False, V=50257, C=768, L=12, NH=12, dff=3072, B=4, T=1024, P=1024),
    "medium": dict(encdec=False, V=8192, C=512, L=6, NH=8, dff=2048, B=8, T=256),
    "encdec": dict(encdec=True, V=1000, C=256, L=3, NH=4, dff=1024, B=32, T=64),
}


def rss_mib():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096 / 2**20
    except OSError:
        return 0.0


class Block(nn.Module):
    def __init__(self, C, NH, dff):
        super().__init__()
        self.NH = NH
        self.ln1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)  # q, k, v projections in one product (same FLOPs as three)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, dff)
        self.fc2 = nn.Linear(dff, C)

    def forward(self, x, mask):
        B, T, C = x.shape
        h = self.ln1(x)
        q, k, v = self.qkv(h).split(C, dim=2)
        q = q.view(B, T, self.NH, C // self.NH).transpose(1, 2)
        k = k.view(B, T, self.NH, C // self.NH).transpose(1, 2)
        v = v.view(B, T, self.NH, C // self.NH).transpose(1, 2)
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(mask[:T, :T], float("-inf"))
            y = att.softmax(dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        x = x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    def __init__(self, V, C, L, NH, dff, T, P=None):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(P or T, C)
        nn.init.normal_(self.wte.weight, 0.0, 0.02)
        nn.init.normal_(self.wpe.weight, 0.0, 0.02)
        self.blocks = nn.ModuleList([Block(C, NH, dff) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1))

    def forward(self, idx):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe.weight[:T]
        for b in self.blocks:
            x = b(x, self.mask)
        return F.linear(self.ln_f(x), self.wte.weight)  # tied head


class EncDec(nn.Module):
    def __init__(self, V, C, L, NH, dff, T):
        super().__init__()
        self.embed = nn.Embedding(V, C)
        self.pos = nn.Embedding(T, C)
        nn.init.normal_(self.embed.weight, 0.0, 0.02)  # as libtensor's unscaled embeddings
        nn.init.normal_(self.pos.weight, 0.0, 0.02)
        self.drop = nn.Dropout(0.1)
        self.tf = nn.Transformer(d_model=C, nhead=NH, num_encoder_layers=L, num_decoder_layers=L,
                                 dim_feedforward=dff, dropout=0.1, batch_first=True)
        self.head = nn.Linear(C, V, bias=False)
        self.register_buffer("tgt_mask", nn.Transformer.generate_square_subsequent_mask(T))

    def forward(self, src, tgt):
        S, T = src.shape[1], tgt.shape[1]
        s = self.drop(self.embed(src) + self.pos.weight[:S])
        t = self.drop(self.embed(tgt) + self.pos.weight[:T])
        y = self.tf(s, t, tgt_mask=self.tgt_mask[:T, :T])
        return self.head(y)


def run(name, steps, warmup, setup, bf16=False):
    c = CONFIGS[name]
    base = rss_mib()
    torch.manual_seed(1234)
    if c["encdec"]:
        model = EncDec(c["V"], c["C"], c["L"], c["NH"], c["dff"], c["T"])
    else:
        model = GPT(c["V"], c["C"], c["L"], c["NH"], c["dff"], c["T"], c.get("P"))
    model.train()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, **torch_setup.optim_kwargs(setup))
    fwd = torch_setup.wrap(model, setup)
    g = torch.Generator().manual_seed(42)
    B, T, V = c["B"], c["T"], c["V"]
    if c["encdec"]:
        src = torch.randint(0, V, (B, T), generator=g)
        x = torch.randint(0, V, (B, T), generator=g)
        y = torch.randint(0, V, (B, T), generator=g)
        tokens = 2 * B * T
    else:
        ids = torch.randint(0, V, (B, T + 1), generator=g)
        x, y = ids[:, :T].contiguous(), ids[:, 1:].contiguous()
        src = None
        tokens = B * T
    ms, losses, warm_s = [], [], []
    for s in range(warmup + steps):
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = fwd(src, x) if c["encdec"] else fwd(x)
            loss = F.cross_entropy(logits.view(-1, V), y.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if s >= warmup:
            ms.append(dt * 1e3)
        else:
            warm_s.append(dt)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    ms.sort()
    n = len(ms)
    med = ms[n // 2] if n % 2 else 0.5 * (ms[n // 2 - 1] + ms[n // 2])
    return dict(params=params, tokens=tokens, tok_s=tokens / (med * 1e-3), ms_med=med, ms_min=ms[0],
                peak_mib=peak, base_mib=base, loss0=losses[0], loss1=losses[-1],
                compile_s=torch_setup.compile_seconds(warm_s, med * 1e-3, setup))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True, choices=sorted(CONFIGS))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--precision", choices=("f32", "bf16"), default="f32")
    torch_setup.add_args(ap)
    ap.add_argument("--header", action="store_true")
    a = ap.parse_args()
    torch_setup.check(a)
    if a.compile != "none" and a.warmup < 1:
        sys.exit("train_step_torch.py: --compile needs --warmup 1 or more (the first step compiles)")
    torch.set_num_threads(a.threads)
    env = " ".join(f"{k}={os.environ.get(k, '(unset)')}" for k in
                   ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "OMP_WAIT_POLICY"))
    print(f"# {torch_setup.describe(a)}, torch threads {torch.get_num_threads()}, {env}", file=sys.stderr)
    r = run(a.config, a.steps, a.warmup, a, a.precision == "bf16")
    if a.header:
        print("config,torch_threads,params,tokens,tok_s,ms_med,ms_min,peak_mib,base_mib,loss0,loss1,compile_s")
    print(f"{a.config},{torch.get_num_threads()},{r['params']},{r['tokens']},{r['tok_s']:.1f},{r['ms_med']:.2f},"
          f"{r['ms_min']:.2f},{r['peak_mib']:.1f},{r['base_mib']:.1f},{r['loss0']:.4f},{r['loss1']:.4f},"
          f"{r['compile_s']:.1f}")


if __name__ == "__main__":
    main()
