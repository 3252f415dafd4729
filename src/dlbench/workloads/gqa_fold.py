"""Decode attention of a grouped-query model without copying its keys and values (``--fold-gqa``).

Under grouped-query attention (Llama 3, Qwen 2.5, Mistral) each key/value head serves a group
of query heads: llama-3.1-8b has 32 query heads over 8 key/value heads. transformers' SDPA
attention hands that to PyTorch's fused kernels (``enable_gqa``) only when there is no attention
mask; over a static KV cache there always is one (the positions not yet filled are masked), so
it copies every key/value head once per query head of its group (``repeat_kv``) before the
kernel reads them. A decode step then writes and reads the whole KV cache group-size times
over: at llama-3.1-8b's largest batch on an H100 (711 sequences, a 24 GB cache) the compiled
static-cache step took 93.9 ms a token where ``generate()``'s dynamic cache, which needs no
mask, took 43.8 ms.

Folding is what paged-attention decode kernels do: at decode each sequence has one query
position, so a group's query heads are laid out as that key/value head's query *positions*,
``[batch, kv_heads, group, head_dim]``, and one attention call reads each key/value head once.
The mask (one row per sequence) broadcasts over the group. The arithmetic is the same; the
result equals the unfolded one up to the kernels' rounding. Prefill (many query positions,
bound by arithmetic, not by the cache) and models without groups keep transformers' SDPA path.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

#: The attention implementation's name in transformers' registries.
NAME = "dlbench_gqa_fold"


def folded_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                value: torch.Tensor, attention_mask: torch.Tensor | None,
                dropout: float = 0.0, scaling: float | None = None,
                is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: ``query`` is ``[batch, heads, positions,
    head_dim]``, ``key``/``value`` ``[batch, kv_heads, cached, head_dim]``; returns
    ``[batch, positions, heads, head_dim]`` as transformers' SDPA function does."""
    from transformers.integrations.sdpa_attention import (  # heavy: transformers
        sdpa_attention_forward)

    groups = getattr(module, "num_key_value_groups", 1)
    batch, heads, positions, head_dim = query.shape
    if groups == 1 or positions != 1 or dropout:
        return sdpa_attention_forward(module, query, key, value, attention_mask,
                                      dropout=dropout, scaling=scaling, is_causal=is_causal,
                                      **kwargs)
    # Query heads h*groups ... h*groups + groups-1 share key/value head h (repeat_kv's order),
    # so the view keeps each query head with its key/value head, as its group's positions.
    q = query.view(batch, key.shape[1], groups, head_dim)
    out = F.scaled_dot_product_attention(q, key, value, attn_mask=attention_mask, scale=scaling)
    return out.reshape(batch, heads, 1, head_dim).transpose(1, 2).contiguous(), None


def fold_gqa(model: Any) -> int:
    """Switch ``model`` (a transformers model) to folded decode attention; returns its
    query heads per key/value head. A model without grouped-query attention is refused: the
    lever would change nothing and its label would say it had."""
    from transformers import AttentionInterface, AttentionMaskInterface  # heavy: transformers
    from transformers.masking_utils import sdpa_mask  # heavy: transformers

    from dlbench.workloads.devices import UnsupportedError

    config = model.config
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    if not heads or not kv_heads or heads == kv_heads:
        raise UnsupportedError(
            f"fold_gqa: {type(model).__name__} has {heads} query heads over "
            f"{kv_heads} key/value heads, no grouped-query attention to fold", "fold_gqa")
    AttentionInterface.register(NAME, folded_sdpa)
    AttentionMaskInterface.register(NAME, sdpa_mask)  # SDPA's boolean masks
    model.set_attn_implementation(NAME)
    return heads // kv_heads
