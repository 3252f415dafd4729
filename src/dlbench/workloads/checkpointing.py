"""Activation checkpointing: trade recomputation for memory, to move the largest-batch boundary.

Uses the model library's own switch where it has one (transformers, timm), else wraps the blocks
of the model's sequential stages.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from dlbench.workloads.devices import UnsupportedError


class CheckpointedBlock(torch.nn.Module):
    """Runs ``inner`` under activation checkpointing: only its input is kept for backward.

    Non-reentrant checkpointing (``use_reentrant=False``), the form PyTorch recommends and
    ``torch.compile`` traces. BatchNorm layers inside see their forward twice per step, so their
    running statistics move twice as fast; with random weights and synthetic data that changes
    no figure this benchmark reports.
    """

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.inner, *args, use_reentrant=False)


def enable_checkpointing(model: torch.nn.Module) -> str:
    """Turn on activation checkpointing with the model library's own switch, or by blocks.

    transformers models use ``gradient_checkpointing_enable``, timm models
    ``set_grad_checkpointing``; anything else (torchvision) gets each block of its
    ``nn.Sequential`` stages wrapped in :class:`CheckpointedBlock` (ResNet's bottlenecks, ViT's
    encoder blocks, DenseNet's dense blocks), or, for a stage of single layers (VGG), segments
    that each start at a layer with weights, so no segment begins with an in-place ReLU that
    would overwrite the input it keeps. Returns how it was done; raises
    :class:`UnsupportedError` for a model with no such structure.
    """
    inner = getattr(model, "model", model)  # text models are wrapped to return logits only
    if hasattr(inner, "gradient_checkpointing_enable"):
        inner.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return "transformers"
    if hasattr(model, "set_grad_checkpointing"):
        try:
            model.set_grad_checkpointing(True)
            return "timm"
        except (AssertionError, NotImplementedError):  # timm models that lack it say so this way
            pass
    if _wrap_blocks(model) == 0:
        raise UnsupportedError(f"--checkpointing: {type(model).__name__} has no sequential stages "
                               "of blocks that dlbench knows how to checkpoint")
    return "blocks"


def _wrap_blocks(module: torch.nn.Module) -> int:
    """Wrap the blocks of every ``nn.Sequential`` stage under ``module``; the number wrapped."""
    wrapped = 0
    for name, child in list(module.named_children()):
        if isinstance(child, torch.nn.Sequential):
            blocks = [m for m in child if len(list(m.children())) > 0]
            if len(blocks) >= 2:
                for i, m in enumerate(child):
                    if len(list(m.children())) > 0:
                        child[i] = CheckpointedBlock(m)
                        wrapped += 1
                continue
            if len(child) >= 4 and not blocks:
                segments = _segments(list(child))
                if len(segments) >= 2:
                    setattr(module, name, torch.nn.Sequential(
                        *(CheckpointedBlock(torch.nn.Sequential(*seg)) for seg in segments)))
                    wrapped += len(segments)
                    continue
        wrapped += _wrap_blocks(child)
    return wrapped


def _segments(layers: list[torch.nn.Module]) -> list[list[torch.nn.Module]]:
    """About sqrt(n) runs of layers, each starting at a layer with parameters."""
    starts = [i for i, m in enumerate(layers) if any(True for _ in m.parameters(recurse=False))]
    if not starts:
        return [layers]
    every = max(1, round(len(starts) ** 0.5))
    cuts = [0] + starts[every::every] + [len(layers)]
    return [layers[a:b] for a, b in zip(cuts, cuts[1:]) if b > a]
