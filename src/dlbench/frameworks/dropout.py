"""Dropout in the PyTorch vs JAX comparison: one rule for both frameworks.

The rule: a training step drops at the rates of the PyTorch model's own config (torchvision's,
transformers'), in both frameworks, at the same places; inference drops nothing. dlbench never
changes the PyTorch model's rates (its figures are the ones every other table shows), so the JAX
twins take theirs from :data:`RATES` (:mod:`dlbench.frameworks.jax.models`) and each JAX record
says what its step dropped (``env.jax.dropout``). A test checks :data:`RATES` against the PyTorch
models as built and against the twins' behaviour.

What dropout cannot make equal, and the comparison view says: the masks come from different
generators (PyTorch's Philox, drawn inside SDPA's fused kernel for attention; JAX's threefry
through ``jax.random``, drawn by XLA ops of their own), so equal rates are equal work, not equal
numbers.

No JAX here: the report imports this.
"""

from __future__ import annotations

from typing import Any, Mapping

#: Per model with a JAX twin: where its PyTorch model drops in training, and at what rate.
#: GPT-2: ``GPT2Config``'s embd_pdrop, resid_pdrop (after the attention projection and after
#: the MLP) and attn_pdrop (attention probabilities, inside SDPA). VGG-16: torchvision's two
#: classifier dropouts. ViT-B/16: torchvision's ``dropout`` and ``attention_dropout`` are 0.
RATES: dict[str, dict[str, float]] = {
    "resnet50": {},
    "vgg16": {"classifier": 0.5},
    "vit_b_16": {},
    "cnn10": {},
    "gpt2": {"embedding": 0.1, "residual": 0.1, "attention": 0.1},
    "tiny_cnn": {},
    "tiny_gpt": {},
}

#: What the JAX twins dropped before this rule (records without ``env.jax.dropout``): GPT-2's
#: attention probabilities were not dropped, since ``jax.nn.dot_product_attention`` has no
#: dropout; every other rate was already the PyTorch model's.
_BEFORE_RULE_MISSING = {"gpt2": ("attention",)}


def applied(model: str, mode: str) -> dict[str, float]:
    """The rates a step of ``model`` in ``mode`` drops at (the same in both frameworks): the
    PyTorch model's in training, none in inference."""
    return dict(RATES.get(model, {})) if mode == "train" else {}


def describe(rates: Mapping[str, float]) -> str:
    """``attention 0.1, embedding 0.1, residual 0.1`` (sorted), or ``none``."""
    return ", ".join(f"{k} {v:g}" for k, v in sorted(rates.items()) if v) or "none"


def of_torch(record: Any) -> dict[str, float] | None:
    """What a PyTorch record's step dropped: its model's config rates in training (the model
    runs in train mode there, ``model.train(mode == "train")``); None for a model outside
    :data:`RATES`."""
    c = getattr(record.config, "base", record.config)
    return applied(c.model, c.mode) if c.model in RATES else None


def of_jax(record: Any) -> dict[str, float] | None:
    """What a JAX record's step dropped: ``env.jax.dropout`` where the record has it; for a
    record written before the rule, what the twin did then; None for a model outside
    :data:`RATES`."""
    c = getattr(record.config, "base", record.config)
    said = ((record.env or {}).get("jax") or {}).get("dropout")
    if said is not None:
        return {k: float(v) for k, v in said.items()}
    if c.model not in RATES:
        return None
    return {k: v for k, v in applied(c.model, c.mode).items()
            if k not in _BEFORE_RULE_MISSING.get(c.model, ())}


def predates_rule(record: Any) -> bool:
    """A JAX record written before its step recorded what it dropped."""
    return "dropout" not in ((record.env or {}).get("jax") or {})
