"""What a benchmarkable model is: a spec that builds the module and its synthetic batch.

Every model, whatever library it comes from, is wrapped so that ``module(inputs)`` returns one
logits tensor. That keeps the measured loop identical for a CNN, a ViT and a language model, and
lets ``torch.compile`` see a plain tensor-in, tensor-out function.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Literal

import torch
from torch import nn
from torch.nn import functional as F

from dlbench.models.errors import UnknownModelError  # noqa: F401  (re-exported: its old home)

if TYPE_CHECKING:
    from dlbench.models.size import ParamCount

Kind = Literal["image", "text"]
Unit = Literal["images", "sequences", "tokens"]


@dataclass(frozen=True)
class ModelSpec:
    """One entry of the registry.

    Attributes:
        name: registry name used on the command line (``resnet50``, ``gpt2``).
        source: library that defines the architecture (torchvision, timm, transformers, dlbench).
        kind: ``image`` (NCHW float input) or ``text`` (token ids, shape ``[batch, seq_len]``).
        unit: what one throughput figure counts: images, sequences or tokens.
        input_size: default image side in pixels, or default sequence length.
        num_classes: classes for image models, vocabulary size for text models.
        default_batch: batch per GPU in the default GPU suite (fills an 80 GB card in bf16).
        description: one line shown by ``dlbench models``.
        factory: ``factory(input_size) -> nn.Module``; builds with random weights, no download.
        test_only: tiny or fault-injecting models for tests; hidden from ``dlbench models``.
        notes: caveats a user should know (e.g. how it differs from the seed's model).
        param_count: ``param_count(input_size)``, a cheaper parameter count than a meta-device
            build where the source knows one (see :meth:`count_params`); None for the build.
    """

    name: str
    source: str
    kind: Kind
    unit: Unit
    input_size: int
    num_classes: int
    default_batch: int
    description: str
    factory: Callable[[int], nn.Module] = field(repr=False, compare=False)
    test_only: bool = False
    notes: str = ""
    param_count: Callable[[int], ParamCount | None] | None = field(
        default=None, repr=False, compare=False)

    def build(self, input_size: int | None = None) -> nn.Module:
        """A fresh module with random weights, on the current default device."""
        return self.factory(input_size or self.input_size)

    def count_params(self, input_size: int | None = None) -> ParamCount | None:
        """The parameters :meth:`build` would make, counted on the meta device (no memory, no
        initialisation; :mod:`dlbench.models.size`); None where the model cannot be built there."""
        from dlbench.models.size import count_on_meta

        size = input_size or self.input_size
        if self.param_count is not None:
            return self.param_count(size)
        return count_on_meta(lambda: self.factory(size))

    def build_on(self, device: torch.device | str, input_size: int | None = None) -> nn.Module:
        """A fresh module built on ``device`` itself, its weights initialised there.

        Why: initialising on the CPU and copying was most of a fresh process's set-up for the
        large models (GPT-2 124M, VGG-16 138M parameters), paid again by every ``--repeat``
        process. A user's module whose code insists on the CPU (a factory that makes a CPU
        tensor and mixes it with a default-device one) is built on the CPU and moved instead.
        """
        device = torch.device(device)
        if device.type != "cpu":
            try:
                with device:
                    return self.factory(input_size or self.input_size).to(device)
            except Exception:  # noqa: BLE001  built as before, below; a real fault raises there
                pass
        return self.factory(input_size or self.input_size).to(device)

    def make_batch(
        self, batch_size: int, device: torch.device | str, input_size: int | None = None,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Synthetic (inputs, targets) on ``device``: random normal images or random token ids.

        Random, never zeros: zeros can run faster than real data on some kernels.
        """
        size = input_size or self.input_size
        # Made on the device itself: a batch sized for a GPU must never pass through host memory.
        # The meta device (FLOP counting) has no random generator, so it gets empty tensors.
        kw = dict(device=device, generator=generator)
        if torch.device(device).type == "meta":
            kw = dict(device=device)
        if self.kind == "image":
            x = torch.randn(batch_size, 3, size, size, **kw)
            y = torch.randint(0, self.num_classes, (batch_size,), **kw)
        else:
            x = torch.randint(0, self.num_classes, (batch_size, size), **kw)
            y = torch.randint(0, self.num_classes, (batch_size, size), **kw)
        return x, y

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Cross-entropy; for text, over every position (as a language-model step computes)."""
        if self.kind == "text":
            return F.cross_entropy(output.reshape(-1, output.shape[-1]).float(), target.reshape(-1))
        return F.cross_entropy(output.float(), target)

    def units_per_sample(self, input_size: int | None = None) -> int:
        """How many units one sample counts: 1 image or sequence, or ``seq_len`` tokens."""
        return (input_size or self.input_size) if self.unit == "tokens" else 1
