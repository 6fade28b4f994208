#!/usr/bin/python3
"""bench/cnn_fashion_mnist_torch.py: examples/cnn_fashion_mnist.c in PyTorch,
for the side-by-side measurement in docs/vision.md.

The same configuration: conv 3x3 1->16 (pad 1) -> BatchNorm2d -> ReLU ->
max pool 2, conv 3x3 16->32 -> BatchNorm2d -> ReLU -> max pool 2, linear
1568->128 -> ReLU -> linear 128->10; PyTorch's default initialisation; the
same recipe: AdamW lr 5e-3 (the example's default; the shared run's is
1e-3), weight decay 0.01, warmup + cosine, batch 128, 3 epochs. The run
(data, AdamW without weight decay on biases and BatchNorm parameters,
schedule, batch order, evaluation) is bench/fashion_mnist_torch.py's, shared
with the ViT's twin.

    unset OPENBLAS_CORETYPE
    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/cnn_fashion_mnist_torch.py --epochs 3 --threads 2

Prints one line per epoch (seconds, test accuracy) and a summary line with
the same keys as the C example's.
"""
import torch.nn as nn
import torch.nn.functional as F

from fashion_mnist_torch import run


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


if __name__ == "__main__":
    run(CNN, (1, 28, 28), epochs=3, lr=5e-3)  # the example's recipe (docs/vision.md: lr 5e-3 reaches 0.91)
