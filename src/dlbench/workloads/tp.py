"""Tensor parallelism (TP) of a transformer's blocks with DTensor, as torchtitan applies it to
Llama; and TP inside FSDP2 on a 2-D device mesh (``fsdp+tp``).

In each block of the model's repeated stack (:func:`dlbench.workloads.fsdp.repeated_blocks`)
the attention's q/k/v projections are split by output features (``ColwiseParallel``: each rank
computes its own heads) and its output projection by input features (``RowwiseParallel``: the
ranks' partial sums are all-reduced); the MLP's gate/up projections colwise and its down
projection rowwise. That is Megatron-LM's layout, with its projections unfused: two all-reduces
forward per block (after o and down), and five backward (the input gradient of each colwise
projection, where Megatron's fused QKV and gate-up layers need two). Everything else (embeddings, norms, the LM head) stays replicated on every rank of a TP
group, and every rank of one TP group must feed the very same batch.

Only the Llama layout (``self_attn.{q,k,v,o}_proj``, ``mlp.{gate,up,down}_proj``, all
``nn.Linear``) is known; a model whose blocks differ (GPT-2's fused ``c_attn`` Conv1D) is refused
with :class:`UnsupportedError`, never run unsplit under a TP label.

The device mesh is ``(dp, tp)`` in row-major order: global rank ``r`` is TP rank ``r % tp`` of
data-parallel replica ``r // tp``, so the ranks of a TP group are neighbours (one host's GPUs).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from dlbench.workloads.devices import UnsupportedError
from dlbench.workloads.fsdp import compile_blocks, repeated_blocks, shard

#: The registry models whose blocks have the layout tensor parallelism knows (``hf:`` decoders
#: of the same layout, Mistral or Qwen2 say, pass its check too).
SUPPORTED_MODELS = ("llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "tiny_llama")

#: Submodules split by output features (colwise) and by input features (rowwise).
COLWISE = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj",
           "mlp.up_proj")
ROWWISE = ("self_attn.o_proj", "mlp.down_proj")


def replica_of(rank: int, tp: int) -> int:
    """The data-parallel replica (index on the mesh's ``dp`` dimension) of global ``rank``."""
    return rank // tp


def _unsupported(model: nn.Module, why: str) -> UnsupportedError:
    inner = getattr(model, "model", model)  # text models are wrapped to return logits only
    return UnsupportedError(
        f"strategy tp/fsdp+tp: {type(inner).__name__} {why}. Tensor parallelism knows the Llama "
        f"block layout (self_attn.q/k/v/o_proj, mlp.gate/up/down_proj as nn.Linear): "
        f'{", ".join(SUPPORTED_MODELS)}; use strategy="fsdp" or ddp for this model', "strategy")


def tp_blocks(model: nn.Module, degree: int) -> list[nn.Module]:
    """The blocks TP splits, after checking that each has the Llama layout and that its heads
    and MLP width divide by ``degree``; raises :class:`UnsupportedError` otherwise.

    Called before any collective, so every rank refuses the same model the same way.
    """
    blocks = repeated_blocks(model)
    if not blocks:
        raise _unsupported(model, "has no repeated stack of transformer blocks")
    for block in blocks:
        for name in COLWISE + ROWWISE:
            if not isinstance(_submodule(block, name), nn.Linear):
                raise _unsupported(model, f"blocks ({type(block).__name__}) have no nn.Linear "
                                          f"{name}")
    attn, mlp = blocks[0].get_submodule("self_attn"), blocks[0].get_submodule("mlp")
    head_dim = getattr(attn, "head_dim", None)
    if head_dim is None:
        raise _unsupported(model, "attention has no head_dim")
    heads = attn.q_proj.out_features // head_dim
    kv_heads = attn.k_proj.out_features // head_dim
    width = mlp.gate_proj.out_features
    for what, n in (("attention heads", heads), ("key/value heads", kv_heads),
                    ("MLP features", width)):
        if n % degree:
            raise UnsupportedError(f"strategy tp/fsdp+tp: a TP degree of {degree} does not "
                                   f"divide the model's {n} {what}; pick a degree that does",
                                   "strategy")
    return blocks


def _submodule(module: nn.Module, name: str) -> nn.Module | None:
    try:
        return module.get_submodule(name)
    except AttributeError:
        return None


def block_plan() -> dict[str, Any]:
    """The TP plan of one Llama block: q/k/v and gate/up colwise, o and down rowwise.

    Outputs stay plain local tensors (``use_local_output``): the attention then sees its own
    heads, and its ``view(..., -1, head_dim)`` finds the local head count by itself.
    """
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel  # heavy

    plan: dict[str, Any] = {name: ColwiseParallel() for name in COLWISE}
    plan.update({name: RowwiseParallel() for name in ROWWISE})
    return plan


def make_mesh(device: torch.device, tp: int):
    """The job's ``(dp, tp)`` device mesh over every rank (row-major: see the module's doc)."""
    from torch.distributed.device_mesh import init_device_mesh  # heavy: distributed

    world = dist.get_world_size()
    if world % tp:
        raise UnsupportedError(f"a TP degree of {tp} does not divide the job's {world} ranks")
    return init_device_mesh(device.type, (world // tp, tp), mesh_dim_names=("dp", "tp"))


def _same_replicated(model: nn.Module, mesh) -> None:
    """Every rank of a TP group starts from its first rank's replicated (plain) parameters.

    Every rank builds the model from the same seed, so they agree already; this makes sure, as
    DDP's broadcast does, at one collective per parameter at set-up (not in the timed steps).
    """
    group = mesh["tp"].get_group()
    src = dist.get_global_rank(group, 0)
    with torch.no_grad():
        for p in model.parameters():
            if not hasattr(p, "device_mesh"):  # a DTensor is TP's already
                dist.broadcast(p.data, src=src, group=group)


def parallelize(model: nn.Module, device: torch.device, tp: int, *, sharded: bool,
                precision: str, compile_mode: str | None, offload: bool = False) -> nn.Module:
    """``model`` tensor-parallel over groups of ``tp`` ranks; with ``sharded``, also FSDP2 over
    the mesh's ``dp`` dimension (``fsdp+tp``), its shards in host memory with ``offload``.
    ``compile_mode`` compiles each block after TP and before FSDP, as torchtitan orders them;
    the root then runs eagerly.

    Without ``sharded`` the job must be one TP group (``--strategy tp``: no data parallelism).
    """
    from torch.distributed.tensor.parallel import parallelize_module  # heavy: distributed

    blocks = tp_blocks(model, tp)  # refuses an unknown layout before any collective
    mesh = make_mesh(device, tp)
    if not sharded and mesh["dp"].size() != 1:
        raise UnsupportedError("strategy tp is one TP group over every rank; with data "
                               'parallelism too, use strategy="fsdp+tp"', "strategy")
    if mesh["dp"].get_local_rank() != replica_of(dist.get_rank(), tp):
        raise RuntimeError("the device mesh's dp index is not rank // tp: batches would differ "
                           "within a TP group")
    plan = block_plan()
    for block in blocks:
        parallelize_module(block, mesh["tp"], plan)
    _same_replicated(model, mesh)
    if compile_mode:
        compile_blocks(model, compile_mode)
    if sharded:
        model = shard(model, precision, mesh=mesh["dp"], offload=offload)
    return model
