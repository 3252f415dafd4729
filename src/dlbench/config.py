"""What every kind of config shares: the error a bad value raises, and the allowed values.

Each record kind keeps its own config beside it (:mod:`dlbench.records`); nothing here touches
a device. Errors name the config field that holds the bad value, as a Python caller spells it
(``precision``, ``batch_size``); the command line prints the flag that sets it instead
(:func:`dlbench.commands.common.as_flags`).
"""

from __future__ import annotations

from typing import Sequence

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")
MODES = ("train", "eval")
OPTIMIZERS = ("sgd", "adamw")
# "standard": forward, loss, backward, optimizer step (train) or forward under no_grad (eval).
# "fwd-bwd":  the method of the classic ms-per-batch scripts: forward + out.sum().backward(), no
#             loss, no optimizer (train), forward under no_grad (eval); reported in ms per batch.
METHODS = ("standard", "fwd-bwd")
# Who builds and runs the step: PyTorch (dlbench.workloads) or JAX (dlbench.frameworks.jax).
FRAMEWORKS = ("torch", "jax")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
DEVICES = ("auto", "cpu", "cuda")
# "default": PyTorch's choice (foreach kernels on CUDA); "foreach"; "fused": one kernel per step.
OPTIMIZER_IMPLS = ("default", "foreach", "fused")
# torch.nn.attention.SDPBackend members the scaled-dot-product attention may be pinned to.
ATTENTION_BACKENDS = ("flash", "efficient", "cudnn", "math")
# Activation checkpointing (--checkpointing POLICY): recompute everything a block computed, or
# keep its matmuls' and attention's outputs and recompute the rest (dlbench.workloads.checkpointing).
CHECKPOINT_POLICIES = ("full", "selective")


# Multi-GPU training strategies: DistributedDataParallel, nn.DataParallel, parameter server,
# FSDP (parameters, gradients and optimizer state sharded over the ranks: FSDP2's fully_shard),
# tensor parallel (DTensor, each block's matmuls split over the ranks) and both on a 2-D mesh.
STRATEGIES = ("ddp", "dp", "ps", "fsdp", "tp", "fsdp+tp")
BACKENDS = ("auto", "nccl", "gloo")
# Interconnect profiles (their NCCL variables: dlbench.launch.interconnect).
INTERCONNECT_PROFILES = ("default", "no-p2p", "no-shm", "no-p2p+no-shm", "no-ib")


class ConfigError(ValueError):
    """A configuration that cannot run; the message says which field to change.

    A config's own checks speak of its fields as a Python caller writes them, the field first
    (``precision must be one of ...``, ``cuda_graph with checkpointing: ...``), and advice as
    keyword arguments (``use precision="bf16"``). The error says which words are fields:
    ``field``, the one the message is about, and ``also``, the other fields it names bare. The
    command line, which knows the flag that sets each field, prints the flags in their place
    (:func:`dlbench.commands.common.as_flags`). An error about no field leaves both empty.
    """

    def __init__(self, message: str, field: str | None = None, *,
                 also: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.field = field
        self.also = tuple(also)

    @property
    def fields(self) -> tuple[str, ...]:
        """Every field the message names bare, the one it is about first."""
        return ((self.field,) if self.field else ()) + self.also


def choice(field: str, value: str, allowed: Sequence[str]) -> None:
    """Refuse ``value`` for ``field`` unless it is one of ``allowed``."""
    if value not in allowed:
        raise ConfigError(f"{field} must be one of {', '.join(allowed)}; got {value!r}", field)
