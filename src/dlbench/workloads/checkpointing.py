"""Activation checkpointing: trade recomputation for memory, to move the largest-batch boundary.

Uses the model library's own switch where it has one (transformers, timm), else wraps the blocks
of the model's sequential stages.

Two policies (``--checkpointing full|selective``): ``full`` keeps only each block's input and
recomputes all it computed; ``selective`` (PyTorch's selective activation checkpointing, the
op-level form torchtitan offers) also keeps the outputs of the block's matmuls and attention
and recomputes only the cheap element-wise work between them (norms, activations, rotary
embeddings): less memory saved than ``full``, and the backward pass repeats no matmul.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

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

    def __init__(self, inner: torch.nn.Module, options: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.inner = inner
        self.options = options or {}

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.inner, *args, use_reentrant=False, **self.options)


def saved_ops() -> frozenset:
    """The ops whose outputs selective checkpointing keeps: matmuls and attention kernels (the
    expensive work of a block); every other op is recomputed."""
    aten = torch.ops.aten
    names = ("mm", "addmm", "bmm", "_scaled_dot_product_flash_attention",
             "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
             "_scaled_dot_product_flash_attention_for_cpu")
    return frozenset(getattr(aten, n).default for n in names if hasattr(aten, n))


def _selective_contexts() -> Any:
    """The (forward, recompute) contexts of one checkpointed region under the selective
    policy: a new pair per region, as PyTorch requires."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    keep = saved_ops()

    def policy(_ctx: Any, op: Any, *_args: Any, **_kwargs: Any) -> Any:
        return CheckpointPolicy.MUST_SAVE if op in keep else CheckpointPolicy.PREFER_RECOMPUTE
    return create_selective_checkpoint_contexts(policy)


def _options(policy: str) -> dict[str, Callable[[], Any]]:
    """The extra keywords of ``torch.utils.checkpoint.checkpoint`` for ``policy``."""
    return {"context_fn": _selective_contexts} if policy == "selective" else {}


def enable_checkpointing(model: torch.nn.Module, policy: str = "full") -> str:
    """Turn on activation checkpointing with the model library's own switch, or by blocks.

    transformers models use ``gradient_checkpointing_enable``, timm models
    ``set_grad_checkpointing``; anything else (torchvision) gets each block of its
    ``nn.Sequential`` stages wrapped in :class:`CheckpointedBlock` (ResNet's bottlenecks, ViT's
    encoder blocks, DenseNet's dense blocks), or, for a stage of single layers (VGG), segments
    that each start at a layer with weights, so no segment begins with an in-place ReLU that
    would overwrite the input it keeps. ``policy`` is ``full`` or ``selective`` (the module's
    doc). Returns how it was done; raises :class:`UnsupportedError` for a model with no such
    structure, or whose library's switch takes no policy.
    """
    options = _options(policy)
    inner = getattr(model, "model", model)  # text models are wrapped to return logits only
    if hasattr(inner, "gradient_checkpointing_enable"):
        # transformers hands these keywords to torch.utils.checkpoint.checkpoint
        inner.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False, **options})
        return "transformers"
    if hasattr(model, "set_grad_checkpointing"):
        if options:
            raise UnsupportedError(f"checkpoint_policy {policy}: timm's checkpointing switch "
                                   'takes no policy; use checkpoint_policy="full"',
                                   "checkpoint_policy")
        try:
            model.set_grad_checkpointing(True)
            return "timm"
        except (AssertionError, NotImplementedError):  # timm models that lack it say so this way
            pass
    if _wrap_blocks(model, options) == 0:
        raise UnsupportedError(f"checkpointing: {type(model).__name__} has no sequential stages "
                               "of blocks that dlbench knows how to checkpoint", "checkpointing")
    return "blocks"


def _wrap_blocks(module: torch.nn.Module, options: dict[str, Any]) -> int:
    """Wrap the blocks of every ``nn.Sequential`` stage under ``module``; the number wrapped."""
    wrap = functools.partial(CheckpointedBlock, options=options)
    wrapped = 0
    for name, child in list(module.named_children()):
        if isinstance(child, torch.nn.Sequential):
            blocks = [m for m in child if len(list(m.children())) > 0]
            if len(blocks) >= 2:
                for i, m in enumerate(child):
                    if len(list(m.children())) > 0:
                        child[i] = wrap(m)
                        wrapped += 1
                continue
            if len(child) >= 4 and not blocks:
                segments = _segments(list(child))
                if len(segments) >= 2:
                    setattr(module, name, torch.nn.Sequential(
                        *(wrap(torch.nn.Sequential(*seg)) for seg in segments)))
                    wrapped += len(segments)
                    continue
        wrapped += _wrap_blocks(child, options)
    return wrapped


def _segments(layers: list[torch.nn.Module]) -> list[list[torch.nn.Module]]:
    """About sqrt(n) runs of layers, each starting at a layer with parameters."""
    starts = [i for i, m in enumerate(layers) if any(True for _ in m.parameters(recurse=False))]
    if not starts:
        return [layers]
    every = max(1, round(len(starts) ** 0.5))
    cuts = [0] + starts[every::every] + [len(layers)]
    return [layers[a:b] for a, b in zip(cuts, cuts[1:]) if b > a]
