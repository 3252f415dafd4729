"""Image classifiers from torchvision and timm, built with random weights (never downloaded)."""

from __future__ import annotations

from typing import Any

from torch import nn

from dlbench.models.zoo import require


def torchvision_model(arch: str, input_size: int, **kwargs: Any) -> nn.Module:
    """``torchvision.models.<arch>(weights=None, **kwargs)``.

    CNNs end in adaptive pooling, so ``input_size`` does not change the module; it is accepted
    to keep one factory signature for every model.
    """
    models = require("torchvision.models", "torchvision")
    return getattr(models, arch)(weights=None, **kwargs)


def inception_v3(input_size: int) -> nn.Module:
    """torchvision Inception v3 without the auxiliary classifier.

    ``aux_logits=False`` makes the training forward return one tensor (with the auxiliary head
    it returns a named tuple). ``init_weights=True`` is torchvision's own truncated-normal
    init; passing it explicitly silences the FutureWarning about the default changing, and it
    costs about as much as the default init to build.
    """
    return torchvision_model("inception_v3", input_size, aux_logits=False, init_weights=True)


def vit(arch: str, input_size: int) -> nn.Module:
    """torchvision ViT; the position embedding is sized for ``input_size`` (a multiple of the patch)."""
    return torchvision_model(arch, input_size, image_size=input_size)


def timm_model(arch: str, input_size: int) -> nn.Module:
    """``timm.create_model(arch, pretrained=False)``: random init, no hub access."""
    timm = require("timm")
    return timm.create_model(arch, pretrained=False, num_classes=1000)
