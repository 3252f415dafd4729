"""Language models from Hugging Face transformers, built from a config (random weights, no download).

Each is wrapped so that ``module(input_ids [B, T]) -> logits [B, T, vocab]``, with no padding
mask and no KV cache: a pre-training step on full, fixed-length sequences.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dlbench.models.zoo import require

#: Attention implementation registered with transformers (see ``_attention_implementation``).
MASKLESS_SDPA = "dlbench_maskless_sdpa"


class LogitsOnly(nn.Module):
    """Calls a transformers model on token ids alone and returns its ``logits`` tensor."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids).logits


def _attention_implementation() -> str:
    """transformers' own SDPA attention, registered under a name its mask builder does not know.

    With ``attn_implementation="sdpa"`` transformers 5.x builds the attention mask itself on
    every forward, which full-length unpadded inputs do not need: in eager mode it probes the
    position ids for packed sequences with ``.all()``, a host-device sync per step, and on the
    meta device (FLOP counting) that probe fails outright; under ``torch.compile`` it
    materialises a [B, 1, T, T] causal mask, which keeps SDPA off its flash kernel (a compiled
    GPT-2 training step ran 11% slower on an H100 that way). An attention name with no
    registered mask function makes transformers skip mask creation (mask ``None``), and its
    ``sdpa_attention_forward`` then takes ``is_causal`` from the layer (True in GPT-2, False in
    BERT's encoder): the same logits, with no mask built. Falls back to plain ``"sdpa"`` on
    transformers versions without ``AttentionInterface``.
    """
    try:
        from transformers import AttentionInterface
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
    except ImportError:
        return "sdpa"
    AttentionInterface.register(MASKLESS_SDPA, sdpa_attention_forward)
    return MASKLESS_SDPA


def _config(cls_name: str, **kwargs: Any) -> Any:
    transformers = require("transformers")
    return getattr(transformers, cls_name)(
        attn_implementation=_attention_implementation(), use_cache=False, **kwargs
    )


def bert_base(input_size: int) -> nn.Module:
    """BERT-base masked LM (``BertConfig()`` defaults, 30522-token vocabulary, no NSP head).

    The position table keeps its default 512 rows unless a longer sequence is asked for.
    """
    transformers = require("transformers")
    config = _config("BertConfig", max_position_embeddings=max(512, input_size))
    return LogitsOnly(transformers.BertForMaskedLM(config))


def gpt2(input_size: int) -> nn.Module:
    """GPT-2 small, 124M (``GPT2Config()`` defaults, tied input/output embeddings).

    The position table keeps its default 1024 rows unless a longer sequence is asked for.
    """
    transformers = require("transformers")
    config = _config("GPT2Config", n_positions=max(1024, input_size))
    return LogitsOnly(transformers.GPT2LMHeadModel(config))
