"""FSDP: the model's parameters, gradients and optimizer state sharded over the ranks (ZeRO-3),
with PyTorch's FSDP2 (``torch.distributed.fsdp.fully_shard``), as torchtitan applies it.

Each block of the model's repeated stack (a transformer's layers: the largest
``nn.ModuleList`` by parameters) is a unit of its own, so a block's parameters are gathered just
before it runs and freed after, and the root takes what is left (embeddings, head, final norm).
Mixed precision as torchtitan's default: parameters gathered and computed in the run's low
precision (bf16 or fp16), gradients reduced in fp32, the optimizer on fp32 shards.

With ``--compile`` each block is compiled on its own before it is sharded
(:func:`compile_blocks`), as torchtitan does: the blocks share one compiled graph, and FSDP's
all-gather and reshard hooks run between compiled blocks instead of breaking one whole-model
graph.

With ``--offload`` every ``fully_shard`` call takes FSDP2's ``CPUOffloadPolicy``: the sharded
parameters, their gradients and so the optimizer state live in host memory; each unit's
parameters are copied to the GPU for its all-gather and its gradients back to the host after the
reduce-scatter, and the optimizer steps on the CPU (PyTorch's behaviour: slow for the largest
models, but it frees the GPU of everything but the gathered units and the activations).
"""

from __future__ import annotations

import torch
from torch import nn

#: The dtype FSDP gathers parameters in, per ``--precision`` (fp32 and tf32 keep fp32).
PARAM_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def repeated_blocks(model: nn.Module) -> list[nn.Module]:
    """The blocks of the model's repeated stack: the children of its largest ``nn.ModuleList``
    (by parameters); none for a model without one (a CNN is then sharded as one unit)."""
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) > 1]
    if not lists:
        return []
    stack = max(lists, key=lambda m: sum(p.numel() for p in m.parameters()))
    return list(stack)


def compile_blocks(model: nn.Module, mode: str) -> int:
    """Compile the ``forward`` of each block of the model's repeated stack with
    ``torch.compile(mode=mode)``, in place; returns the number of blocks (0: none compiled).

    The forward is compiled, not the module (``torch.compile(block)`` or ``block.compile()``):
    the module's hooks, FSDP's all-gather before a block and reshard after it, then stay outside
    the compiled frame instead of breaking the graph, and the parameters keep their names (no
    ``_orig_mod.``). The blocks share one code object, so one graph serves them all. Call it
    before :func:`shard`, after tensor parallelism (torchtitan's order).
    """
    blocks = repeated_blocks(model)
    for block in blocks:
        block.forward = torch.compile(block.forward, mode=mode)
    return len(blocks)


def shard(model: nn.Module, precision: str, mesh=None, *, offload: bool = False) -> nn.Module:
    """``model`` sharded block by block, then at its root: over the default process group, or
    over ``mesh`` (a 1-D device mesh: the ``dp`` dimension of fsdp+tp's 2-D mesh). With
    ``offload``, every unit's shards are kept in host memory (:func:`offload_policy`)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # heavy: distributed

    policies = {"mp_policy": MixedPrecisionPolicy(param_dtype=PARAM_DTYPES.get(precision),
                                                  reduce_dtype=torch.float32)}
    if offload:
        policies["offload_policy"] = offload_policy(model)
    for block in repeated_blocks(model):
        fully_shard(block, mesh=mesh, **policies)
    fully_shard(model, mesh=mesh, **policies)
    return model


def offload_policy(model: nn.Module):
    """FSDP2's CPU offload policy for ``model``: its shards in pinned host memory when the model
    was built on a GPU (PyTorch's default: the copies to and from the GPU then run without
    blocking the host); unpinned on the CPU, where there is no device to copy to and pinning
    needs CUDA ("Found no NVIDIA driver" from a gloo job without one)."""
    from torch.distributed.fsdp import CPUOffloadPolicy  # heavy: distributed

    on_gpu = any(p.device.type == "cuda" for p in model.parameters())
    return CPUOffloadPolicy() if on_gpu else CPUOffloadPolicy(pin_memory=False)


def full_parameters(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter whole, on every rank (sharded ones gathered: a collective, so every rank
    must call it), copied to the CPU: a snapshot that steps trained afterwards leave as it is."""
    out = {}
    for name, p in model.named_parameters():
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        out[name] = full.detach().to("cpu", copy=True)
    return out
