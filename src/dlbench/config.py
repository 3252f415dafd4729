"""What every kind of config shares: the error a bad value raises, and the allowed values.

Each record kind keeps its own config beside it (:mod:`dlbench.records`); nothing here touches a device. Errors name the command-line
flag that set the bad value, so a user knows what to change.
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
    """A configuration that cannot run; the message says which flag to change."""



def choice(flag: str, value: str, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise ConfigError(f"{flag} must be one of {', '.join(allowed)}; got {value!r}")
