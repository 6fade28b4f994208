#!/usr/bin/env python3
"""bench/decode_torch.py: the PyTorch 2.x side of bench/decode.c's
decoder-only rows: batch-1 greedy decoding with the KV cache, in tokens/s.

The models are bench_decode's decoder-only ones in Hugging Face transformers'
GPT2LMHeadModel, which is what a PyTorch user decodes GPT-2 with (pre-norm,
learned positions, GELU (erf), tied head, 1,024 positions):
  small   d 256, 4 heads, 4 layers, V 1,024, d_ff 1,024
  medium  d 512, 8 heads, 6 layers, V 8,192, d_ff 2,048
randomly initialised (speed does not depend on the weights), f32, eval mode,
an 8-token prompt, exactly N new tokens (min_new_tokens = max_new_tokens, as
bench_decode's eos -1), `model.generate(do_sample=False, use_cache=True)`.
Each figure is the best of --repeat runs after a warm-up.

Set-ups (--setup): eager (generate() with the dynamic cache); loop (the
same model called token by token with past_key_values in a plain loop: no
generate() bookkeeping, argmax of the last logits); compile: the static
cache and torch.compile of the forward, transformers' documented fast path
(cache_implementation="static"; the warm-up compiles, and its time is
printed apart).

Usage: python3 bench/decode_torch.py --model small|medium [--lengths 64,256]
       [--repeat 3] [--threads 2] [--setup eager|loop|compile]
Prints one line per length: `model,length,tok_s,setup,compile_s`.
"""
import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

MODELS = {"small": (256, 4, 4, 1024, 1024), "medium": (512, 8, 6, 8192, 2048)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(MODELS), required=True)
    ap.add_argument("--lengths", default="64,256")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--setup", choices=("eager", "loop", "compile"), default="eager")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    C, NH, L, V, dff = MODELS[a.model]
    cfg = GPT2Config(vocab_size=V, n_positions=1024, n_embd=C, n_layer=L, n_head=NH, n_inner=dff,
                     activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     bos_token_id=0, eos_token_id=0, pad_token_id=0)
    model = GPT2LMHeadModel(cfg).eval()
    prompt = torch.randint(1, V, (1, 8))
    kw = dict(do_sample=False, use_cache=True)
    if a.setup == "compile":
        kw["cache_implementation"] = "static"
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, GPT2LMHeadModel {a.model}: "
          f"{sum(p.numel() for p in model.parameters())} parameters, setup {a.setup}", file=sys.stderr)
    def loop(n):
        out = model(prompt, use_cache=True)
        past, toks = out.past_key_values, [out.logits[:, -1].argmax(-1, keepdim=True)]
        for _ in range(n - 1):
            out = model(toks[-1], past_key_values=past, use_cache=True)
            past = out.past_key_values
            toks.append(out.logits[:, -1].argmax(-1, keepdim=True))
        return torch.cat([prompt] + toks, 1)

    def decode(n):
        if a.setup == "loop":
            return loop(n)
        return model.generate(prompt, max_new_tokens=n, min_new_tokens=n, **kw)

    for n in (int(x) for x in a.lengths.split(",")):
        with torch.inference_mode():
            t0 = time.perf_counter()
            out = decode(n)  # warm-up (compiles)
            warm = time.perf_counter() - t0
            assert out.shape[1] == 8 + n, out.shape
            best = 1e30
            for _ in range(a.repeat):
                t0 = time.perf_counter()
                decode(n)
                best = min(best, time.perf_counter() - t0)
        comp = max(0.0, warm - best) if a.setup == "compile" else 0.0
        print(f"{a.model},{n},{n / best:.1f},{a.setup},{comp:.1f}", flush=True)


if __name__ == "__main__":
    main()
