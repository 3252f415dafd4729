"""FLOPs and parameter counts of a model, counted by PyTorch on the meta device.

Convention: one multiply-add is 2 FLOPs. ``torch.utils.flop_counter.FlopCounterMode`` counts
matrix multiplies, convolutions and attention (including their backward); element-wise ops
(activations, normalisation, the loss, pooling) are not counted, as is usual for model FLOPs.
Attention is counted in full (a causal mask does not halve it), as in the usual MFU formulas.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any, Literal

import torch
from torch.utils.flop_counter import FlopCounterMode

from dlbench.models.base import ModelSpec

Mode = Literal["train", "eval"]

# Counted at batch 2 and divided by 2: a batch of one takes special paths in some models
# (squeezed dimensions, matrix-vector kernels) that batch 2 does not.
_COUNT_BATCH = 2


def count_flops(spec: ModelSpec, mode: Mode, input_size: int | None = None) -> int:
    """FLOPs per sample of one step of ``spec`` at ``input_size`` (default: the spec's).

    ``eval`` counts the forward pass under ``torch.no_grad``; ``train`` counts forward, loss
    and backward, as executed (counted, not assumed to be 3x the forward). The optimizer step
    is not counted. A sample is one image or one sequence (divide by ``units_per_sample`` for
    FLOPs per token). The model runs on the meta device, so counting costs neither real compute
    nor memory; results are cached per (spec, mode, input size).

    Raises:
        ValueError: ``mode`` is neither ``"train"`` nor ``"eval"``.
    """
    if mode not in ("train", "eval"):
        raise ValueError(f'mode must be "train" or "eval", not {mode!r}')
    return _count_flops_cached(spec, mode, input_size or spec.input_size)


@functools.lru_cache(maxsize=None)
def _count_flops_cached(spec: ModelSpec, mode: Mode, input_size: int) -> int:
    # ModelSpec hashes on its data fields (name, sizes, ...), not on the factory.
    try:
        return _count(spec, mode, input_size, torch.device("meta"), _COUNT_BATCH)
    except (NotImplementedError, RuntimeError) as exc:
        # An op without a meta kernel, or one that reads a tensor's value (``.item()``), cannot
        # run on meta. Count on the CPU instead, at batch 1 to bound the real compute and memory.
        warnings.warn(
            f"FLOPs of {spec.name} counted on the CPU at batch 1: the meta device failed ({exc})",
            RuntimeWarning,
            stacklevel=3,
        )
        return _count(spec, mode, input_size, torch.device("cpu"), 1)


def _conv_backward_flop(
    grad_out_shape: list[int], x_shape: list[int], w_shape: list[int], _bias: Any, _stride: Any,
    _padding: Any, _dilation: Any, transposed: bool, _output_padding: Any, _groups: int,
    output_mask: list[bool], out_shape: Any = None, **kwargs: Any,
) -> int:
    """FLOPs of ``aten.convolution_backward``, correct for grouped convolutions.

    PyTorch's own formula (torch 2.9 to 2.14 at least) counts the weight gradient of a grouped
    convolution ``groups`` times over: for NASNet's depthwise convolutions that made a training
    step count 11x its forward. Each of the two gradients costs what the forward costs:
    2 x batch x (spatial size on the weight's output side) x (weight elements), where the
    weight already holds ``in_channels / groups`` per output channel.
    """
    spatial = x_shape[2:] if transposed else grad_out_shape[2:]
    per_gradient = 2 * x_shape[0] * math.prod(spatial) * math.prod(w_shape)
    return per_gradient * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


_FLOP_OVERRIDES = {torch.ops.aten.convolution_backward: _conv_backward_flop}


def _count(spec: ModelSpec, mode: Mode, input_size: int, device: torch.device, batch: int) -> int:
    with device:
        model = spec.build(input_size)
    inputs, targets = spec.make_batch(batch, device, input_size)
    model.train(mode == "train")
    with FlopCounterMode(display=False, custom_mapping=_FLOP_OVERRIDES) as counter:
        if mode == "train":
            spec.loss(model(inputs), targets).backward()
        else:
            with torch.no_grad():
                model(inputs)
    return round(counter.get_total_flops() / batch)


@functools.lru_cache(maxsize=None)
def params_count(spec: ModelSpec) -> int:
    """Number of parameters of ``spec`` at its default input size (shared weights counted once)."""
    with torch.device("meta"):
        model = spec.build()
    # parameters() yields a tied tensor (e.g. GPT-2's input and output embedding) once.
    return sum(p.numel() for p in model.parameters())
