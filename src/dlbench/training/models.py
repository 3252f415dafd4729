"""Networks for training on small real datasets, sized by the data's channels, classes and size.

``cnn10`` and ``wrn28_10`` are the two networks of the CIFAR-10 framework study (a 10-layer CNN and
Wide ResNet 28-10 on CIFAR-10); ``resnet18`` is ResNet-18 with the small-input stem used for CIFAR
(a 3x3 stride-1 first convolution and no max-pool, so a 32 px image keeps its resolution into the
first stage). Any image model of ``dlbench models`` also trains when its output has at least the
dataset's number of classes (grey images are repeated into three channels for it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from torchvision.models import resnet18

from dlbench.config import ConfigError
from dlbench.models import get_model
from dlbench.models.zoo.cifar import CNN10


class _WideBlock(nn.Module):
    """Pre-activation basic block of a Wide ResNet (BN-ReLU-conv twice, identity or 1x1 shortcut)."""

    def __init__(self, cin: int, cout: int, stride: int, dropout: float) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.short = (None if cin == cout and stride == 1 else
                      nn.Conv2d(cin, cout, 1, stride=stride, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        o = torch.relu(self.bn1(x))
        # The shortcut of a changing block starts from the activated input, as in the paper's code.
        short = x if self.short is None else self.short(o)
        o = self.conv1(o)
        o = self.conv2(self.drop(torch.relu(self.bn2(o))))
        return o + short


class WideResNet(nn.Module):
    """Wide ResNet depth-k (Zagoruyko & Komodakis, 2016): ``(depth - 4) / 6`` blocks per group,
    groups of 16k, 32k and 64k channels. WRN-28-10 has 36.5M parameters."""

    def __init__(self, depth: int = 28, k: int = 10, in_channels: int = 3,
                 num_classes: int = 10, dropout: float = 0.0) -> None:
        super().__init__()
        if (depth - 4) % 6:
            raise ValueError(f"Wide ResNet depth must be 6n + 4, got {depth}")
        n = (depth - 4) // 6
        widths = (16, 16 * k, 32 * k, 64 * k)
        self.stem = nn.Conv2d(in_channels, widths[0], 3, padding=1, bias=False)
        blocks: list[nn.Module] = []
        cin = widths[0]
        for g, cout in enumerate(widths[1:]):
            for i in range(n):
                blocks.append(_WideBlock(cin, cout, 2 if (i == 0 and g > 0) else 1, dropout))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.bn = nn.BatchNorm2d(cin)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        o = torch.relu(self.bn(self.blocks(self.stem(x))))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(o, 1), 1))


def resnet18_small(in_channels: int, num_classes: int) -> nn.Module:
    """torchvision's ResNet-18 with the CIFAR stem: 3x3 stride-1 first conv, no max-pool."""

    m = resnet18(num_classes=num_classes)
    m.conv1 = nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False)
    m.maxpool = nn.Identity()
    return m


@dataclass(frozen=True)
class TrainModel:
    name: str
    description: str
    build: Callable[[int, int, int], nn.Module]    # (in_channels, classes, image size)


TRAIN_MODELS: dict[str, TrainModel] = {m.name: m for m in (
    TrainModel("cnn10", "the CIFAR-10 framework study's 10-layer CNN (9 conv + 1 dense; "
               "64/128/256 channels), 1.9M params", lambda c, k, s: CNN10(c, k, 64)),
    TrainModel("cnn10_small", "cnn10 at a quarter of the width (16/32/64 channels), for CPUs "
               "and tests", lambda c, k, s: CNN10(c, k, 16)),
    TrainModel("wrn28_10", "Wide ResNet 28-10 (the CIFAR-10 study), 36.5M params",
               lambda c, k, s: WideResNet(28, 10, c, k)),
    TrainModel("resnet18", "ResNet-18 with the small-input (CIFAR) stem, 11.2M params",
               lambda c, k, s: resnet18_small(c, k)),
)}

_ALIASES = {"wide_resnet28_10": "wrn28_10", "wrn_28_10": "wrn28_10", "wideresnet28_10": "wrn28_10",
            "cnn_10": "cnn10", "resnet18_small": "resnet18", "resnet18_cifar": "resnet18"}


def canonical_name(name: str) -> str:
    """The training name of ``name``, or the registry's name for any other model."""
    key = name.strip().lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    if key in TRAIN_MODELS:
        return key
    return get_model(name).name   # raises UnknownModelError with suggestions


def build_model(name: str, in_channels: int, num_classes: int, size: int) -> nn.Module:
    """A fresh network for ``in_channels`` x ``size`` x ``size`` images and ``num_classes``."""
    key = canonical_name(name)
    if key in TRAIN_MODELS:
        return TRAIN_MODELS[key].build(in_channels, num_classes, size)
    return _registry_model(key, in_channels, num_classes, size)


class _GreyToRGB(nn.Module):
    """Repeats a one-channel image into three, for networks built for colour input."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x.expand(-1, 3, -1, -1))


def _registry_model(name: str, in_channels: int, num_classes: int, size: int) -> nn.Module:

    spec = get_model(name)
    if spec.kind != "image":
        raise ConfigError(f"--model {name} is a {spec.kind} model; dlbench train trains image "
                          "classifiers")
    if spec.num_classes < num_classes:
        raise ConfigError(f"--model {name} has {spec.num_classes} outputs but the dataset has "
                          f"{num_classes} classes")
    if in_channels not in (1, 3):
        raise ConfigError(f"--model {name} takes colour images; the dataset has {in_channels} "
                          "channels")
    model = spec.build(size)
    return _GreyToRGB(model) if in_channels == 1 else model
