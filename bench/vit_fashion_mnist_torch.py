#!/usr/bin/python3
"""bench/vit_fashion_mnist_torch.py: examples/vit_fashion_mnist.c in PyTorch,
for the side-by-side measurement in docs/vision.md.

The same configuration: a Vision Transformer on 28x28 images cut into 16
patches of 7x7 (row-major, each flattened to 49 values), patch_embed =
Linear(49, 64), a learned cls token and learned positions for the 17
tokens (both N(0, 0.02^2)), 4 pre-norm nn.TransformerEncoderLayer(64, 4
heads, dim_feedforward 128, GELU (erf), dropout 0, batch_first), a final
LayerNorm and head = Linear(64, 10) on the cls token; PyTorch's default
initialisation elsewhere. The run (data, AdamW without weight decay on the
cls token and the positions, schedule, batch order, evaluation) is
bench/fashion_mnist_torch.py's, shared with the CNN's twin.

    unset OPENBLAS_CORETYPE
    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/vit_fashion_mnist_torch.py --epochs 6 --threads 2

Prints one line per epoch (seconds, test accuracy, evaluation seconds) and a
summary line with the same keys as the C example's.
"""
import torch
import torch.nn as nn

from fashion_mnist_torch import run

P, D, HEADS, FFN, LAYERS = 7, 64, 4, 128, 4


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        n = (28 // P) ** 2
        self.patch_embed = nn.Linear(P * P, D)
        self.cls_token = nn.Parameter(torch.randn(1, 1, D) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, n + 1, D) * 0.02)
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(D, HEADS, FFN, dropout=0.0, activation="gelu", batch_first=True,
                                       norm_first=True) for _ in range(LAYERS)])
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, 10)

    def forward(self, x):  # x [B, 784]
        B = x.shape[0]
        g = 28 // P
        p = x.view(B, g, P, g, P).permute(0, 1, 3, 2, 4).reshape(B, g * g, P * P)  # [B, 16, 49]
        h = torch.cat([self.cls_token.expand(B, 1, D), self.patch_embed(p)], 1) + self.pos_embed
        for layer in self.layers:
            h = layer(h)
        return self.head(self.norm(h[:, 0]))


if __name__ == "__main__":
    run(ViT, (784,), epochs=6, no_decay=("cls_token", "pos_embed"))
