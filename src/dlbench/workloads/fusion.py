"""Fused projections: a transformer layer's sibling linear layers that read the same input (a
Llama layer's q/k/v projections; its MLP's gate and up projections) computed as one matmul.

At decode time a step reads every weight once and each matmul is a matrix-vector product, so
the number of kernels matters as much as the bytes: three small kernels (k and v are a quarter
of q under grouped-query attention) leave the GPU's memory system idle in each one's ramp and
tail. One matmul over the concatenated weight reads the same bytes in one kernel, which is what
the serving stacks (vLLM's ``QKVParallelLinear``, gpt-fast's ``wqkv``) do.

The model's own forward code is untouched: each original layer is replaced by a
:class:`_Slice` that returns its columns of the fused product. The first sibling called with an
input computes the product for all; the others, called with the same tensor, take their slice
of it; the last drops it. A sibling called with another input (a model that reorders its calls)
computes its own slice: slower, never wrong.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from dlbench.workloads.devices import UnsupportedError

#: Sibling linear layers fused, by attribute names under a module (attention, then MLP), and
#: the name the fused weight takes there.
SIBLINGS = ((("q_proj", "k_proj", "v_proj"), "qkv_fused"),
            (("gate_proj", "up_proj"), "gate_up_fused"))


class FusedWeight(nn.Module):
    """The concatenated weight (and bias) of ``parts``; holds the last product between calls.

    Its weight is used as an ``nn.Linear``'s is (``F.linear``), so whatever replaces a linear
    layer's weight works on it too: ``--precision fp8`` quantizes it after fusion, one fp8
    matmul for the group (:mod:`dlbench.workloads.fp8_inference`)."""

    def __init__(self, parts: Sequence[nn.Linear]) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.cat([p.weight.detach() for p in parts]),
                                   requires_grad=False)
        biases = [p.bias for p in parts]
        self.bias = None if any(b is None for b in biases) else nn.Parameter(
            torch.cat([b.detach() for b in biases]), requires_grad=False)
        self.last_input: torch.Tensor | None = None
        self.last_output: torch.Tensor | None = None


class _Slice(nn.Module):
    """Rows ``start:stop`` of a fused weight: what one original linear layer computed."""

    def __init__(self, fused: FusedWeight, start: int, stop: int, last: bool) -> None:
        super().__init__()
        object.__setattr__(self, "fused", fused)  # not a submodule: its parent owns it
        self.start, self.stop, self.last = start, stop, last
        self.in_features = fused.weight.shape[1]
        self.out_features = stop - start

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.fused
        if f.last_input is x:
            out = f.last_output[..., self.start:self.stop]
        elif self.start == 0:  # the first sibling: one matmul for all
            full = F.linear(x, f.weight, f.bias)
            f.last_input, f.last_output = x, full
            out = full[..., self.start:self.stop]
        else:  # called out of order: its own rows only
            bias = None if f.bias is None else f.bias[self.start:self.stop]
            return F.linear(x, f.weight[self.start:self.stop], bias)
        if self.last:
            f.last_input = f.last_output = None
        return out


def fuse_projections(model: nn.Module) -> int:
    """Fuse every group of :data:`SIBLINGS` in ``model`` in place; returns the groups fused.

    Raises :class:`UnsupportedError` when the model has none (GPT-2's attention is already one
    ``c_attn`` matmul; a layout dlbench does not know is left to the user to fuse)."""
    groups = 0
    for module in list(model.modules()):
        for names, fused_name in SIBLINGS:
            parts = [getattr(module, n, None) for n in names]
            if not all(isinstance(p, nn.Linear) for p in parts):
                continue
            fused = FusedWeight(parts)
            fused.to(parts[0].weight.device)
            module.add_module(fused_name, fused)
            start = 0
            for i, (name, part) in enumerate(zip(names, parts)):
                stop = start + part.out_features
                setattr(module, name, _Slice(fused, start, stop, last=i == len(parts) - 1))
                start = stop
            groups += 1
    if not groups:
        raise UnsupportedError(
            f"fuse: {type(model).__name__} has no separate q/k/v or gate/up projections to "
            "fuse (Llama-family layouts have them); run without fuse=True", "fuse")
    return groups
