"""The arithmetic of generation: bytes a decode step must read, FLOPs a prefill does, the KV
cache, and the largest batch that fits. Pure functions of a model's shape, tested on known
numbers.

Conventions (said in docs/generation.md):

- **Bytes per decode step** are the bytes the step cannot avoid reading: every weight once,
  except the input embedding table (and GPT-2's position table), of which a step reads only its
  batch's rows; a head tied to the embedding reads that table in full. Plus the KV cache of the
  positions each sequence attends to, plus the one new position it writes. A path that reads
  more (a static cache padded to its full length, unfused element-wise kernels) does so at its
  own cost: the bound is what the model needs, not what one implementation does. The weights
  count as the built model holds them where the record has that count (the shape's
  ``decode_weight_bytes``: fp8 weights at one byte each plus their scales, the layers left in
  bf16 at two), else at the precision's bytes per parameter.
- **FLOPs** are matmul FLOPs, 2 per multiply-add, of the linear layers and of attention
  (QK^T and AV, causal: only the half a token attends to), as torchtitan and the PaLM paper
  count them; element-wise work is not counted. A prefill computes the vocabulary logits of
  the last position only (what ``generate`` does), so the head counts once per sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from dlbench.measure.stats import mean, percentile

#: Bytes per element of each precision's activations and KV cache: fp8 quantizes the linear
#: layers' weights and their inputs, and keeps the rest (and the cache) in bf16.
ACTIVATION_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 2}
CACHE_BYTES = ACTIVATION_BYTES
#: Bytes per parameter of the weights dlbench quantizes (in fp8: the blocks' linear layers;
#: the embedding, the LM head and the norms stay in :data:`ACTIVATION_BYTES`), so
#: ``params * WEIGHT_BYTES`` is a lower bound of a model's weights.
WEIGHT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


def model_weight_bytes(shape: Any, precision: str) -> int:
    """A model's weights in ``precision``, from its shape: the embedding tables and the LM head
    at the activations' bytes, every other parameter at :data:`WEIGHT_BYTES` (in fp8 the norms
    too, and the per-row scales, 4 bytes a row, are left out: a few in ten thousand of an 8B
    model's bytes)."""
    kept = shape.embedding_params + shape.lm_head_params
    return (shape.params - kept) * WEIGHT_BYTES[precision] + kept * ACTIVATION_BYTES[precision]


def weight_bytes_per_step(shape: Any, precision: str, batch: int) -> int:
    """Weight bytes one decode step reads: every weight once, the embedding rows of its batch.
    As the built model holds them where the shape has that count (``decode_weight_bytes`` and
    ``embedding_row_bytes``, counted by the workload on the model it measured), else (records
    made before that count) from the parameter counts at the precision's bytes."""
    held = getattr(shape, "decode_weight_bytes", None)
    row = getattr(shape, "embedding_row_bytes", None)
    if held is not None and row is not None:
        return held + batch * row
    w, a = WEIGHT_BYTES[precision], ACTIVATION_BYTES[precision]
    # the head reads its own table, or the tied embedding table, in full
    head = shape.vocab * shape.hidden if shape.tied else shape.lm_head_params
    blocks = shape.params - shape.embedding_params - (0 if shape.tied else shape.lm_head_params)
    return blocks * w + head * a + batch * shape.hidden * a


def kv_bytes_per_token(shape: Any, precision: str) -> int:
    """KV-cache bytes of one position of one sequence: a key and a value per layer and KV head."""
    return 2 * shape.layers * shape.kv_heads * shape.head_dim * CACHE_BYTES[precision]


def kv_cache_bytes(shape: Any, precision: str, batch: int, positions: int) -> int:
    """The KV cache of ``batch`` sequences of ``positions`` positions."""
    return batch * positions * kv_bytes_per_token(shape, precision)


def mean_context(prompt_len: int, output_len: int) -> float:
    """Mean number of positions a decode step attends to. Decode step k (k = 1 .. N-1) feeds
    token k and attends to the prompt, the k tokens before it and itself: P + k positions."""
    steps = output_len - 1
    if steps < 1:
        return 0.0
    return prompt_len + (1 + steps) / 2


def decode_bytes_per_step(shape: Any, precision: str, batch: int, prompt_len: int,
                          output_len: int) -> float:
    """Mean bytes a decode step must read (and write) over a request's decode steps."""
    kv = kv_bytes_per_token(shape, precision)
    context = mean_context(prompt_len, output_len)
    # Reads the positions attended to; writes the new one (counted once more: a write).
    return weight_bytes_per_step(shape, precision, batch) + batch * kv * (context + 1)


def _linear_flops_per_token(shape: Any) -> int:
    """2 FLOPs per weight of the layers every token passes (not the head, not the lookups)."""
    head = shape.vocab * shape.hidden
    return 2 * (shape.params - shape.embedding_params - (0 if shape.tied else head))


def _attention_flops(shape: Any, queries: int, keys: float) -> float:
    """QK^T and AV of ``queries`` positions over ``keys`` positions each, all layers and heads."""
    return 2 * 2 * shape.layers * shape.heads * shape.head_dim * queries * keys


def prefill_flops(shape: Any, batch: int, prompt_len: int) -> float:
    """FLOPs of a prefill of ``batch`` prompts of ``prompt_len`` tokens (causal attention: the
    token at position i attends to i + 1 positions), with the head's logits for the last
    position of each sequence."""
    per_seq = (_linear_flops_per_token(shape) * prompt_len
               + _attention_flops(shape, 1, prompt_len * (prompt_len + 1) / 2)
               + 2 * shape.vocab * shape.hidden)
    return batch * per_seq


def decode_flops_per_step(shape: Any, batch: int, prompt_len: int, output_len: int) -> float:
    """Mean FLOPs of a decode step (one token per sequence, its logits, its attention)."""
    per_seq = (_linear_flops_per_token(shape) + 2 * shape.vocab * shape.hidden
               + _attention_flops(shape, 1, mean_context(prompt_len, output_len)))
    return batch * per_seq


def prefill_activation_bytes(shape: Any, precision: str, prompt_len: int,
                             intermediate: int | None = None) -> int:
    """A rough upper bound on one sequence's transient prefill memory: a layer's attention
    projections and MLP input, its gate and up products, the activated gate and the product
    of the two at once (four intermediate-sized tensors: with ``--fuse`` gate and up are one
    tensor of twice the width), and the last logits in fp32. Three intermediate-sized tensors
    were one too few: on an H100, ``-b auto`` chose batch 2,770 for llama-3.2-1b, whose
    compiled and fused prefill then asked for one more 5.4 GiB tensor than was free."""
    w = ACTIVATION_BYTES[precision]
    inter = intermediate or 4 * shape.hidden
    per_token = (6 * shape.hidden + 4 * inter) * w
    return prompt_len * per_token + shape.vocab * 4


def largest_batch(shape: Any, precision: str, prompt_len: int, output_len: int,
                  memory_bytes: int, intermediate: int | None = None,
                  headroom: float = 0.9, cap: int = 4096, kv_copies: int = 2) -> int:
    """The largest batch whose weights, KV cache and prefill activations fit in ``headroom`` of
    ``memory_bytes``; 0 when not even the weights do. Capped at ``cap``: beyond a few thousand
    sequences a step is compute-bound and the curve is flat.

    ``kv_copies=2``: transformers' dynamic cache (``generate()``'s default) grows by
    concatenation, so for a moment it holds the old cache and the new one; the batch is sized
    for that, so that every path is measured at the same largest batch."""
    weights = model_weight_bytes(shape, precision)
    free = memory_bytes * headroom - weights
    per_seq = (kv_copies * kv_cache_bytes(shape, precision, 1, prompt_len + output_len)
               + prefill_activation_bytes(shape, precision, prompt_len, intermediate))
    if free < per_seq:
        return 0
    return int(min(cap, free // per_seq))


@dataclass(frozen=True)
class Latency:
    """Percentiles of a set of times (seconds)."""

    mean_s: float
    median_s: float
    p90_s: float
    p99_s: float
    n: int


def latency(times: Sequence[float]) -> Latency | None:
    """Mean, median, p90 and p99 of ``times``; None when there are none."""
    if not times:
        return None
    return Latency(mean(times), percentile(times, 50), percentile(times, 90),
                   percentile(times, 99), len(times))
