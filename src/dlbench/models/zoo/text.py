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

#: What ``--pad-vocab`` pads the vocabulary to a multiple of (nanoGPT's choice for gpt2).
VOCAB_MULTIPLE = 64


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
        from transformers import AttentionInterface  # slow to import: only to build a model
        from transformers.integrations.sdpa_attention import sdpa_attention_forward  # as above
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


def tiny_gpt2(input_size: int) -> nn.Module:
    """A 2-layer GPT-2 with a 100-token vocabulary (not a multiple of 64), for tests of the
    transformers path and of vocabulary padding on the CPU."""
    transformers = require("transformers")
    config = _config("GPT2Config", n_layer=2, n_embd=32, n_head=2, vocab_size=100,
                     n_positions=max(32, input_size), bos_token_id=99, eos_token_id=99)
    return LogitsOnly(transformers.GPT2LMHeadModel(config))


def pad_vocabulary(model: nn.Module, multiple: int = VOCAB_MULTIPLE) -> int:
    """Pad the vocabulary of a :class:`LogitsOnly` transformers model to a multiple of
    ``multiple`` in place; returns the new size (the old one where it is a multiple already).

    An odd vocabulary (gpt2's 50,257) gives the logits and their gradient rows of an odd
    length, which are not 16-byte aligned and keep cuBLAS off its best tensor-core kernels for
    the lm-head GEMMs; nanoGPT pads to 50,304 for that. The new rows get the model's own
    initialisation (``mean_resizing=False``: nothing here is pretrained) and no token id or
    target ever points at them. transformers re-ties tied input and output embeddings, and
    resizes BERT's output bias with them.
    """
    inner = model.model if isinstance(model, LogitsOnly) else None
    if inner is None or not hasattr(inner, "resize_token_embeddings"):
        raise TypeError(f"cannot pad the vocabulary of a {type(model).__name__}: only a "
                        "transformers language model (wrapped in LogitsOnly) can be padded")
    size = inner.get_input_embeddings().num_embeddings
    if size % multiple == 0:
        return size
    return inner.resize_token_embeddings(pad_to_multiple_of=multiple,
                                         mean_resizing=False).num_embeddings


def causal_lm(model_type: str, fields: dict[str, Any], input_size: int) -> nn.Module:
    """A transformers decoder LM of ``model_type`` with the config ``fields`` for a training
    step: random weights, no KV cache, causal SDPA with no mask built; the position table long
    enough for ``input_size``."""
    fields = dict(fields)
    for positions in ("max_position_embeddings", "n_positions"):
        if positions in fields:
            fields[positions] = max(fields[positions], input_size)
    transformers = require("transformers")
    config = transformers.AutoConfig.for_model(
        model_type, attn_implementation=_attention_implementation(), use_cache=False, **fields)
    return LogitsOnly(transformers.AutoModelForCausalLM.from_config(config))
