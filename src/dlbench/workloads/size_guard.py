"""Refuse, before anything is built, a model whose weights and training state cannot fit.

A model far too large for the device (``hf:gpt2?n_layer=10000``, 71 billion parameters) would
otherwise grow on the CPU until the kernel kills the process, or fail on the GPU only after
minutes. Its parameters are counted on the meta device (:meth:`ModelSpec.count_params`: no
memory, a fraction of a second), multiplied by the bytes each one needs at the least, and
compared with the device's total memory: the GPU's, or the host's RAM on the CPU.

The estimate is a lower bound, so that a model that would fit is never refused: it counts only
what a step must hold for every parameter (activations, buffers, the allocator's slack and the
CUDA context come on top):

- weights: 4 bytes. The model is built in fp32 at every precision; bf16 and fp16 run through
  autocast, which casts per operation and keeps the fp32 weights.
- training (``--method standard``), for each trainable parameter: its gradient (4 bytes, as
  the weight's dtype) and the optimizer's state: SGD's momentum (4), AdamW's two moments (8).
  So 12 bytes a parameter with SGD, 16 with AdamW. ``--method fwd-bwd`` keeps gradients and
  no optimizer: 8.
- eval: the weights alone.

A model that cannot be built on meta (a user's factory that insists on real tensors) is not
counted, and not refused.
"""

from __future__ import annotations

import functools
import os

import torch

from dlbench.models.base import ModelSpec
from dlbench.models.size import ParamCount
from dlbench.records.throughput import ThroughputConfig
from dlbench.workloads.devices import UnsupportedError

#: Bytes of one weight: fp32 at every precision (autocast keeps the weights in fp32).
WEIGHT_BYTES = 4
#: Bytes of one gradient: the weight's dtype.
GRAD_BYTES = 4
#: Bytes of optimizer state per trainable parameter (SGD: momentum; AdamW: two moments).
OPTIMIZER_BYTES = {"sgd": 4, "adamw": 8}


class ModelTooLargeError(UnsupportedError):
    """The model's weights and training state alone exceed the device's memory."""


def bytes_per_param(cfg: ThroughputConfig) -> tuple[int, int]:
    """(bytes of a frozen parameter, bytes of a trainable one) that ``cfg``'s step holds at least."""
    if cfg.mode != "train":
        return WEIGHT_BYTES, WEIGHT_BYTES
    if cfg.method == "fwd-bwd":
        return WEIGHT_BYTES, WEIGHT_BYTES + GRAD_BYTES
    return WEIGHT_BYTES, WEIGHT_BYTES + GRAD_BYTES + OPTIMIZER_BYTES.get(cfg.optimizer, 0)


def min_bytes(cfg: ThroughputConfig, count: ParamCount) -> int:
    """The least memory ``cfg``'s step needs for a model of ``count`` parameters."""
    frozen, trainable = bytes_per_param(cfg)
    return (count.total - count.trainable) * frozen + count.trainable * trainable


def device_memory(device: torch.device) -> int | None:
    """The total memory of ``device``: the GPU's, or the host's RAM; None where unknown."""
    try:
        if device.type == "cuda":
            return int(torch.cuda.get_device_properties(device).total_memory)
        if device.type == "cpu":
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError, AttributeError, RuntimeError):
        pass
    return None


@functools.lru_cache(maxsize=64)
def _count(spec: ModelSpec, input_size: int) -> ParamCount | None:
    return spec.count_params(input_size)


def check_fits(cfg: ThroughputConfig, spec: ModelSpec, device: torch.device) -> None:
    """Raise :class:`ModelTooLargeError` (an UnsupportedError: one line, exit 2 before a sweep)
    when ``cfg``'s model cannot fit on ``device``, with the whole model on it."""
    if cfg.framework != "torch":  # JAX builds its own model
        return
    total = device_memory(device)
    if total is None:
        return
    count = _count(spec, cfg.input_size or spec.input_size)
    if count is None:
        return
    need = min_bytes(cfg, count)
    if need <= total:
        return
    frozen, trainable = bytes_per_param(cfg)
    what = {WEIGHT_BYTES: "weights", WEIGHT_BYTES + GRAD_BYTES: "weights and gradients"}.get(
        trainable, f"weights, gradients and {cfg.optimizer} state")
    where = ("the host's RAM" if device.type == "cpu" else
             f"{torch.cuda.get_device_name(device)}'s memory")
    raise ModelTooLargeError(
        f"{spec.name}: {count.total / 1e9:.3g} billion parameters need at least "
        f"{need / 2**30:.1f} GiB for {cfg.mode} ({what}: {trainable} bytes a parameter), more "
        f"than {where} ({total / 2**30:.1f} GiB); measure a smaller model")
