"""The CIFAR-10 frameworks study's 10-layer CNN for CIFAR-10 sized images, shared by
``dlbench train`` (which sizes it by the dataset) and the throughput registry (``-m cnn10``:
3 x 32 x 32 images, 10 classes)."""

from __future__ import annotations

import torch
from torch import nn


def _conv_bn_relu(cin: int, cout: int) -> list[nn.Module]:
    # No conv bias: the BatchNorm shift that follows makes it redundant.
    return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True)]


class CNN10(nn.Module):
    """The CIFAR-10 framework study's 10-layer CNN: three stages of three 3x3 conv-BN-ReLU layers
    (64, 128, 256 channels at ``width=64``), 2x2 average pooling between stages, global average
    pooling and one linear layer: nine convolutions and a dense layer.

    The study refers to its author's earlier article for the layout; this is that layout
    as we reconstruct it (stage widths doubling, average pooling, no dropout). ``width`` scales
    every stage (``cnn10_small`` is width 16, for CPUs and tests).
    """

    def __init__(self, in_channels: int = 3, num_classes: int = 10, width: int = 64) -> None:
        super().__init__()
        w = (width, 2 * width, 4 * width)
        layers: list[nn.Module] = []
        cin = in_channels
        for i, cout in enumerate(w):
            for _ in range(3):
                layers += _conv_bn_relu(cin, cout)
                cin = cout
            if i < 2:
                layers.append(nn.AvgPool2d(2))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


def cnn10(input_size: int) -> nn.Module:
    """The registry's factory: CIFAR-10's three channels and ten classes at full width."""
    return CNN10(3, 10, 64)
