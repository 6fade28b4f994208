#!/usr/bin/env python3
"""bench/attention_torch.py: the PyTorch side of bench/attention.c, on torch 2.x.

torch.nn.functional.scaled_dot_product_attention on q, k, v of [B, NH, T, HS]
f32 from a fixed seed: milliseconds of the forward and of forward + backward
(of sum(out * r), r fixed), each the best of --repeat runs after one warm-up,
and the peak RSS after each (ru_maxrss; it includes torch's import). On the
CPU, SDPA picks its flash kernel (at::_scaled_dot_product_flash_attention_cpu)
for these inputs; --bf16 runs forward and backward under
torch.autocast("cpu", dtype=torch.bfloat16), as bench_attention --autocast
runs libtensor under lt_set_autocast. Prints one line, as
`bench_attention --one` does:
    fwd_ms fwd_peak_mb fwdbwd_ms fwdbwd_peak_mb

Usage: python3 bench/attention_torch.py T HS CAUSAL [--B 1] [--NH 4]
       [--repeat 2] [--threads 2] [--bf16] [--kernel]
--kernel prints, on stderr, which SDPA kernel the profiler saw.
"""
import argparse
import resource
import sys
import time

import torch
import torch.nn.functional as F


def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("T", type=int)
    ap.add_argument("HS", type=int)
    ap.add_argument("causal", type=int, choices=(0, 1))
    ap.add_argument("--B", type=int, default=1)
    ap.add_argument("--NH", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--kernel", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(1)
    shape = (a.B, a.NH, a.T, a.HS)
    q, k, v, r = (torch.randn(shape, generator=g) for _ in range(4))
    best, peak = [1e30, 1e30], [0.0, 0.0]
    for mode in (0, 1):
        for t in (q, k, v):
            t.requires_grad_(mode == 1)
        for it in range(a.repeat + 1):
            t0 = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
                out = F.scaled_dot_product_attention(q, k, v, is_causal=bool(a.causal))
            if mode == 1:
                (out.float() * r).sum().backward()
            dt = time.perf_counter() - t0
            for t in (q, k, v):
                t.grad = None
            del out
            if it > 0:
                best[mode] = min(best[mode], dt)
        peak[mode] = peak_mb()
    if a.kernel:
        from torch.profiler import profile
        with profile() as p:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
                F.scaled_dot_product_attention(q, k, v, is_causal=bool(a.causal)).float().sum().backward()
        names = sorted({e.key for e in p.key_averages() if "attention" in e.key})
        print("# SDPA kernels: " + ", ".join(names), file=sys.stderr)
    print(f"{1e3 * best[0]:.3f} {peak[0]:.1f} {1e3 * best[1]:.3f} {peak[1]:.1f}")


if __name__ == "__main__":
    main()
