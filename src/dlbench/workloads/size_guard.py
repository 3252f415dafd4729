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

``dlbench scale`` (:func:`check_scaling_fits`) holds the same per parameter, split as each
strategy splits it. Every rank builds the whole model on its device before any strategy wraps
it (:func:`dlbench.workloads.scaling.measure_rank`), so each rank holds at least the whole
model's weights (4 bytes a parameter) at its start, whatever the strategy; then:

- ddp, dp: every replica holds the whole state (dp's first GPU holds the module it replicates);
- ps: every rank holds the weights and their gradients, and the optimizer state of its shard
  alone (a 1/N share);
- fsdp, fsdp+tp: the state is sharded over all N ranks (1/N each); tp: split over its N ranks
  (what TP leaves whole, embeddings and norms, only adds). With ``--offload`` the shards live in
  host memory, which the ranks of a host share.

On the CPU the ranks of a host (gloo processes) share its RAM: their sum is compared with it.

A model that cannot be built on meta (a user's factory that insists on real tensors) is not
counted, and not refused.
"""

from __future__ import annotations

import functools
import os

import torch

from dlbench.models.base import ModelSpec
from dlbench.models.size import ParamCount
from dlbench.records.scaling import ScalingConfig
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
    raise ModelTooLargeError(
        f"{spec.name}: {count.total / 1e9:.3g} billion parameters need at least "
        f"{need / 2**30:.1f} GiB for {cfg.mode} ({what}: {trainable} bytes a parameter), more "
        f"than {_where(device)} ({total / 2**30:.1f} GiB); measure a smaller model")


def _where(device: torch.device) -> str:
    return ("the host's RAM" if device.type == "cpu" else
            f"{torch.cuda.get_device_name(device)}'s memory")


def rank_min_bytes(cfg: ScalingConfig, count: ParamCount) -> tuple[int, int]:
    """(on each rank's device, in each rank's host memory) at the least, for ``cfg``'s strategy
    (see the module's doc): the device part is never below the whole model's weights, which
    every rank builds before the strategy splits them."""
    n = cfg.gpus
    frozen = (count.total - count.trainable) * WEIGHT_BYTES
    weights = count.trainable * WEIGHT_BYTES
    grads = count.trainable * GRAD_BYTES
    state = count.trainable * OPTIMIZER_BYTES.get(cfg.base.optimizer, 0)
    built = frozen + weights  # the whole model, on every rank, before any split
    if cfg.strategy in ("ddp", "dp"):
        return built + grads + state, 0
    if cfg.strategy == "ps":
        return built + grads + -(-state // n), 0
    sharded = -(-(built + grads + state) // n)
    if cfg.offload:  # the shards in host memory; the device keeps the built model at its start
        return built, sharded
    return max(built, sharded), 0


def check_scaling_fits(cfg: ScalingConfig, spec: ModelSpec, device: torch.device) -> None:
    """Raise :class:`ModelTooLargeError` when ``cfg``'s ranks cannot hold the model, split as
    its strategy splits it: each rank's share against its GPU, or the ranks of one host
    together against its RAM on the CPU (and with ``--offload``)."""
    base = cfg.base
    if base.framework != "torch":  # JAX builds its own model
        return
    count = _count(spec, base.input_size or spec.input_size)
    if count is None:
        return
    on_device, on_host = rank_min_bytes(cfg, count)
    per_host = cfg.processes // cfg.nnodes
    checks = [(on_host * per_host, torch.device("cpu"))] if on_host else []
    if device.type == "cpu":  # gloo ranks share the host's RAM
        checks = [((on_device + on_host) * per_host, device)]
    else:
        checks.insert(0, (on_device, device))
    split = {"ddp": "every rank holds all of it", "dp": "the first GPU holds all of it",
             "ps": "every rank holds the weights and gradients, and its shard of the optimizer "
                   "state"}.get(cfg.strategy)
    if split is None:
        split = (f"{'split' if cfg.strategy == 'tp' else 'sharded'} over {cfg.gpus} ranks, "
                 "after each rank built the whole model")
    built = count.total * WEIGHT_BYTES
    for need, where in checks:
        total = device_memory(where)
        if total is None or need <= total:
            continue
        ranks = per_host if where.type == "cpu" else 1
        whose = (f"the {ranks} ranks of a host need at least {need / 2**30:.1f} GiB together"
                 if ranks > 1 else f"each rank needs at least {need / 2**30:.1f} GiB")
        if where.type == device.type and built * ranks > total:
            hint = ("measure a smaller model: every rank builds the whole model before its "
                    "strategy splits it")
        elif cfg.strategy in ("ddp", "dp", "ps"):
            hint = 'measure a smaller model, or shard it (strategy="fsdp")'
        else:
            hint = "measure a smaller model, or shard it over more GPUs"
        # The model's name starts the message, so the strategy is named as a keyword
        # argument, which the command line spells as its flag wherever it stands.
        raise ModelTooLargeError(
            f"{spec.name}: {count.total / 1e9:.3g} billion parameters with "
            f'strategy="{cfg.strategy}" on {cfg.gpus} '
            f"{'GPU' if device.type == 'cuda' else 'rank'}(s): "
            f"{whose} (weights, gradients and {base.optimizer} state; {split}), more than "
            f"{_where(where)} ({total / 2**30:.1f} GiB); {hint}")
