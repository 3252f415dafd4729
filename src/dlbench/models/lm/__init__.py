"""Decoder language models for generation: name -> :class:`LmSpec` -> a causal LM on a device.

Three ways to name one, as elsewhere in dlbench:

- a name shipped here (``llama-3.1-8b``, ``gpt2``...): an architecture config copied from the
  model's published ``config.json`` (``configs.json``, each entry with its source), built with
  random weights on the device; nothing is downloaded;
- ``hf:NAME_OR_DIR[?FIELD=VALUE&...]``: a transformers model type or known hub name built from
  its config, or a local directory; a directory that also holds weights (``*.safetensors`` or
  ``*.bin``) has them loaded;
- ``FILE.py:FUNC``: ``FUNC()`` returns a transformers causal LM (anything with ``.config`` and
  ``.generate``), random or trained.

The shape facts the figures need (parameters, layers, KV heads...) come from :func:`lm_shape`,
which builds the model on the meta device: exact counts, no memory, no time.
"""

from __future__ import annotations

import difflib
import functools
import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from dlbench.models.errors import ModelSourceError, UnknownModelError


@dataclass(frozen=True)
class LmEntry:
    """A shipped architecture config."""

    name: str
    title: str
    model_type: str
    config: dict[str, Any]
    source: str
    test: bool = False


@functools.cache
def shipped() -> dict[str, LmEntry]:
    """The architecture configs dlbench ships (``configs.json``), by name."""
    text = resources.files("dlbench.models.lm").joinpath("configs.json").read_text()
    data = json.loads(text)["models"]
    return {name: LmEntry(name, e["title"], e["model_type"], e["config"], e["source"],
                          bool(e.get("test", False)))
            for name, e in data.items()}


def lm_names(include_tests: bool = False) -> list[str]:
    return [n for n, e in shipped().items() if include_tests or not e.test]


@dataclass(frozen=True)
class LmSpec:
    """A language model that can be built: its config (or factory) and where it came from.

    Attributes:
        name: as the user named it (the record's ``model``).
        description: what it is and where its config came from.
        config: the transformers config (None for a ``FILE.py:FUNC`` factory).
        weights_dir: a local directory whose weights are loaded (``hf:DIR`` with weights).
        factory: ``FILE.py:FUNC``'s function.
    """

    name: str
    description: str
    config: Any = None
    weights_dir: str | None = None
    factory: Callable[[], Any] | None = None

    def build_on(self, device: Any, dtype: Any) -> Any:
        """The causal LM on ``device`` in ``dtype``, in eval mode. Random weights are made on
        the device itself: an 8B model's 16 GB never pass through the host."""
        import torch  # heavy: only to build
        if self.factory is not None:
            model = self.factory()
            if not hasattr(model, "generate") or not hasattr(model, "config"):
                raise ModelSourceError(f"{self.name}: the factory must return a transformers "
                                       "causal LM (with .config and .generate); got "
                                       f"{type(model).__name__}")
            return model.to(device=device, dtype=dtype).eval()
        transformers = _transformers()
        if self.weights_dir is not None:
            model = transformers.AutoModelForCausalLM.from_pretrained(
                self.weights_dir, dtype=dtype, local_files_only=True, trust_remote_code=False)
            return model.to(device).eval()
        config = self.config.__class__.from_dict(self.config.to_dict())
        with torch.device(device):
            model = transformers.AutoModelForCausalLM.from_config(
                config, dtype=dtype, attn_implementation="sdpa", trust_remote_code=False)
        return model.eval()


def _transformers() -> Any:
    from dlbench.models.zoo import require
    return require("transformers")


def get_lm(name: str) -> LmSpec:
    """The spec of ``name``; :class:`UnknownModelError` (naming close matches) if none."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may be fetched
    if name in shipped():
        e = shipped()[name]
        transformers = _transformers()
        config = transformers.AutoConfig.for_model(e.model_type, **e.config)
        return LmSpec(name, f"{e.title} (architecture config from {e.source}; random weights)",
                      config=config)
    if name.startswith("hf:"):
        from dlbench.models.sources import hf_config  # heavy: transformers
        config, what = hf_config(name, name[len("hf:"):])
        if getattr(config, "is_encoder_decoder", False):
            raise ModelSourceError(f"{name}: an encoder-decoder model; dlbench generate "
                                   "measures decoder language models")
        ref = name[len("hf:"):].partition("?")[0]
        weights = ref if ref and _has_weights(Path(ref)) else None
        if weights and "?" in name:
            raise ModelSourceError(f"{name}: {ref} holds trained weights, which fix the "
                                   "model's shapes; drop the ?FIELD=VALUE changes")
        kind = "trained weights from " + ref if weights else "random weights"
        return LmSpec(name, f"{config.model_type} ({what}; {kind})", config=config,
                      weights_dir=weights)
    if ".py:" in name:
        from dlbench.models.sources import load_factory  # the user's file, imported here
        path, _, func = name.rpartition(":")
        return LmSpec(name, f"{func}() from {path}", factory=load_factory(name, path, func))
    close = difflib.get_close_matches(name, lm_names(include_tests=True), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UnknownModelError(
        f"unknown language model {name!r}{hint} `dlbench generate --list-models` lists the "
        "shipped ones; hf:NAME_OR_DIR and FILE.py:FUNC name others")


def _has_weights(path: Path) -> bool:
    return path.is_dir() and (any(path.glob("*.safetensors")) or any(path.glob("*.bin")))


@dataclass(frozen=True)
class LmShape:
    """What the generation figures need of a model's shape (counts are exact).

    Attributes:
        params: every parameter (a tied embedding counted once).
        embedding_params: the input embedding table (and position table, where there is one):
            a decode step reads only its batch's rows of it.
        lm_head_params: the output projection; 0 when tied to the input embedding (the tied
            table is then read in full by the head at every step).
        layers, hidden, kv_heads, head_dim, heads, vocab: the architecture.
        decode_weight_bytes: the bytes of the weights a decode step reads in full (every
            parameter but the embedding lookups; a tied table, which the head reads), as the
            built model holds them: fp8 weights at one byte each plus their scales
            (:func:`tensor_bytes`). None where not counted (a meta-device shape, whose bytes
            depend on the precision it will be built in).
        embedding_row_bytes: the bytes of one row of the input embedding table as held: what
            each sequence's lookup reads. None where not counted.
    """

    params: int
    embedding_params: int
    lm_head_params: int
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    decode_weight_bytes: int | None = None
    embedding_row_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict
        return asdict(self)


def tensor_bytes(t: Any) -> int:
    """The bytes a tensor holds: a plain tensor's elements; a tensor subclass's inner tensors
    (torchao's quantized weights: their fp8 data and their scales), found through the subclass
    protocol's ``__tensor_flatten__``, recursively. A subclass's own ``element_size()`` is
    its logical dtype's (bf16 for an fp8 weight), not what it stores."""
    if hasattr(type(t), "__tensor_flatten__"):
        names, _ = t.__tensor_flatten__()
        return sum(tensor_bytes(inner) for inner in (getattr(t, n) for n in names)
                   if inner is not None)
    return t.numel() * t.element_size()


def lm_shape(model: Any, count_bytes: bool = False) -> LmShape:
    """The shape of a built causal LM (a meta-device build is enough); with ``count_bytes``
    also the bytes its weights hold (a model built on its device, in its precision)."""
    import torch  # heavy: only with a model
    cfg = model.config
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    unique: dict[int, Any] = {}
    for p in model.parameters():  # parameters() already yields a tied tensor once
        unique.setdefault(id(p), p)
    params = sum(p.numel() for p in unique.values())
    emb = model.get_input_embeddings()
    lookups = [emb.weight] if emb is not None else []
    for name, module in model.named_modules():  # GPT-2's learned positions are a lookup too
        if name.endswith("wpe") and isinstance(module, torch.nn.Embedding):
            lookups.append(module.weight)
    embedding = sum(t.numel() for t in lookups)
    head = model.get_output_embeddings()
    tied = head is not None and emb is not None and head.weight is emb.weight
    head_params = 0 if (head is None or tied) else head.weight.numel()
    read = row = None
    if count_bytes:
        skip = {id(t) for t in lookups}
        read = sum(tensor_bytes(p) for i, p in unique.items() if i not in skip)
        read += tensor_bytes(emb.weight) if tied else 0  # the head reads the whole table
        row = tensor_bytes(emb.weight) // emb.weight.shape[0] if emb is not None else 0
    hidden = int(getattr(text, "hidden_size", None) or getattr(text, "n_embd"))
    heads = int(getattr(text, "num_attention_heads", None) or getattr(text, "n_head"))
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(text, "head_dim", None) or hidden // heads)
    layers = int(getattr(text, "num_hidden_layers", None) or getattr(text, "n_layer"))
    return LmShape(params=params, embedding_params=embedding, lm_head_params=head_params,
                   layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                   head_dim=head_dim, vocab=int(text.vocab_size), tied=tied,
                   decode_weight_bytes=read, embedding_row_bytes=row)


def meta_params(spec: LmSpec) -> int | None:
    """The parameters of ``spec``'s model, counted on the meta device without building all of
    a deep stack: up to :data:`~dlbench.models.sources.COUNT_ALL_LAYERS` layers the whole model,
    a deeper one from exact counts of its first one to four layers (a lower bound, as the size
    guard of ``throughput`` counts: ``hf:gpt2?n_layer=10000`` in well under a second, where
    :func:`meta_shape` builds all 10,000 layers). None for a factory (known only once built)."""
    if spec.config is None:
        return None
    from dlbench.models.size import count_on_meta, extrapolate  # heavy: torch
    from dlbench.models.sources import COUNT_ALL_LAYERS  # heavy: torch
    transformers = _transformers()

    def build(layers: int | None = None) -> Any:
        config = spec.config.__class__.from_dict(spec.config.to_dict())
        if layers is not None:
            config.num_hidden_layers = layers
        return transformers.AutoModelForCausalLM.from_config(config, trust_remote_code=False)
    layers = getattr(spec.config, "num_hidden_layers", None)
    if isinstance(layers, int) and not isinstance(layers, bool) and layers > COUNT_ALL_LAYERS:
        few = [1, 2, 3, 4]
        counts = [count_on_meta(functools.partial(build, n)) for n in few]
        if all(c is not None for c in counts):
            return extrapolate(counts, few, layers).total
    count = count_on_meta(build)
    return None if count is None else count.total


def meta_shape(spec: LmSpec) -> LmShape:
    """:func:`lm_shape` of ``spec`` built on the meta device (no memory, no weights)."""
    import torch  # heavy: only with a model
    if spec.config is None:  # a factory: built for real, on the CPU, once
        return lm_shape(spec.factory())
    transformers = _transformers()
    config = spec.config.__class__.from_dict(spec.config.to_dict())
    with torch.device("meta"):
        return lm_shape(transformers.AutoModelForCausalLM.from_config(
            config, trust_remote_code=False))
