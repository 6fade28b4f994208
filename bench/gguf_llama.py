"""bench/gguf_llama.py: llama.cpp's side of bench/run_gguf_bench.sh (through
llama-cpp-python in the reference environment): prompt processing and
generation tokens/s on a GGUF file, the same measurement as `bench_gguf run`
(bench/gguf.c): a prompt of P ids (i * 7919 + 13) mod V evaluated in one
batch (prompt processing: P / time), then G tokens decoded greedily one at a
time with the KV cache (generation: G / time). CPU backend, --threads
threads for both phases; the KV cache in f16 (llama.cpp's default).

    python bench/gguf_llama.py FILE [--prompt 512] [--gen 128] [--threads 2] [--repeat 1]

Prints "pp TOK_S tg TOK_S", the best of --repeat runs.
"""
import argparse
import time

import numpy as np
from llama_cpp import Llama


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    llm = Llama(model_path=a.file, n_ctx=a.prompt + a.gen + 8, n_batch=a.prompt, n_ubatch=a.prompt,
                n_threads=a.threads, n_threads_batch=a.threads, n_gpu_layers=0, verbose=False, seed=0)
    V = llm.n_vocab()
    prompt = [(i * 7919 + 13) % V for i in range(a.prompt)]
    best_pp = best_tg = 0.0
    for _ in range(a.repeat):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        t1 = time.perf_counter()
        for _ in range(a.gen):  # the last row's logits (llm.scores holds them only with logits_all)
            llm.eval([int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(V,))))])
        t2 = time.perf_counter()
        best_pp = max(best_pp, a.prompt / (t1 - t0))
        best_tg = max(best_tg, a.gen / (t2 - t1))
    print(f"pp {best_pp:.2f} tg {best_tg:.2f}")


if __name__ == "__main__":
    main()
