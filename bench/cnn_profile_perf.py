#!/usr/bin/python3
"""bench/cnn_profile_perf.py: libtensor's CNN step by op class, from a
`perf record -g` of examples/cnn_fashion_mnist (docs/vision.md's before and
after tables; PyTorch's side is bench/cnn_profile_torch.py).

    perf record -F 999 -g -o cnn.data build-rel/examples/cnn_fashion_mnist --max-steps 100 --log-every 1000000
    perf script -i cnn.data | /usr/bin/python3 bench/cnn_profile_perf.py

A sample goes to the class of its leaf function (the library is built
without frame pointers, so callers are unreliable): products cannot be told
conv from linear ("GEMM"), im2col counts as conv fwd though the backward
recomputes it; oneDNN's JIT code, without symbols, counts as conv, the only
op that runs it.
"""
import re
import sys

# Op-level frames (the op's entry or backward): the first one from the leaf
# up decides. Samples of an OpenMP worker thread have none (their stack ends
# at the kernel's *._omp_fn): the kernel-level rules then decide, leaf first.
OPS = [
    ("conv bwd", r"lt__bw_conv2d"),
    ("conv fwd", r"lt_conv2d\b"),
    ("BN", r"lt_batch_norm|lt__bw_batch_norm|cnorm_bw"),
    ("ReLU", r"lt_relu|lt__bw_relu"),
    ("pool", r"lt_max_pool2d|lt__bw_max_pool2d"),
    ("linear", r"lt_linear|lt__bw_linear|lt__bw_matmul|lt_matmul|lt__bw_addmm"),
    ("optimizer", r"lt_adamw|lt_optim|clip_grad"),
    ("loss", r"cross_entropy|log_softmax"),
    ("data loading", r"mnist|lt_tensor_loader"),
]
KERNELS = [
    ("conv bwd", r"col2im|to_cm_f|channel_sum"),
    ("conv fwd (im2col: fwd, and bwd's recomputed COL)", r"im2col|from_cm_f"),
    ("conv (oneDNN: JIT kernels, reorders)", r"libdnnl|\[JIT\]|perf-\d+\.map|^\w+ \[unknown\] \(\[unknown\]\)"),
    ("BN", r"batch_norm|cnorm|cn_dsums|sumsq|bn_"),
    ("ReLU", r"RELU|relu"),
    ("pool", r"max_pool|maxpool"),
    ("GEMM (conv + linear)", r"sp_rows|sp_pack|gemm_panel|sk_dot|libblis|bli_"),
    ("optimizer", r"adam"),
    ("data loading", r"libz|crc32|inflate"),
]


def main():
    counts, total, frames = {}, 0, []

    def flush():
        nonlocal total
        if not frames:
            return
        leaf = frames[:1]  # -g without frame pointers: callers are unreliable, the leaf is not
        cls = next((c for f in leaf for c, rx in OPS + KERNELS if re.search(rx, f)), "other")
        counts[cls] = counts.get(cls, 0) + 1
        total += 1

    for line in sys.stdin:
        if not line.strip():
            flush()
            frames = []
        elif line.startswith(("\t", " ")):
            frames.append(line.strip())
    flush()
    for c, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"{c:26s} {100 * n / total:5.1f}%")
    print(f"{'samples':26s} {total}")


if __name__ == "__main__":
    main()
